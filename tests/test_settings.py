"""Settings are declared once, documented, layered (flag > env > file > login > default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from gpufleet.settings import (
    Settings,
    describe_settings,
    load_settings,
    settings_markdown,
)
from tests.paths import REPO_ROOT

REPO = REPO_ROOT
DOCS = REPO / "docs" / "settings.md"


@pytest.fixture
def config_file(tmp_path, monkeypatch):
    """A TOML config file named by GPUFLEET_CONFIG_FILE; write its text with `.write_text`."""
    path = tmp_path / "gpufleet.toml"
    monkeypatch.setenv("GPUFLEET_CONFIG_FILE", str(path))
    return path


def sources() -> dict[str, str]:
    return {view.name: view.source for view in describe_settings()}


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_has_a_description(name):
    description = Settings.model_fields[name].description
    assert description and len(description.split()) >= 3, f"{name} is undocumented"


def test_docs_match_the_declarations():
    assert DOCS.is_file(), "docs/settings.md is missing; write it with settings_markdown()"
    assert DOCS.read_text() == settings_markdown(), (
        "docs/settings.md is stale; regenerate it with `gpufleet config docs`")


def test_markdown_lists_every_setting_with_its_variable():
    text = settings_markdown()
    for name in Settings.model_fields:
        assert f"| `{name}` | `GPUFLEET_{name.upper()}` |" in text


def test_defaults_when_nothing_is_configured():
    settings = load_settings()
    assert settings.port == 8080
    assert settings.heartbeat_interval_s == 30.0
    assert set(sources().values()) == {"default"}


def test_file_overrides_default_and_env_overrides_file(config_file, monkeypatch):
    config_file.write_text('port = 9000\nhost = "0.0.0.0"\nlog_level = "debug"\n')
    assert (load_settings().port, load_settings().host) == (9000, "0.0.0.0")
    monkeypatch.setenv("GPUFLEET_PORT", "9100")
    settings = load_settings()
    assert (settings.port, settings.host, settings.log_level) == (9100, "0.0.0.0", "debug")
    assert load_settings(port=9200, host=None).port == 9200  # a flag beats both; None is unset


def test_describe_settings_names_each_source(config_file, monkeypatch):
    config_file.write_text('port = 9000\nhost = "0.0.0.0"\n')
    monkeypatch.setenv("GPUFLEET_PORT", "9100")
    monkeypatch.setenv("GPUFLEET_PAGE_SIZE_MAX", "500")
    login = Path(os.environ["GPUFLEET_CONFIG_DIR"]) / "login.json"
    login.write_text(json.dumps({"url": "https://fleet.example", "token": "gfa_secret"}))
    views = {v.name: v for v in describe_settings(load_settings(log_level="warning",
                                                                port=None))}
    assert views["port"].value == 9100
    assert views["port"].source == "environment (GPUFLEET_*)"
    assert views["page_size_max"].source == "environment (GPUFLEET_*)"
    assert views["host"].source == f"file {config_file}"
    assert views["log_level"].source == "command line"
    assert views["url"].source.startswith("login ")
    assert views["url"].value == "https://fleet.example"
    assert views["token"].source.startswith("login ")
    assert views["token"].value == "********"  # never the secret itself
    assert views["heartbeat_interval_s"].source == "default"
    assert {v.description for v in views.values()} == {
        f.description for f in Settings.model_fields.values()}


def test_a_value_the_program_chose_and_a_password_in_a_url_are_described_as_such(monkeypatch):
    monkeypatch.setenv("GPUFLEET_DATABASE_URL", "postgresql+psycopg://fleet:s3cret@db:5432/gf")
    settings = load_settings().with_program_value("idle_window_hours", 0.25, "gpufleet demo")
    views = {v.name: v for v in describe_settings(settings)}
    assert (views["idle_window_hours"].value, views["idle_window_hours"].source) == (
        0.25, "gpufleet demo")
    assert views["database_url"].value == "postgresql+psycopg://fleet:********@db:5432/gf"
    assert "s3cret" not in repr(views)


def test_env_overrides_the_login_file(monkeypatch):
    login = Path(os.environ["GPUFLEET_CONFIG_DIR"]) / "login.json"
    login.write_text(json.dumps({"url": "https://from-login.example", "token": "gfa_a"}))
    monkeypatch.setenv("GPUFLEET_URL", "https://from-env.example")
    settings = load_settings()
    assert settings.url == "https://from-env.example"
    assert settings.token.get_secret_value() == "gfa_a"


def test_unknown_keys_in_the_file_are_an_error(config_file):
    config_file.write_text("prot = 9000\n")
    with pytest.raises(pydantic.ValidationError, match="prot"):
        load_settings()


def test_invalid_values_are_an_error(config_file, monkeypatch):
    config_file.write_text("port = 70000\n")
    with pytest.raises(pydantic.ValidationError, match="port"):
        load_settings()
    config_file.write_text("")
    monkeypatch.setenv("GPUFLEET_HEARTBEAT_INTERVAL_S", "-1")
    with pytest.raises(pydantic.ValidationError, match="heartbeat_interval_s"):
        load_settings()


def test_each_load_reads_the_sources_afresh(config_file, monkeypatch):
    """Each load reads the sources afresh: no value is cached from an earlier load."""
    config_file.write_text("port = 9000\n")
    assert load_settings().port == 9000
    config_file.write_text("port = 9001\n")
    assert load_settings().port == 9001


def test_nothing_is_read_at_import_time(tmp_path):
    broken = tmp_path / "broken.toml"
    broken.write_text("this is [not toml\n")
    env = {**os.environ, "GPUFLEET_CONFIG_FILE": str(broken),
           "GPUFLEET_CONFIG_DIR": str(tmp_path / "missing"), "GPUFLEET_PORT": "not a number"}
    code = "import gpufleet.settings, gpufleet.services.app, gpufleet.api.app; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    # ...and the broken file is reported once settings are actually loaded.
    code = "from gpufleet.settings import load_settings; load_settings()"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode != 0


def test_a_named_config_file_that_does_not_exist_is_an_error(monkeypatch, tmp_path):
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv("GPUFLEET_CONFIG_FILE", str(missing))
    with pytest.raises(ValueError, match=r"nope\.toml"):
        load_settings()


def test_samples_may_not_be_accepted_older_than_the_raw_tier_keeps():
    from pydantic import ValidationError

    from gpufleet.settings import Settings

    Settings(telemetry_raw_retention_days=2, telemetry_max_sample_age_s=2 * 86400)
    with pytest.raises(ValidationError, match="exceeds the raw tier's retention"):
        Settings(telemetry_raw_retention_days=1, telemetry_max_sample_age_s=2 * 86400)


def test_application_xids_cannot_be_made_to_mark_a_gpu(monkeypatch):
    """XIDs 13, 31, 43, 45 are the program's fault, never the GPU's (docs/operations.md)."""
    monkeypatch.setenv("GPUFLEET_HEALTH_XID_QUARANTINE", "[79, 43]")
    with pytest.raises(pydantic.ValidationError, match="XID 43 is an application error"):
        Settings()
    monkeypatch.setenv("GPUFLEET_HEALTH_XID_QUARANTINE", "[79, 48]")
    assert Settings().health_xid_quarantine == [79, 48]
