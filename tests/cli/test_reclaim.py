"""`gpufleet reclaim …` and `gpufleet request exempt` against the real app: policies set,
listed and removed, a dry-run round, the report, exemptions, and bad input as one line."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.tsdb import Sample, series
from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok
from tests.lifecycle_world import act, create
from tests.services.operations.test_reclamation import ATTRS, IDLE


@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


@pytest.fixture
def allocation(api, h100s, cli) -> tuple[str, list[str]]:
    member, operator = h100s
    code = create(member, count=2, models=["H100-80GB"])["code"]
    view = act(operator, code, "approve")
    return code, [u["gpu_uuid"] for u in view["units"]]


def test_policy_set_ls_rm(allocation):
    ok("reclaim", "policy", "set", "--environment", "onprem-hpc", "--idle-window", "2h",
       "--action", "release")
    out = ok("reclaim", "policy", "set", "--project", "vision", "--grace", "15m",
             "--dry-run").stdout
    assert "project vision: reclamation policy set" in out
    listing = ok("reclaim", "policy", "ls").stdout
    lines = {line.split()[0] + " " + line.split()[1]: line for line in listing.splitlines()
             if line.strip().startswith(("default", "environment", "project"))}
    assert "4h" in lines["default (server)"] and "notify" in lines["default (server)"]
    assert "2h" in lines["environment onprem-hpc"] and "release" in lines[
        "environment onprem-hpc"]
    assert "15m" in lines["project vision"] and "yes" in lines["project vision"]
    view = json_of("reclaim", "policy", "ls")
    assert [(p["scope"], p["name"]) for p in view["items"]] == [
        ("environment", "onprem-hpc"), ("project", "vision")]
    ok("reclaim", "policy", "set", "--project", "vision", "--unset", "dry_run")
    assert json_of("reclaim", "policy", "ls")["items"][1]["dry_run"] is None
    ok("reclaim", "policy", "rm", "--project", "vision")
    assert len(json_of("reclaim", "policy", "ls")["items"]) == 1


@pytest.mark.parametrize(("args", "fragment"), [
    (("--project", "vision", "--idle-window", "-2h"), "--idle-window"),
    (("--project", "vision", "--grace", "soon"), "is not a duration"),
    (("--project", "vision"), "nothing to set"),
    (("--grace", "1h"), "give one of --project and --environment"),
    (("--project", "vision", "--unset", "colour"), "not a field"),
])
def test_policy_set_usage_errors(allocation, args, fragment):
    result = invoke("reclaim", "policy", "set", *args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output


def test_server_refusals_are_one_line(allocation):
    assert_one_error_line(invoke("reclaim", "policy", "set", "--project", "nosuch",
                                 "--grace", "1h"), "project 'nosuch' does not exist")
    assert_one_error_line(invoke("reclaim", "policy", "set", "--project", "vision",
                                 "--idle-window", "9d"), "may be at most 7 days")
    assert_one_error_line(invoke("reclaim", "policy", "rm", "--project", "vision"),
                          "reclamation policy 'project:vision' does not exist")
    assert_one_error_line(invoke("reclaim", "report", "--window", "soon"), "window")


def test_run_dry_run_shows_what_a_round_would_do(allocation, gf, clock):
    code, gpus = allocation
    ok("reclaim", "policy", "set", "--project", "vision", "--idle-window", "1h",
       "--action", "release")
    assert "nothing to do" in ok("reclaim", "run", "--dry-run").stderr
    start = clock.now()
    gf.telemetry.write([Sample(series(metric, uuid, None, **ATTRS),
                               start + timedelta(minutes=m, seconds=30), value)
                        for uuid in gpus for m in range(70) for metric, value in IDLE.items()])
    clock.advance(70 * 60)
    gf.telemetry.rollup(clock.now())
    out = ok("reclaim", "run", "--dry-run").stdout
    assert code in out and "warn" in out
    assert json_of("reclaim", "warnings") == []  # a dry run writes nothing
    ok("reclaim", "run")
    [warning] = json_of("reclaim", "warnings", "--open")
    assert warning["allocation"] == code
    assert code in ok("reclaim", "warnings").stdout
    report = ok("reclaim", "report", "--window", "7d").stdout
    assert "vision" in report and "total" in report


def test_request_exempt_grants_for_operators(allocation):
    code, _ = allocation
    out = ok("request", "exempt", code, "--reason", "demo on Friday", "--hours", 24).stdout
    assert f"{code} is exempt from reclamation until" in out
    [row] = json_of("reclaim", "exemptions")
    assert (row["allocation"], row["state"], row["reason"]) == (code, "granted",
                                                               "demo on Friday")
    result = invoke("request", "exempt", code, "--reason", "x")
    assert result.exit_code == 2 and "give one of --hours and --until" in result.output
    assert_one_error_line(invoke("request", "exempt", code, "--reason", "x", "--until",
                                 "2001-01-01T00:00"), "has passed already")
