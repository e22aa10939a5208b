"""The CLI without a server: settings, docs, start-up commands, failures, formatting.

A few tests run `python -m gpufleet` as a real subprocess, so the entry point itself (not
only the Typer app) is shown to print one line and exit 1 when the server is unreachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import pytest
from typer.testing import CliRunner

from gpufleet.cli.commands.common import query
from gpufleet.cli.commands.fleet import _allocation_labels
from gpufleet.cli.main import app
from gpufleet.cli.output import gib, labels_text, when
from gpufleet.domain.inventory import GpuStatus
from gpufleet.settings import Settings, settings_markdown
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DOCS = REPO / "docs" / "settings.md"
UNREACHABLE_URL = "http://127.0.0.1:9"

runner = CliRunner()


def invoke(*args: object, input: str | None = None):
    return runner.invoke(app, [str(a) for a in args], input=input)


def one_error_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --- config ------------------------------------------------------------------------------------

def test_config_show_lists_every_setting_with_its_source(monkeypatch):
    monkeypatch.setenv("GPUFLEET_PORT", "9999")
    monkeypatch.setenv("GPUFLEET_TOKEN", "gfa_secret-value")
    result = invoke("config", "show", "--json")
    assert result.exit_code == 0, result.output
    views = {v["name"]: v for v in json.loads(result.stdout)}
    assert set(views) == set(Settings.model_fields)
    assert (views["port"]["value"], views["port"]["source"]) == (9999, "environment (GPUFLEET_*)")
    assert views["host"]["source"] == "default"
    assert views["token"]["value"] == "********"
    assert all(v["description"] for v in views.values())

    table = invoke("config", "show").stdout
    assert "gfa_secret-value" not in table
    port_row = next(line.split() for line in table.splitlines() if line.startswith("port "))
    assert port_row[:3] == ["port", "9999", "environment"]
    for name in Settings.model_fields:
        assert f"{name} " in table


def test_config_show_reports_an_invalid_setting_in_one_line(monkeypatch):
    monkeypatch.setenv("GPUFLEET_PORT", "eighty")
    assert "invalid setting: port" in one_error_line(invoke("config", "show"))


def test_config_docs_check_passes_against_the_committed_docs():
    result = invoke("config", "docs", "--check", "--output", DOCS)
    assert result.exit_code == 0, result.output
    assert "up to date" in result.stdout


def test_config_docs_writes_and_then_checks(tmp_path):
    target = tmp_path / "docs" / "settings.md"
    assert "is missing" in one_error_line(invoke("config", "docs", "--check", "-o", target))
    assert invoke("config", "docs", "--output", target).exit_code == 0
    assert target.read_text() == settings_markdown()
    assert invoke("config", "docs", "--check", "-o", target).exit_code == 0
    target.write_text(target.read_text() + "edited by hand\n")
    assert "out of date" in one_error_line(invoke("config", "docs", "--check", "-o", target))


# --- failures before any answer ----------------------------------------------------------------

def test_unreachable_server_is_one_clear_line(monkeypatch):
    monkeypatch.setenv("GPUFLEET_URL", UNREACHABLE_URL)
    monkeypatch.setenv("GPUFLEET_TOKEN", "gfa_anything")
    line = one_error_line(invoke("fleet", "summary"))
    assert line == (f"error: cannot reach the gpufleet server at {UNREACHABLE_URL} (is it "
                    "running? set GPUFLEET_URL or run `gpufleet login`)")


def test_no_token_says_how_to_get_one():
    assert "no API token" in one_error_line(invoke("fleet", "ls"))


def test_a_url_that_is_not_http_is_refused(monkeypatch):
    monkeypatch.setenv("GPUFLEET_URL", "gpufleet.example:8080")
    monkeypatch.setenv("GPUFLEET_TOKEN", "gfa_anything")
    assert "must start with http://" in one_error_line(invoke("whoami"))


def test_usage_errors_keep_exit_status_2():
    result = invoke("fleet", "ls", "--limit", "zero")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def _run_module(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "gpufleet", *args], capture_output=True,
                          text=True, env=environment, timeout=60, check=False)


def test_subprocess_unreachable_server(tmp_path):
    done = _run_module("node", "ls", env={
        "GPUFLEET_URL": UNREACHABLE_URL, "GPUFLEET_TOKEN": "gfa_anything",
        "GPUFLEET_CONFIG_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: cannot reach the gpufleet server at {UNREACHABLE_URL} (is it running? set "
        "GPUFLEET_URL or run `gpufleet login`)"]


def test_subprocess_help_lists_the_command_groups(tmp_path):
    done = _run_module("--help", env={"GPUFLEET_CONFIG_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    for group in ("fleet", "node", "gpu", "token", "project", "config", "serve", "agent"):
        assert group in done.stdout


# --- the commands that start something ---------------------------------------------------------

@pytest.fixture
def fake_module(monkeypatch):
    """Install a stand-in module whose one function records its arguments."""
    def install(module_name: str, function_name: str, result: int = 0) -> list[dict]:
        calls: list[dict] = []

        def record(*args, **kwargs):
            calls.append({"args": args, **kwargs})
            return result

        module = types.ModuleType(module_name)
        setattr(module, function_name, record)
        monkeypatch.setitem(sys.modules, module_name, module)
        return calls
    return install


def test_serve_passes_flags_as_settings(fake_module, tmp_path, monkeypatch):
    calls = fake_module("gpufleet.server", "run_server")
    monkeypatch.setenv("GPUFLEET_HOST", "0.0.0.0")
    result = invoke("serve", "--port", "9090", "--data-dir", tmp_path)
    assert result.exit_code == 0, result.output
    (settings,) = calls[0]["args"]
    assert (settings.port, settings.data_dir, settings.host) == (9090, tmp_path, "0.0.0.0")
    assert settings.database_url is None


def test_serve_exit_status_comes_from_the_server(fake_module):
    fake_module("gpufleet.server", "run_server", result=3)
    assert invoke("serve").exit_code == 3


def test_demo_passes_its_options(fake_module, tmp_path):
    calls = fake_module("gpufleet.demo", "run_demo")
    assert invoke("demo", "--port", "8181", "--data-dir", tmp_path, "--reset",
                  "--seed", "7").exit_code == 0
    assert calls == [{"args": (), "data_dir": tmp_path, "port": 8181, "reset": True,
                      "seed": 7}]
    invoke("demo")
    assert calls[1] == {"args": (), "data_dir": None, "port": 8080, "reset": False,
                        "seed": None}


def test_the_demo_judges_idleness_over_a_quarter_hour_unless_told_otherwise(tmp_path,
                                                                           monkeypatch):
    from gpufleet.demo.runner import DEMO_IDLE_WINDOW_HOURS, demo_settings
    assert demo_settings(tmp_path).idle_window_hours == DEMO_IDLE_WINDOW_HOURS == 0.25
    assert Settings().idle_window_hours == 4.0  # a real server keeps DESIGN's default
    monkeypatch.setenv("GPUFLEET_IDLE_WINDOW_HOURS", "2")
    assert demo_settings(tmp_path).idle_window_hours == 2.0


def test_agent_takes_the_join_token_from_the_environment(fake_module, tmp_path, monkeypatch):
    calls = fake_module("gpufleet.agent_main", "main", result=2)
    monkeypatch.setenv("GPUFLEET_JOIN_TOKEN", "gfj_from-env")
    result = invoke("agent", "--server", "http://fleet:8080", "--state-dir", tmp_path,
                    "--sim-shape", "dgx-h100", "--hostname", "gpu-1", "--seed", "4")
    assert result.exit_code == 2
    assert calls == [{"args": (), "backend": "sim", "server": ["http://fleet:8080"],
                      "join_token": "gfj_from-env", "state_dir": tmp_path,
                      "sim_shape": "dgx-h100", "hostname": "gpu-1", "seed": 4,
                      "dcgm_exporter_url": None, "collect_interval_s": 10.0,
                      "upload_interval_s": 60.0, "spool_max_mb": 256.0, "once": False,
                      "metrics_port": None, "metrics_address": "0.0.0.0"}]


def test_agent_takes_several_servers_repeated_or_from_the_environment(fake_module, tmp_path,
                                                                     monkeypatch):
    calls = fake_module("gpufleet.agent_main", "main", result=0)
    invoke("agent", "--server", "http://a:8080", "--server", "http://b:8080,http://c:8080",
           "--state-dir", tmp_path)
    monkeypatch.setenv("GPUFLEET_AGENT_SERVERS", "http://a:8080,http://b:8080")
    invoke("agent", "--state-dir", tmp_path)
    assert [call["server"] for call in calls] == [
        ["http://a:8080", "http://b:8080,http://c:8080"], ["http://a:8080,http://b:8080"]]


# --- formatting and query building -------------------------------------------------------------

@pytest.mark.parametrize(("memory_bytes", "text"), [
    (80 * 1024**3, "80"), (85_520_809_984, "79.6"), (None, "-")])
def test_memory_in_gib(memory_bytes, text):
    assert gib(memory_bytes) == text


@pytest.mark.parametrize(("timestamp", "text"), [
    ("2026-11-02T09:00:00Z", "2026-11-02 09:00Z"),
    ("2026-11-02T18:30:59+09:00", "2026-11-02 09:30Z"),
    ("2026-11-02T09:00:00", "2026-11-02 09:00Z"),
    (None, "-")])
def test_timestamps_in_utc(timestamp, text):
    assert when(timestamp) == text


def test_labels_text_is_sorted():
    assert labels_text({"rack": "r1", "project": "vision"}) == "project=vision rack=r1"
    assert labels_text({"allocation": "GR-1001,GR-1002"}) == "allocation=GR-1001,GR-1002"
    assert labels_text({}) == "-"


def test_query_repeats_lists_and_drops_what_was_not_given():
    assert query(environment=["a", "b"], status=[GpuStatus.FREE], node=None, health=[],
                 include_revoked=True, limit=5) == [
        ("environment", "a"), ("environment", "b"), ("status", "free"),
        ("include_revoked", "true"), ("limit", "5")]


def test_allocation_and_project_are_label_shortcuts():
    assert _allocation_labels(["rack=r1"], "GR-1042", "vision") == [
        "rack=r1", "allocation=GR-1042", "project=vision"]
    assert _allocation_labels(None, None, None) == []
