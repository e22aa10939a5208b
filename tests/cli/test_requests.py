"""`gpufleet request | pool | project quota` against the real app, as tests/cli/test_cli.py does.

The walk-through of docs/lifecycle.md runs here command by command: create → why → approve
(the export lines) → fleet ls --allocation → release; then MIG and shared requests, pools,
quotas with auto-approval, `--json`, and bad input as one error line.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows
from tests.helpers import create_environment, gpu, join_token, register, registration

CODE = re.compile(r"^(GR-\d+) (\w+)")


@pytest.fixture
def cli(cli_in_process) -> None:
    """The CLI as the bootstrap admin, through the test app (tests/cli_world.py)."""


def _register(api, node: int, environment: str, gpus: list[dict]) -> None:
    body = registration(node, gpus=0)
    body["gpus"] = gpus
    response = api.as_(join_token(api, environment)).post("/api/v1/agent/register", json=body)
    assert response.status_code == 200, response.text


@pytest.fixture
def fleet(api, cli) -> None:
    """Two 8 × H100 nodes; one node of 2 MIG-enabled H100s; an environment whose 2 GPUs are
    shared (time-slicing) by default; project `vision`."""
    create_environment(api, "onprem-hpc")
    create_environment(api, "onprem-slicing", default_sharing_mode="shared")
    register(api, 1)
    register(api, 2)
    _register(api, 3, "onprem-hpc", [gpu(3, i, mig_enabled=True) for i in range(2)])
    _register(api, 4, "onprem-slicing", [gpu(4, i) for i in range(2)])
    ok("project", "create", "vision", "--organisation", "research")


def created(*args: object) -> tuple[str, str]:
    """Run `request create`; its code and state from the first line."""
    first = ok("request", "create", "--project", "vision", *args).stdout.splitlines()[0]
    match = CODE.match(first)
    assert match, first
    return match.group(1), match.group(2)


def test_request_walkthrough_create_why_approve_use_release(fleet):
    code, state = created("--gpus", 8, "--model", "H100-80GB", "--same-node", "--days", 14,
                          "--reason", "pretraining")
    assert state == "pending"

    why = ok("request", "why", code).stdout
    assert why.splitlines()[0].startswith(f"{code} is pending, waiting: awaiting_approval")
    assert "position 1 of 1 pending" in why
    assert rows(why, "approval")[0][:3] == ["approval", "wait", "awaiting_approval"]

    lines = ok("request", "approve", code, "--reason", "ok").stdout.splitlines()
    assert re.fullmatch(rf"{code} active: 8 × H100-80GB on node-[12]", lines[0]), lines
    node = lines[0].rsplit(" ", 1)[1]
    assert lines[1] == f"export GPUFLEET_ALLOCATION={code}"
    devices = lines[2].removeprefix("export CUDA_VISIBLE_DEVICES=").split(",")
    assert len(devices) == 8 and all(d.startswith("GPU-") for d in devices)
    assert lines[3] == f"export GPUFLEET_NODE={node}"

    listed = json_of("fleet", "ls", "--allocation", code)["items"]
    assert sorted(g["uuid"] for g in listed) == sorted(devices)
    assert len(rows(ok("fleet", "ls", "--allocation", code).stdout, "GPU-")) == 8

    shown = ok("request", "show", code).stdout
    assert len(rows(shown, node)) == 8  # the units table
    assert f"export CUDA_VISIBLE_DEVICES={','.join(devices)}" in shown

    assert ok("request", "release", code).stdout.strip() == f"{code} released"
    assert json_of("fleet", "ls", "--allocation", code)["items"] == []
    history = ok("request", "history", code).stdout
    assert [words[3] for words in rows(history, "2026-")] == [
        "request.created", "request.approved", "request.activated", "request.released"]
    assert [r["code"] for r in json_of("request", "ls", "--state", "released")["items"]] \
        == [code]


def test_mig_and_shared_requests(fleet):
    mig, state = created("--mig", "1g.10gb", "--count", 4, "--days", 1, "--reason", "eval")
    assert state == "pending"
    approved = ok("request", "approve", mig)
    assert approved.stdout.startswith(f"{mig} active: 4 × H100-80GB 1g.10gb on node-3")
    # MIG UUIDs come once the node creates them: until then no export a CUDA program
    # would take (an unset CUDA_VISIBLE_DEVICES means every GPU), and how to wait.
    assert "export" not in approved.stdout and "pending:" not in approved.stdout
    assert f"gpufleet request wait {mig} --exports" in approved.stderr
    assert "pending:" not in ok("request", "show", mig).stdout
    units = json_of("request", "show", mig)["units"]
    assert {(u["kind"], u["mig_profile"], u["node"]) for u in units} == {
        ("mig", "1g.10gb", "node-3")}
    table_rows = rows(ok("request", "show", mig).stdout, "node-3")  # the units table
    assert len(table_rows) == 4
    assert all(r[4] == "mig" and r[5].startswith("1g.10gb@") for r in table_rows)

    shared, _ = created("--fraction", 0.5, "--gpus", 2, "--hours", 8, "--reason", "notebooks")
    lines = ok("request", "approve", shared).stdout.splitlines()
    assert lines[0] == f"{shared} active: 2 × H100-80GB shared 0.5 on node-4"
    assert json_of("request", "show", shared)["milli"] == 500

    listing = ok("request", "ls").stdout
    assert rows(listing, shared)[0][:4] == [shared, "vision", "active", "2"]
    assert rows(listing, mig)[0][:6] == [mig, "vision", "active", "4", "any", "model"]


def test_exports_alone_on_stdout_for_eval_and_wait_for_usable_units(fleet, monkeypatch):
    code, _ = created("--gpus", 2, "--model", "H100-80GB", "--hours", 4, "--reason", "eval")
    approved = ok("request", "approve", code, "--exports")
    lines = approved.stdout.splitlines()
    assert [line.split("=")[0] for line in lines] == [
        "export GPUFLEET_ALLOCATION", "export CUDA_VISIBLE_DEVICES", "export GPUFLEET_NODE"]
    assert f"{code} active" in approved.stderr
    assert ok("request", "wait", code, "--exports").stdout.splitlines() == lines

    from gpufleet.cli.commands import requests as request_commands
    monkeypatch.setattr(request_commands, "WAIT_POLL_S", 0.01)
    mig, _ = created("--mig", "1g.10gb", "--count", 1, "--hours", 1, "--reason", "nb")
    ok("request", "approve", mig)
    assert_one_error_line(invoke("request", "wait", mig, "--exports", "--timeout-s", 0.05),
                          f"{mig} active, its MIG instances not created yet after 0.05 s")
    rejected, _ = created("--gpus", 1, "--hours", 1, "--reason", "nope")
    ok("request", "reject", rejected, "--reason", "no")
    assert_one_error_line(invoke("request", "wait", rejected),
                          f"{rejected} is rejected: it will hold no units")


def test_quota_auto_approve_and_waiting_for_capacity(fleet):
    ok("project", "quota", "set", "vision", "H100-80GB", 10)
    ok("project", "auto-approve", "set", "vision", "--max-gpus", 4, "--max-hours", 48)
    shown = ok("project", "quota", "show", "vision").stdout
    assert rows(shown, "H100-80GB") == [["H100-80GB", "10", "0", "0", "10"]]
    assert "auto-approve: requests of at most 4 GPUs and 48 hours" in shown

    # within the policy: approved and granted at once, so create prints the exports
    lines = ok("request", "create", "-p", "vision", "--gpus", 2, "--model", "H100-80GB",
               "--hours", 24, "--reason", "debug").stdout.splitlines()
    code = lines[0].split()[0]
    assert lines[0].startswith(f"{code} active: 2 × H100-80GB")
    assert lines[1] == f"export GPUFLEET_ALLOCATION={code}"
    assert rows(ok("project", "quota", "show", "vision").stdout, "H100-80GB") == [
        ["H100-80GB", "10", "2", "0", "8"]]
    quota = json_of("request", "why", code)["quotas"]
    assert [(q["flavour"], q["used"]) for q in quota] == [("H100-80GB", 2)]

    # approved but more than the fleet has free on one node: it waits, and says why
    big, _ = created("--gpus", 8, "--model", "H100-80GB", "--same-node", "--days", 1,
                     "--reason", "big")
    other, _ = created("--gpus", 8, "--model", "H100-80GB", "--same-node", "--days", 1,
                       "--reason", "bigger")
    ok("request", "approve", big)
    waiting = ok("request", "approve", other).stdout.strip()
    assert waiting.startswith(f"{other} approved, waiting: ")
    assert json_of("request", "show", other)["wait_code"] == "quota_exhausted"  # 2 + 8 of 10

    extended = ok("request", "extend", big, "--hours", 12).stdout.strip()
    assert extended == f"{big} now ends 2026-11-03 21:00Z"
    assert ok("request", "cancel", other).stdout.strip() == f"{other} cancelled"

    ok("project", "auto-approve", "rm", "vision")
    ok("project", "quota", "rm", "vision", "H100-80GB")
    after = json_of("project", "quota", "show", "vision")
    assert after["auto_approve"] is None
    assert [q["limit"] for q in after["quotas"]] == [None]  # still held, no longer limited


def test_pools_request_approve_list(fleet):
    first = ok("pool", "request", "-p", "vision", "--flavour", "H100-80GB", "--count", 4,
               "--reason", "steady training").stdout.strip()
    pool = first.split()[0]
    assert first == f"{pool} pending"
    rejected = ok("pool", "request", "-p", "vision", "--flavour", "H100-80GB/shared",
                  "--count", 2, "--fraction", 0.5, "--reason", "x").stdout.split()[0]

    assert ok("pool", "approve", pool, "--reason", "budgeted").stdout.strip() == \
        f"{pool} active: 4 × H100-80GB reserved for project vision"
    assert ok("pool", "reject", rejected, "--reason", "no").stdout.strip() == \
        f"{rejected} rejected"

    listing = ok("pool", "ls").stdout
    assert rows(listing, pool)[0][:7] == [pool, "vision", "H100-80GB", "4", "1", "0", "active"]
    assert rows(listing, rejected)[0][:7] == [rejected, "vision", "H100-80GB/shared", "2",
                                              "0.5", "0", "rejected"]
    assert [p["code"] for p in json_of("pool", "ls", "--state", "active")["items"]] == [pool]
    assert json_of("pool", "show", pool)["approved_at"]
    # a pool counts against the project's holding of its flavour from approval on
    assert rows(ok("project", "quota", "show", "vision").stdout, "H100-80GB") == [
        ["H100-80GB", "-", "4", "4", "-"]]



def test_pool_end_frees_the_reservation_and_lists_as_ended(fleet):
    pool = ok("pool", "request", "-p", "vision", "--flavour", "H100-80GB", "--count", 4,
              "--reason", "steady training").stdout.split()[0]
    ok("pool", "approve", pool)
    assert ok("pool", "end", pool, "--reason", "finished").stdout.strip() == \
        f"{pool} ended: 4 × H100-80GB no longer reserved for project vision"
    assert [p["code"] for p in json_of("pool", "ls", "--state", "ended")["items"]] == [pool]
    shown = json_of("pool", "show", pool)
    assert (shown["state"], shown["end_reason"]) == ("ended", "finished") and shown["ended_at"]
    assert "ended by" in ok("pool", "show", pool).stdout
    assert_one_error_line(invoke("pool", "end", pool), "only an active pool can be ended")


def test_json_output_is_the_api_reply(fleet):
    created_reply = json.loads(ok("request", "create", "-p", "vision", "--gpus", 1, "--days", 1,
                                  "--reason", "r", "--json").stdout)
    code = created_reply["code"]
    assert created_reply["state"] == "pending" and created_reply["count"] == 1
    assert json_of("request", "why", code)["wait_code"] == "awaiting_approval"
    assert json_of("request", "approve", code)["exports"]["GPUFLEET_ALLOCATION"] == code
    assert json_of("request", "history", code)["items"][0]["action"] == "request.created"
    page = json_of("request", "ls", "--limit", 1)
    assert [r["code"] for r in page["items"]] == [code] and page["next_cursor"] is None
    quotas = json_of("project", "quota", "set", "vision", "H100-80GB/1g.10gb", 7)["quotas"]
    assert {q["flavour"]: q["limit"] for q in quotas} == {"H100-80GB": None,
                                                           "H100-80GB/1g.10gb": 7}
    removed = json_of("project", "quota", "rm", "vision", "H100-80GB/1g.10gb")
    assert [q["flavour"] for q in removed["quotas"]] == ["H100-80GB"]
    assert removed == json_of("project", "quota", "show", "vision")
    assert json_of("request", "release", code)["state"] == "released"


def test_quiet_prints_only_the_code_for_a_shell_variable(fleet):
    """`GR=$(gpufleet request create … -q)`: the README's walk-through keeps the code so."""
    code = ok("request", "create", "-p", "vision", "--gpus", 1, "--hours", 1, "--reason",
              "r", "--quiet").stdout
    assert re.fullmatch(r"GR-\d+\n", code), code
    assert json_of("request", "show", code.strip())["state"] == "pending"
    pool = ok("pool", "request", "-p", "vision", "--flavour", "H100-80GB", "--count", 2,
              "--reason", "q", "-q").stdout
    assert re.fullmatch(r"POOL-\d+\n", pool), pool
    assert json_of("pool", "show", pool.strip())["state"] == "pending"


@pytest.mark.parametrize("args", [
    ("request", "create", "-p", "vision", "--gpus", 1, "--hours", 1, "--reason", "r",
     "--quiet", "--json"),
    ("request", "create", "-p", "vision", "--gpus", 1, "--hours", 1, "--reason", "r",
     "-q", "--exports"),
    ("pool", "request", "-p", "vision", "--flavour", "H100-80GB", "--count", 2,
     "--reason", "q", "-q", "--json"),
])
def test_quiet_with_another_output_is_refused_before_anything_is_made(fleet, args):
    assert_one_error_line(invoke(*args), "cannot be combined: choose one")
    assert json_of("request", "ls")["items"] == []
    assert invoke("pool", "show", "POOL-1").exit_code == 1  # no pool either


def test_bad_input_is_one_error_line_from_the_server(fleet):
    for args, fragment in [
        (("--gpus", 0), "error: count: Input should be greater than or equal to 1"),
        (("--count", 2, "--fraction", 1.5),
         "error: request body: fraction must be strictly between 0 and 1"),
        (("--gpus", 1, "--model", "H100-NOPE"), "unknown GPU model 'H100-NOPE'"),
    ]:
        result = invoke("request", "create", "-p", "vision", "--reason", "r", *args)
        assert_one_error_line(result, fragment)
    assert_one_error_line(invoke("request", "show", "GR-9999"), "request 'GR-9999' does not")
    assert_one_error_line(invoke("request", "approve", "GR-9999"), "(request_not_found)")
    assert_one_error_line(invoke("pool", "approve", "POOL-77"), "pool 'POOL-77' does not")
    assert json_of("request", "ls")["items"] == []  # nothing was created on the way


@pytest.mark.parametrize(("args", "flag"), [
    (("--hours", "1e400"), "--hours"), (("--hours", "nan"), "--hours"),
    (("--days", "99999999999999999999"), "--days"), (("--days", "-1"), "--days"),
    (("--days", "36501"), "--days")])
def test_a_length_out_of_range_is_a_usage_error_naming_the_flag(fleet, args, flag):
    """`--hours 1e400` was a traceback (inf is no JSON), `--days 1e20` a vague 400."""
    for command in (("request", "create", "-p", "vision", "--gpus", 1, "--reason", "r"),
                    ("request", "extend", "GR-1")):
        result = invoke(*command, *args)
        assert result.exit_code == 2, result.output
        assert flag in result.output and "Traceback" not in result.output
    assert json_of("request", "ls")["items"] == []


@pytest.mark.parametrize("start", ["0001-01-01T00:00:00", "9999-12-31T00:00:00"])
def test_a_time_out_of_range_is_refused_naming_it(fleet, start):
    result = invoke("request", "create", "-p", "vision", "--gpus", 1, "--reason", "r",
                    "--start", start, "--hours", 5)
    assert_one_error_line(result, "starts_at", "must lie between 1970 and 2999")


def test_impossible_requests_are_refused_in_the_clis_words(fleet):
    """Issue 12, item 4: the limit and what exists, with the flags a person typed."""
    for args, message in [
        (("--gpus", 17), "--gpus 17: the fleet has 16 H100-80GB; largest node 8"),
        (("--gpus", 1, "--model", "A100-80GB"),
         "--model A100-80GB: the fleet has none in exclusive mode; it has H100-80GB"),
        (("--gpus", 1, "--env", "nowhere"), "--env nowhere: no such environment"),
        (("--gpus", 2, "--same-node", "--cpu", 60),
         "--cpu 60 cores per unit × 2 units on one node: the largest node has 112 cores"),
        (("--gpus", 1, "--memory", 3000),
         "--memory 3000 GiB per unit: the largest node has 2048 GiB"),
    ]:
        result = invoke("request", "create", "-p", "vision", "--reason", "r", *args)
        assert_one_error_line(result, f"error: {message}")
    assert json_of("request", "ls")["items"] == []


def test_history_and_pool_ls_page_and_follow_every_page_with_all(fleet):
    code, _ = created("--gpus", 1, "--days", 1, "--reason", "r")
    ok("request", "approve", code)
    actions = [e["action"] for e in json_of("request", "history", code)["items"]]
    assert actions[:3] == ["request.created", "request.approved", "request.activated"]
    first = ok("request", "history", code, "--limit", 1)
    assert len(rows(first.stdout, "20")) == 1 and "--all" in first.stderr
    every = json_of("request", "history", code, "--limit", 1, "--all")
    assert [e["action"] for e in every["items"]] == actions and every["next_cursor"] is None
    assert len(rows(ok("request", "history", code, "--limit", 1, "--all").stdout, "20")) == \
        len(actions)

    pools = [ok("pool", "request", "-p", "vision", "--flavour", "H100-80GB", "--count", 1,
                "--reason", "x").stdout.split()[0] for _ in range(3)]
    assert [p["code"] for p in json_of("pool", "ls", "--limit", 1, "--all")["items"]] == pools
    assert "--all" in ok("pool", "ls", "--limit", 2).stderr
    empty = ok("pool", "ls", "--state", "rejected")
    assert empty.stdout == "" and "no pools match these filters" in empty.stderr
    misspelt = invoke("pool", "ls", "--state", "approved")
    assert misspelt.exit_code == 2  # refused before any call, with the states there are
    assert "'approved' is not one of" in misspelt.output and "'active'" in misspelt.output
