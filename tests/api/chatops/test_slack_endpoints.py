"""Slack's request URLs end to end: signed requests over real HTTP through the app, on
SQLite and PostgreSQL, with Slack's Web API and response URLs a local HTTP receiver."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select

from gpufleet.domain.requests import request_id_from_code
from gpufleet.store.tables import AuditEvent, ChatLinkCode, ChatThread, GpuRequest
from tests.api.chatops.slack_world import (
    BOT_TOKEN,
    CHANNEL,
    MIA,
    OLGA,
    TEAM,
    command_body,
    interaction_body,
    sign,
    texts,
)
from tests.lifecycle_world import act, create

COMMANDS = "/api/v1/chatops/slack/commands"
INTERACTIONS = "/api/v1/chatops/slack/interactions"
ASK = 'request 1 H100-80GB --project vision --reason "a small run"'


@pytest.fixture
def chat(h100s, api, client, clock, store):
    """mia (member of vision) and olga (operator) linked to their Slack users by an admin."""
    for chat_user, user in ((MIA, "mia"), (OLGA, "olga")):
        linked = api.post("/api/v1/chatops/identities", json={
            "platform": "slack", "team_id": TEAM, "chat_user_id": chat_user, "user": user})
        assert linked.status_code == 201, linked.text
    return Chat(client, clock, store, *h100s)


class Chat:
    def __init__(self, client, clock, store, member, operator):
        self.client, self.clock, self.store = client, clock, store
        self.member, self.operator = member, operator

    def now_s(self) -> int:
        return int(self.clock.now().timestamp())

    def post(self, path: str, body: bytes, headers: dict | None = None):
        return self.client.post(path, content=body,
                                headers=sign(body, self.now_s()) if headers is None else headers)

    def gpu(self, text: str, user: str = MIA, expect: int = 200) -> dict:
        response = self.post(COMMANDS, command_body(text, user))
        assert response.status_code == expect, response.text
        return response.json()

    def press(self, action_id: str, user: str, response_url: str):
        return self.post(INTERACTIONS, interaction_body(action_id, user, response_url))

    def requests(self) -> int:
        with self.store.read() as session:
            return session.scalar(select(func.count()).select_from(GpuRequest))

    def audit(self, action: str) -> list[AuditEvent]:
        with self.store.read() as session:
            return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action)
                                        .order_by(AuditEvent.id)))


def _code(reply: dict) -> str:
    found = re.search(r"GR-\d+", reply["text"])
    assert found, reply
    return found.group(0)


def test_every_verb_end_to_end(chat):
    created = chat.gpu(ASK)
    assert created["response_type"] == "in_channel"
    code = _code(created)
    assert "pending" in texts(created) and "a small run" in texts(created)
    with chat.store.read() as session:
        thread = session.get(ChatThread, request_id_from_code(code))
        assert (thread.platform, thread.team_id, thread.requester_chat_user_id,
                thread.channel_id, thread.thread_ts) == ("slack", TEAM, MIA, CHANNEL, None)
    request_event = chat.audit("request.created")[-1]
    assert request_event.actor == "user:mia" and request_event.subject == code
    noted = chat.audit("chat.command")[-1]
    assert (noted.actor, noted.subject, noted.details["verb"], noted.details["platform"],
            noted.details["chat_user_id"]) == ("user:mia", code, "request", "slack", MIA)

    status = chat.gpu(f"status {code}")
    assert status["response_type"] == "ephemeral" and code in texts(status)
    why = chat.gpu(f"why {code}")
    assert why["response_type"] == "ephemeral" and f"Why {code}" in texts(why)
    mine = chat.gpu("mine")
    assert code in texts(mine)
    idle = chat.gpu("idle")
    assert idle["response_type"] == "ephemeral" and "idle" in texts(idle)
    assert "/gpu request" in texts(chat.gpu("help"))

    act(chat.operator, code, "approve")
    released = chat.gpu(f"release {code}")
    assert released["response_type"] == "in_channel" and "released" in texts(released)
    assert chat.member.get(f"/api/v1/requests/{code}").json()["state"] == "released"
    assert [e.details["verb"] for e in chat.audit("chat.command")] == ["request", "release"]


def test_a_refusal_comes_back_in_the_servers_words_and_changes_nothing(chat):
    refused = chat.gpu('request 1 H100-80GB --project speech --reason "not mine"')
    assert refused["response_type"] == "ephemeral"
    assert "not a member of project 'speech'" in texts(refused)
    assert chat.requests() == 0
    assert "does not exist" in texts(chat.gpu("status GR-999999"))
    schema = chat.gpu('request 1 --project Vision --reason "caps"')
    assert "project" in texts(schema) and chat.requests() == 0


def test_text_that_is_no_command_gets_its_usage(chat):
    reply = chat.gpu("request eight GPUs")
    assert reply["response_type"] == "ephemeral" and "Usage" in texts(reply)


def test_an_unlinked_user_is_told_how_to_link_and_nothing_runs(chat, slack):
    for text in (ASK, "mine", "status GR-1", "what"):
        reply = chat.gpu(text, user="U0STRANGER")
        assert reply["response_type"] == "ephemeral"
        assert "not linked" in texts(reply) and "/gpu link" in texts(reply)
    assert chat.requests() == 0
    assert "/gpu request" in texts(chat.gpu("help", user="U0STRANGER"))
    # The directory was asked (with the bot token) and did not know the user.
    lookup = slack.lookups()[0]
    assert lookup.headers["authorization"] == f"Bearer {BOT_TOKEN}"


def test_a_slack_user_is_linked_by_their_email(chat, api, slack):
    api.post("/api/v1/users", json={"name": "eve", "role": "member",
                                    "email": "Eve@Example.org"})
    api.post("/api/v1/projects/vision/members", json={"user": "eve"})
    slack.emails["U0EVE"] = "eve@example.ORG"
    created = chat.gpu(ASK, user="U0EVE")
    assert created["response_type"] == "in_channel", created
    assert chat.member.get(f"/api/v1/requests/{_code(created)}").json()["requested_by"] == \
        "user:eve"
    identities = api.get("/api/v1/chatops/identities").json()["items"]
    assert {"chat_user_id": "U0EVE", "user": "eve", "linked_by": "email"}.items() <= \
        next(i for i in identities if i["chat_user_id"] == "U0EVE").items()
    linked = chat.audit("chat_identity.linked")[-1]
    assert (linked.subject, linked.details["user"], linked.details["linked_by"]) == \
        (f"slack:{TEAM}/U0EVE", "eve", "email")
    chat.gpu("mine", user="U0EVE")
    assert len(slack.lookups()) == 1  # linked once, then read from the store


def test_an_email_two_users_share_links_nobody(chat, api, slack):
    for name in ("twin1", "twin2"):
        api.post("/api/v1/users", json={"name": name, "role": "member",
                                        "email": "twins@example.org"})
    slack.emails["U0TWIN"] = "twins@example.org"
    assert "not linked" in texts(chat.gpu("mine", user="U0TWIN"))
    assert chat.audit("chat_identity.linked")[-1].subject != f"slack:{TEAM}/U0TWIN"


@pytest.mark.parametrize("headers", [
    pytest.param(lambda body, now: {}, id="missing"),
    pytest.param(lambda body, now: sign(body, now, secret="another-secret"), id="bad"),
    pytest.param(lambda body, now: sign(body, now - 301), id="stale"),
    pytest.param(lambda body, now: sign(body, now + 301), id="future"),
    pytest.param(lambda body, now: sign(body + b"&x=1", now), id="tampered"),
    pytest.param(lambda body, now: {**sign(body, now), "X-Slack-Request-Timestamp": "soon"},
                 id="malformed-timestamp"),
])
def test_an_unverified_command_gets_401_and_nothing_happens(chat, headers):
    body = command_body(ASK)
    for path in (COMMANDS, INTERACTIONS):
        response = chat.post(path, body, headers(body, chat.now_s()))
        assert response.status_code == 401, response.text
        assert response.json()["error"]["code"].startswith("slack_")
    assert chat.requests() == 0
    assert chat.audit("chat.command") == []


def test_a_body_over_one_mib_gets_413(chat):
    body = command_body("mine", padding="x" * (1 << 20))
    response = chat.post(COMMANDS, body)
    assert response.status_code == 413, response.text


def test_a_malformed_form_is_400_naming_it(chat):
    body = b"command=%2Fgpu&text=mine&team_id=T0TEAM&channel_id=C1"
    response = chat.post(COMMANDS, body)
    assert response.status_code == 400 and "user_id" in response.json()["error"]["message"]
    nul = command_body("mine", user="U0%00".replace("%00", "\x00"))
    assert chat.post(COMMANDS, nul).status_code == 400
    for user in ("U" * 64, "<!channel>", "U 1"):
        refused = chat.post(COMMANDS, command_body("link", user=user))
        assert refused.status_code == 400 and "user_id" in refused.json()["error"]["message"]
        refused = chat.post(INTERACTIONS, interaction_body("approve:GR-1", user, "http://x/"))
        assert refused.status_code == 400 and "user.id" in refused.json()["error"]["message"]
    with chat.store.read() as session:
        assert session.scalar(select(func.count()).select_from(ChatLinkCode)) == 0


def test_operator_presses_approve(chat, slack):
    code = create(chat.member, count=1, models=["H100-80GB"], reason="ok")["code"]
    response = chat.press(f"approve:{code}", OLGA, slack.response_url())
    assert response.status_code == 200, response.text
    view = chat.member.get(f"/api/v1/requests/{code}").json()
    assert view["state"] == "active" and view["decided_by"] == "user:olga"
    [posted] = slack.posts_to()
    assert posted["replace_original"] is True
    assert "by olga" in texts(posted) and not any(
        b["type"] == "actions" for b in posted["blocks"])
    approved = chat.audit("request.approved")
    assert [(e.actor, e.subject) for e in approved] == [("user:olga", code)]
    assert chat.audit("chat.command")[-1].details["verb"] == "approve"


def test_operator_presses_reject(chat, slack):
    code = create(chat.member, count=1, models=["H100-80GB"])["code"]
    chat.press(f"reject:{code}", OLGA, slack.response_url())
    assert chat.member.get(f"/api/v1/requests/{code}").json()["state"] == "rejected"
    assert "rejected by olga" in texts(slack.posts_to()[0])


def test_a_member_pressing_approve_is_refused_and_nothing_changes(chat, slack):
    code = create(chat.member, count=1, models=["H100-80GB"])["code"]
    assert chat.press(f"approve:{code}", MIA, slack.response_url()).status_code == 200
    assert chat.member.get(f"/api/v1/requests/{code}").json()["state"] == "pending"
    [posted] = slack.posts_to()
    assert posted["replace_original"] is False and posted["response_type"] == "ephemeral"
    assert "may not approve requests" in texts(posted)
    assert chat.audit("request.approved") == [] and chat.audit("chat.command") == []


def test_an_unlinked_presser_is_told_how_to_link(chat, slack):
    code = create(chat.member, count=1, models=["H100-80GB"])["code"]
    chat.press(f"approve:{code}", "U0STRANGER", slack.response_url())
    assert chat.member.get(f"/api/v1/requests/{code}").json()["state"] == "pending"
    assert "not linked" in texts(slack.posts_to()[0])


def test_a_replayed_press_changes_nothing(chat, slack):
    code = create(chat.member, count=1, models=["H100-80GB"])["code"]
    body = interaction_body(f"approve:{code}", OLGA, slack.response_url())
    headers = sign(body, chat.now_s())
    assert chat.post(INTERACTIONS, body, headers).status_code == 200
    assert chat.post(INTERACTIONS, body, headers).status_code == 200  # within the window
    first, second = slack.posts_to()
    assert first["replace_original"] is True
    assert second["replace_original"] is False and "active" in texts(second)
    chat.clock.advance(301)
    assert chat.post(INTERACTIONS, body, headers).status_code == 401  # past it
    assert len(chat.audit("request.approved")) == 1
    assert len(slack.posts_to()) == 2


def test_a_decided_request_is_not_decided_again(chat, slack):
    code = create(chat.member, count=1, models=["H100-80GB"])["code"]
    act(chat.operator, code, "reject")
    chat.press(f"approve:{code}", OLGA, slack.response_url())
    assert chat.member.get(f"/api/v1/requests/{code}").json()["state"] == "rejected"
    [posted] = slack.posts_to()
    assert posted["replace_original"] is False and code in texts(posted)


def test_a_press_without_a_response_url_is_answered_in_the_reply(chat):
    code = create(chat.member, count=1, models=["H100-80GB"])["code"]
    body = interaction_body(f"reject:{code}", OLGA, "")
    reply = chat.post(INTERACTIONS, body).json()
    assert "rejected by olga" in texts(reply)
