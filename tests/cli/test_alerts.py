"""`gpufleet alerts …` against the real app (through the test client): tables, `--json`,
paging, acknowledgement, silences, history, and bad input as one error line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.cli.test_cli import assert_one_error_line, invoke, json_of, ok, rows
from tests.services.operations import alert_world
from tests.services.operations.alert_world import Rule, evaluate, hot, outbox

world = alert_world.world  # the fixture
NOW_RULE = Rule(for_s=0)


@pytest.fixture
def firing(cli_in_process, gf, world) -> str:
    """A firing alert on mia's GPU; its fingerprint."""
    evaluate(gf, hot(world.gpus[0], gf, rule=NOW_RULE), hot(world.gpus[1], gf, rule=NOW_RULE),
             rules=[NOW_RULE])
    return json_of("alerts", "ls", "--matcher", f"gpu={world.gpus[0]}")["items"][0][
        "fingerprint"]


def test_alerts_ls_shows_allocation_project_and_owner(firing, world):
    out = ok("alerts", "ls").stdout
    (row,) = rows(out, firing)
    assert row[1:4] == ["firing", "gpu-hot", "warning"]
    assert world.code in row and "vision" in row and "mia" in row


def test_alerts_ls_pages_and_filters(firing):
    page = json_of("alerts", "ls", "--limit", 1)
    assert len(page["items"]) == 1 and page["next_cursor"]
    assert len(json_of("alerts", "ls", "--limit", 1, "--all")["items"]) == 2
    assert json_of("alerts", "ls", "--state", "resolved")["items"] == []
    result = ok("alerts", "ls", "--project", "speech")
    assert "no alerts match these filters" in result.stderr


def test_alerts_show_and_ack(firing, gf):
    shown = ok("alerts", "show", firing).stdout
    assert "gpu-hot" in shown and "mia" in shown
    done = ok("alerts", "ack", firing, "--for", "2h", "--comment", "looking").stdout
    assert f"acknowledged alert {firing}" in done
    assert json_of("alerts", "show", firing)["acked_by"] is not None
    events = [h["event"] for h in json_of("alerts", "history", firing)["items"]]
    assert events[0] == "acknowledged" and "firing" in events


def test_silence_create_list_expire(firing, gf, world):
    told = len(outbox(gf))
    created = json_of("alerts", "silence", "--matcher", "project=vision", "--for", "1d",
                      "--comment", "maintenance")
    assert created["state"] == "active"
    (row,) = rows(ok("alerts", "silence", "ls").stdout, str(created["id"]))
    assert "project=vision" in row
    assert json_of("alerts", "show", firing)["silenced"]
    gf.clock.advance(gf.settings.alert_repeat_interval_s)
    evaluate(gf, hot(world.gpus[0], gf, rule=NOW_RULE), rules=[NOW_RULE])
    assert len(outbox(gf)) == told  # silenced: neither the repeat nor the resolution
    assert "expired silence" in ok("alerts", "silence", "expire", created["id"]).stdout
    assert json_of("alerts", "silence", "ls")["items"] == []


@pytest.mark.parametrize(("args", "fragments"), [
    (("alerts", "silence", "--for", "2h", "--comment", "x"), ("at least one --matcher",)),
    (("alerts", "silence", "--matcher", "project", "--for", "2h", "--comment", "x"),
     ("is not a matcher",)),
    (("alerts", "silence", "--matcher", "project=vision", "--for", "soon", "--comment", "x"),
     ("duration 'soon'",)),
    (("alerts", "show", "0123456789abcdef"), ("no alert 0123456789abcdef",)),
    (("alerts", "silence", "expire", "999"), ("no silence 999",)),
    (("alerts", "ls", "--matcher", "x=~("), ("not a regular expression",)),
], ids=["no matcher", "not a matcher", "bad duration", "unknown alert", "unknown silence",
        "bad regex"])
def test_bad_input_is_one_error_line(cli_in_process, args, fragments):
    assert_one_error_line(invoke(*args), *fragments)


def test_alerts_show_prints_the_value_in_its_unit(cli_in_process, gf, world):
    """The evaluator annotates each observation with its value as the evidence shows it;
    `alerts show` prints that, not raw bytes (32349759383.0)."""
    observation = hot(world.gpus[0], gf, value=32349759383.0, rule=NOW_RULE)
    evaluate(gf, replace(observation, annotations={"value": "30.1 GiB"}), rules=[NOW_RULE])
    (alert,) = json_of("alerts", "ls")["items"]
    (value_row,) = [r for r in ok("alerts", "show", alert["fingerprint"]).stdout.splitlines()
                    if r.startswith("value")]
    assert "30.1 GiB" in value_row and "32349759383" not in value_row
