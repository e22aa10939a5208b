"""The CLI as a user runs it: a fresh process talking HTTP to a real `gpufleet serve`.

Start-up cost is guarded without timing anything: a command may import only what it needs,
so each test runs `gpufleet` in a subprocess and lists the modules it loaded. Time is
measured on purpose by bench/bench_cli_startup.py (BENCHMARKS.md, "CLI start-up"). The
same processes exercise the CLI's own HTTP (`gpufleet.cli.http`), which the in-process
tests replace by the ASGI app.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from typer.testing import CliRunner

from gpufleet.cli.main import COMMANDS, COMMANDS_PACKAGE, app, load_command
from tests.serve_process import serve_process

# Run the console script's code, then list every module loaded, on stderr's last line.
PROBE = """
import json, sys
from gpufleet.cli.main import run
try:
    run()
finally:
    sys.stderr.write("\\nmodules: " + json.dumps(sorted(sys.modules)) + "\\n")
"""
# Never needed by a command that talks to a server, nor by `--help`.
HEAVY = ("gpufleet.settings", "pydantic_settings", "rich", "httpx", "sqlalchemy", "fastapi",
         "starlette", "duckdb", "gpufleet.domain.placement", "gpufleet.domain.telemetry",
         "gpufleet.whatif", "gpufleet.tagging", "gpufleet.store", "gpufleet.services",
         "gpufleet.agent", "gpufleet.wire")


def gpufleet(*args: str, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `gpufleet <args>` as a new process: (the finished process, the modules it loaded)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    environment.update(env)
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, env=environment, timeout=60, check=False)
    *errors, modules = done.stderr.rstrip("\n").split("\n")
    assert modules.startswith("modules: "), done.stderr
    done.stderr = "\n".join(errors).strip("\n")
    return done, set(json.loads(modules.removeprefix("modules: ")))


def heavy_in(modules: set[str], *, running: str | None = None) -> list[str]:
    """The heavy modules loaded, and the command modules other than `running`'s."""
    own = f"{COMMANDS_PACKAGE}.{COMMANDS[running].module}" if running else None
    return sorted(m for m in modules
                  if any(m == h or m.startswith(h + ".") for h in HEAVY)
                  or (m.startswith(COMMANDS_PACKAGE + ".") and m != own
                      and m != f"{COMMANDS_PACKAGE}.common"))


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, str]]:
    with serve_process(tmp_path_factory.mktemp("serve")) as served:
        yield served


@pytest.fixture
def as_admin(server, tmp_path) -> dict[str, str]:
    url, token = server
    return {"GPUFLEET_URL": url, "GPUFLEET_TOKEN": token,
            "GPUFLEET_CONFIG_DIR": str(tmp_path / "config")}


# --- what start-up loads -----------------------------------------------------------------------

def test_help_lists_every_command_and_loads_none(tmp_path):
    done, modules = gpufleet("--help", env={"GPUFLEET_CONFIG_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.split("Commands:")[1].splitlines()
              if line.startswith("  ") and not line.startswith("   ")]
    assert listed == list(COMMANDS)
    assert heavy_in(modules) == []
    assert "pydantic" not in modules


@pytest.mark.parametrize(("command", "path"), [
    (["fleet", "summary"], "/api/v1/fleet/summary"),
    (["request", "ls"], "/api/v1/requests"),
    (["pool", "ls"], "/api/v1/pools"),
    (["user", "ls"], "/api/v1/users"),
])
def test_a_json_command_loads_its_own_module_and_nothing_heavy(command, path, as_admin,
                                                               server):
    url, token = server
    done, modules = gpufleet(*command, "--json", env=as_admin)
    assert done.returncode == 0, done.stderr
    reply = httpx.get(url + path, headers={"Authorization": f"Bearer {token}"})
    assert json.loads(done.stdout) == reply.json()
    assert heavy_in(modules, running=command[0]) == []


def test_a_table_loads_rich_but_not_the_rest(as_admin):
    done, modules = gpufleet("fleet", "summary", env=as_admin)
    assert done.returncode == 0, done.stderr
    assert "total: the status columns'" in done.stdout
    assert "rich" in modules
    assert [m for m in heavy_in(modules, running="fleet") if m.split(".")[0] != "rich"] == []


def test_one_line_help_in_the_table_is_each_commands_own():
    for name, entry in COMMANDS.items():
        command = load_command(name)
        own = " ".join((command.help or "").split("\n\n")[0].split())
        assert entry.help == own, name


# --- the CLI's HTTP against a real server -----------------------------------------------------

def test_a_body_and_query_parameters_reach_the_server(as_admin):
    created, _ = gpufleet("environment", "create", "lab-1", "--kind", "onprem",
                          "--description", "één & b = c?", "--json", env=as_admin)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["description"] == "één & b = c?"
    listed, _ = gpufleet("fleet", "ls", "--environment", "lab-1", "--model", "A&B C/D",
                         "--json", env=as_admin)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["items"] == []


def test_an_error_answer_is_one_line_naming_the_code(as_admin):
    done, _ = gpufleet("fleet", "show", "GPU-no/such", env=as_admin)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.endswith("(not_found)")
    assert "\n" not in done.stderr


def test_a_bad_token_says_how_to_log_in(as_admin):
    done, _ = gpufleet("whoami", env={**as_admin, "GPUFLEET_TOKEN": "gfa_wrong"})
    assert done.returncode == 1
    assert done.stderr.endswith("run `gpufleet login` or set GPUFLEET_TOKEN")


@pytest.fixture
def receivers() -> Iterator[tuple[str, str, list[dict[str, str]]]]:
    """A server that redirects every request, and the one it redirects to, which records
    the headers of what reaches it: (redirecting URL, target URL, received headers)."""
    received: list[dict[str, str]] = []

    class Target(BaseHTTPRequestHandler):
        def do_GET(self):
            received.append(dict(self.headers))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Target)
    target_url = f"http://127.0.0.1:{target.server_port}"

    class Redirect(Target):
        def do_GET(self):
            self.send_response(307)
            self.send_header("Location", target_url + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

    redirect = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    for server in (target, redirect):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{redirect.server_port}", target_url, received
    finally:
        for server in (target, redirect):
            server.shutdown()
            server.server_close()


def test_a_redirect_is_not_followed_so_the_token_stays_home(receivers, tmp_path):
    redirecting_url, _, received = receivers
    done, _ = gpufleet("whoami", env={"GPUFLEET_URL": redirecting_url,
                                      "GPUFLEET_TOKEN": "gfa_secret",
                                      "GPUFLEET_CONFIG_DIR": str(tmp_path)})
    assert done.returncode == 1
    assert done.stderr == "error: HTTP 307 from the server: no body (http_error)"
    assert received == []


@pytest.mark.parametrize(("url", "problem"), [
    ("http://host:notaport",
     "is not a valid URL: Port could not be cast to integer value as 'notaport'"),
    ("http://[::1", "is not a valid URL: Invalid IPv6 URL"),
    ("http://:8080", "names no host"),
])
def test_a_malformed_server_url_is_one_error_line(url, problem, monkeypatch):
    monkeypatch.setenv("GPUFLEET_URL", url)
    monkeypatch.setenv("GPUFLEET_TOKEN", "gfa_anything")
    result = CliRunner().invoke(app, ["whoami"])
    assert result.exit_code == 1, result.output
    assert result.stderr == f"error: server URL '{url}' {problem}\n"
