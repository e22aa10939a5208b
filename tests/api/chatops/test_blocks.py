"""Block Kit replies built from the API's own JSON (SQLite and PostgreSQL): the figures a
reply shows are the API's, user text is inert, and every message keeps Slack's limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.api.chatops.payloads import ApprovalAction, parse_action_id, request_create
from gpufleet.domain.chatops import blocks
from gpufleet.domain.chatops.commands import USAGE, RequestCommand, Unparsed, parse
from tests.api.chatops.block_kit import check_message
from tests.api.chatops.block_kit import seen_text as texts
from tests.lifecycle_world import act, create
from tests.services.telemetry.test_queries import fleet  # noqa: F401 (a fixture)

HOSTILE = "<!channel> <https://evil.example|click> &amp; *bold*"



def ask(member, text: str) -> dict:
    """`/gpu request …` through the grammar and the API, as the endpoint will do it."""
    command = parse(text)
    assert isinstance(command, RequestCommand), command
    response = member.post("/api/v1/requests",
                           json=request_create(command).model_dump(exclude_none=True))
    assert response.status_code == 201, response.text
    return response.json()


def test_a_chat_request_is_the_api_request_it_names(h100s):
    member, _ = h100s
    made = ask(member, "request 2 H100-80GB --project vision --days 3 --reason 'a run'")
    assert (made["project"], made["count"], made["models"], made["duration_s"],
            made["justification"], made["kind"]) == (
        "vision", 2, ["H100-80GB"], 3 * 86400, "a run", "whole")


def test_status_shows_the_apis_figures(h100s, api):
    member, _ = h100s
    code = ask(member, f"request 2 H100-80GB -p vision --hours 4 --reason '{HOSTILE}'")["code"]
    request = api.get(f"/api/v1/requests/{code}").json()
    reply = blocks.status_reply(request)
    check_message(reply)
    shown = texts(reply)
    assert reply["response_type"] == "ephemeral"
    assert f"{code} · {request['state']}" in shown
    assert "2 × H100-80GB" in shown and "vision" in shown and "4 h" in shown
    assert "&lt;!channel&gt;" in shown and "<!channel>" not in shown
    assert "<https://evil" not in shown


def test_an_active_request_shows_its_exports(h100s, api):
    _, operator = h100s
    code = create(api, project="speech", count=1, duration_hours=4)["code"]
    act(operator, code, "approve")
    request = api.get(f"/api/v1/requests/{code}").json()
    assert request["state"] == "active" and request["exports"]
    shown = texts(blocks.status_reply(request, "request"))
    for name, value in request["exports"].items():
        assert f"export {name}={value}" in shown
    assert blocks.status_reply(request, "release")["response_type"] == "in_channel"


def test_why_shows_every_rule_the_api_names(h100s, api):
    member, _ = h100s
    code = ask(member, "request 2 H100-80GB -p vision --hours 4 --reason big")["code"]
    why = api.get(f"/api/v1/requests/{code}/why").json()
    assert why["state"] == "pending"
    reply = blocks.why_reply(why)
    check_message(reply)
    shown = texts(reply)
    assert why["verdicts"] and why["summary"] in shown
    for verdict in why["verdicts"]:
        assert f"*{verdict['rule']}*" in shown


def test_mine_lists_the_members_requests_as_the_api_does(h100s, api):
    member, _ = h100s
    for hours in (1, 2, 3):
        ask(member, f"request 1 -p vision --hours {hours} --reason r")
    create(api, project="speech", count=1, duration_hours=4)
    listing = member.get("/api/v1/requests").json()
    reply = blocks.mine_reply(listing["items"])
    check_message(reply)
    shown = texts(reply)
    assert [r["code"] for r in listing["items"]] == [
        code for code in (r["code"] for r in api.get("/api/v1/requests").json()["items"])
        if code in shown]
    assert "speech" not in shown


def test_approval_buttons_carry_the_code_and_the_decision_replaces_them(h100s, api):
    member, operator = h100s
    code = ask(member, "request 2 H100-80GB -p vision --hours 4 --reason big")["code"]
    request = api.get(f"/api/v1/requests/{code}").json()
    posted = blocks.approval_message(request)
    check_message(posted)
    buttons = next(b for b in posted["blocks"] if b["type"] == "actions")["elements"]
    assert [parse_action_id(b["action_id"]) for b in buttons] == [
        ApprovalAction("approve", code), ApprovalAction("reject", code)]
    act(operator, code, "reject", reason="too many")
    decided = blocks.decided_message(api.get(f"/api/v1/requests/{code}").json(), "olga")
    check_message(decided)
    assert not [b for b in decided["blocks"] if b["type"] == "actions"]
    assert decided["text"] == f"{code} rejected by olga"


def test_idle_shows_the_apis_idle_units_and_only_the_callers(api, fleet):  # noqa: F811
    everyone = api.get("/api/v1/telemetry/idle").json()
    assert [i["allocation"] for i in everyone["items"]] == [fleet["speech"]]
    reply = blocks.idle_reply(everyone)
    check_message(reply)
    shown = texts(reply)
    assert reply["response_type"] == "ephemeral"
    assert fleet["speech"] in shown and "speech" in shown and "2.0 GiB held" in shown
    assert "idle-held since" in shown
    mine = fleet["member"].get("/api/v1/telemetry/idle").json()
    assert mine["items"] == []
    assert "None of your allocated GPUs" in texts(blocks.idle_reply(mine))


# --- no database ---------------------------------------------------------------------------
REQUEST = {"code": "GR-1042", "project": "vision", "requested_by": "mia", "state": "pending",
           "kind": "mig", "count": 4, "models": ["H100-80GB"], "mig_profile": "1g.10gb",
           "milli": 1000, "ends_at": None, "duration_s": 14 * 86400,
           "justification": "train", "wait_code": "operator", "wait_message": "needs approval",
           "created_at": "2026-03-01T12:00:00+00:00", "decided_by": None,
           "decided_at": None, "exports": {}}


@pytest.mark.parametrize("topic", [None, *USAGE])
def test_help_for_every_verb(topic):
    reply = blocks.help_reply(topic)
    check_message(reply)
    assert reply["response_type"] == "ephemeral"
    for verb in [topic] if topic else USAGE:
        assert USAGE[verb] in texts(reply)


def test_a_refused_command_answers_only_the_caller():
    outcome = parse("status <!here>")
    assert isinstance(outcome, Unparsed)
    reply = blocks.unparsed_reply(outcome)
    check_message(reply)
    assert reply["response_type"] == "ephemeral"
    assert "&lt;!here&gt;" in texts(reply) and "<!here>" not in texts(reply)


def test_mine_when_empty_says_how_to_ask():
    reply = blocks.mine_reply([])
    check_message(reply)
    assert "/gpu request" in texts(reply)


def test_a_long_list_keeps_within_fifty_blocks_and_counts_the_rest():
    many = [REQUEST | {"code": f"GR-{1001 + i}"} for i in range(200)]
    reply = blocks.mine_reply(many[:blocks.MINE_SHOWN], total=200)
    check_message(reply)
    assert f"and {200 - blocks.MINE_SHOWN} more" in texts(reply)
    check_message(blocks.mine_reply(many))


def test_times_show_in_the_readers_zone_with_utc_behind():
    assert blocks.when("2026-03-01T12:00:00+00:00") == (
        "<!date^1772366400^{date_short_pretty} {time}|2026-03-01 12:00 UTC>")
    assert blocks.flavour(REQUEST) == "4 × H100-80GB 1g.10gb"


@settings(max_examples=100, deadline=None)
@given(project=st.text(min_size=1, max_size=400), reason=st.text(max_size=5000),
       who=st.text(min_size=1, max_size=300))
def test_any_user_text_keeps_the_limits_and_stays_inert(project, reason, who):
    request = REQUEST | {"project": project, "justification": reason, "requested_by": who}
    for reply in (blocks.status_reply(request), blocks.approval_message(request),
                  blocks.decided_message(request | {"state": "approved"}, who),
                  blocks.mine_reply([request] * 3), blocks.error_reply(reason or "x")):
        check_message(reply)
        shown = texts(reply)
        assert shown.count("<") == shown.count("<!date^"), "user text became markup"
