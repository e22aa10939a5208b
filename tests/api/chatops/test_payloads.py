"""Slash-command and interactivity bodies, parsed only from a verified body."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from gpufleet.api.chatops.payloads import (
    ApprovalAction,
    PayloadError,
    parse_action_id,
    parse_interaction,
    parse_slash_command,
)
from gpufleet.api.chatops.signature import RequestVerifier
from gpufleet.clock import ManualClock
from tests.api.chatops.test_signature import NOW, SECRET, sign

SLASH = {"token": "legacy", "team_id": "T1", "team_domain": "acme", "channel_id": "C1",
         "channel_name": "gpus", "user_id": "U1", "user_name": "mia", "command": "/gpu",
         "text": "status GR-1042", "response_url": "https://hooks.slack.com/commands/T1/1/x",
         "trigger_id": "1.2.3"}


def verified(body: bytes):
    """A body through the real verifier, as the endpoint will do it."""
    check = RequestVerifier(SECRET, ManualClock(NOW)).check(
        sign(body, int(NOW.timestamp())), body)
    assert check.accepted
    return check.body


def test_a_slash_command_reads_as_sent():
    command = parse_slash_command(verified(urlencode(SLASH).encode()))
    assert (command.command, command.text, command.user_id, command.team_id,
            command.channel_id) == ("/gpu", "status GR-1042", "U1", "T1", "C1")
    assert command.response_url == SLASH["response_url"]


def test_mattermosts_slash_command_fields_read_alike():
    mattermost = {"channel_id": "c1", "channel_name": "town-square", "command": "/gpu",
                  "response_url": "https://mm.example/hooks/commands/x", "team_domain": "t",
                  "team_id": "t1", "text": "mine", "token": "tok", "trigger_id": "tr",
                  "user_id": "u1", "user_name": "mia"}
    assert parse_slash_command(verified(urlencode(mattermost).encode())).text == "mine"


def test_empty_text_and_unicode_survive_the_form():
    body = urlencode(SLASH | {"text": ""}).encode()
    assert parse_slash_command(verified(body)).text == ""
    body = urlencode(SLASH | {"text": "request 1 -p v --reason “über €”"}).encode()
    assert parse_slash_command(verified(body)).text.endswith("“über €”")


@pytest.mark.parametrize("body, problem", [
    (urlencode({k: v for k, v in SLASH.items() if k != "user_id"}), "no 'user_id'"),
    (urlencode({k: v for k, v in SLASH.items() if k != "text"}), "no 'text'"),
    (urlencode(SLASH) + "&user_id=U2", "gives 'user_id' twice"),
    ("", "no 'command'"),
    ("not a form", "not a form"),
    ("&".join(f"f{i}=x" for i in range(60)), "not a form"),
], ids=["no user", "no text", "user twice", "empty", "not a form", "too many fields"])
def test_a_malformed_slash_command_is_a_400_naming_it(body, problem):
    with pytest.raises(PayloadError, match=problem) as error:
        parse_slash_command(verified(body.encode()))
    assert error.value.http_status == 400


def interaction(**changes) -> dict:
    payload = {"type": "block_actions", "user": {"id": "U9", "username": "olga"},
               "team": {"id": "T1"}, "channel": {"id": "C7"},
               "container": {"type": "message", "message_ts": "1700000000.000100"},
               "response_url": "https://hooks.slack.com/actions/T1/2/y",
               "actions": [{"action_id": "approve:GR-1042", "value": "GR-1042",
                            "type": "button"}]}
    return payload | changes


def form(payload) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def test_a_button_press_reads_as_an_approval():
    pressed = parse_interaction(verified(form(interaction())))
    assert (pressed.type, pressed.user_id, pressed.channel_id, pressed.message_ts) == (
        "block_actions", "U9", "C7", "1700000000.000100")
    assert pressed.approval() == ApprovalAction("approve", "GR-1042")


def test_another_action_is_no_approval():
    other = interaction(actions=[{"action_id": "overflow:menu"}])
    assert parse_interaction(verified(form(other))).approval() is None
    assert parse_interaction(verified(form(interaction(actions=[])))).approval() is None


@pytest.mark.parametrize("body, problem", [
    (b"x=1", "no 'payload'"),
    (urlencode({"payload": "{not json"}).encode(), "not JSON"),
    (form([1, 2]), "not a JSON object"),
    (form(interaction(user="U9")), "no 'user' object"),
    (form({k: v for k, v in interaction().items() if k != "team"}), "no 'team' object"),
    (form(interaction(type="")), "no 'type'"),
    (form(interaction(actions=[{"value": "x"}])), "not a list of actions"),
    (form(interaction(actions="approve:GR-1042")), "not a list of actions"),
], ids=["no payload", "bad JSON", "a list", "user a string", "no team", "no type",
        "action without id", "actions a string"])
def test_a_malformed_interaction_is_a_400_naming_it(body, problem):
    with pytest.raises(PayloadError, match=problem):
        parse_interaction(verified(body))


@pytest.mark.parametrize("action_id, expected", [
    ("approve:GR-1042", ApprovalAction("approve", "GR-1042")),
    ("reject:gr-1042", ApprovalAction("reject", "GR-1042")),
    ("approve:GR-12", None), ("approve:POOL-3", None), ("delete:GR-1042", None),
    ("approve", None), ("", None), ("approve:GR-1042:extra", None),
])
def test_action_ids_carry_decision_and_code(action_id, expected):
    assert parse_action_id(action_id) == expected
    if expected:
        assert parse_action_id(expected.action_id) == expected
