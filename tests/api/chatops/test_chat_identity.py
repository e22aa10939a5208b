"""Linking chat users: `/gpu link` and `gpufleet chatops link CODE`, administrators'
links, and Mattermost's slash command; over real HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpufleet.api.app import create_app
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.tables import AuditEvent, ChatLinkCode
from tests.api.chatops.slack_world import (
    MATTERMOST_TOKEN,
    TEAM,
    command_body,
    sign,
    texts,
)

COMMANDS = "/api/v1/chatops/slack/commands"
MATTERMOST = "/api/v1/chatops/mattermost/commands"
LINKS = "/api/v1/chatops/links"
IDENTITIES = "/api/v1/chatops/identities"


def slack(client, clock, text: str, user: str) -> dict:
    body = command_body(text, user)
    response = client.post(COMMANDS, content=body, headers=sign(body, int(clock.now().timestamp())))
    assert response.status_code == 200, response.text
    return response.json()


def link_code(reply: dict) -> str:
    assert reply["response_type"] == "ephemeral"
    found = re.search(r"gpufleet chatops link (\S+)", reply["text"])
    assert found, reply
    return found.group(1)


def audit(store, action: str) -> list[AuditEvent]:
    with store.read() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action)))


def test_a_link_code_links_the_chat_user_to_whoever_redeems_it(people, client, clock, store):
    member, _ = people
    assert "not linked" in texts(slack(client, clock, "mine", "U0NEW"))
    code = link_code(slack(client, clock, "link", "U0NEW"))
    with store.read() as session:  # only the hash is kept
        assert session.scalar(select(ChatLinkCode.code_hash)) != code
    linked = member.post(LINKS, json={"code": code})
    assert linked.status_code == 201, linked.text
    assert linked.json() | {"linked_at": None} == {
        "platform": "slack", "team_id": TEAM, "chat_user_id": "U0NEW", "user": "mia",
        "linked_by": "link-code", "linked_at": None}
    assert "Your requests" in texts(slack(client, clock, "mine", "U0NEW")) or \
        "No requests" in texts(slack(client, clock, "mine", "U0NEW"))
    [event] = audit(store, "chat_identity.linked")
    assert (event.actor, event.subject, event.details["user"]) == \
        ("user:mia", f"slack:{TEAM}/U0NEW", "mia")


def test_a_link_code_works_once(people, client, clock):
    member, operator = people
    code = link_code(slack(client, clock, "link", "U0NEW"))
    assert member.post(LINKS, json={"code": code}).status_code == 201
    again = operator.post(LINKS, json={"code": code})
    assert again.status_code == 409 and again.json()["error"]["code"] == "link_code_used"
    assert slack(client, clock, "status GR-1", "U0NEW")  # still mia's, not olga's
    assert member.get(IDENTITIES).status_code == 403
    assert [i["user"] for i in operator.get(IDENTITIES).json()["items"]] == ["mia"]


def test_a_link_code_expires_after_fifteen_minutes(people, client, clock):
    member, _ = people
    code = link_code(slack(client, clock, "link", "U0NEW"))
    clock.advance(15 * 60)
    expired = member.post(LINKS, json={"code": code})
    assert expired.status_code == 409 and expired.json()["error"]["code"] == "link_code_expired"
    assert "not linked" in texts(slack(client, clock, "mine", "U0NEW"))


def test_an_unknown_or_malformed_code_is_refused(people):
    member, _ = people
    assert member.post(LINKS, json={"code": "nope"}).status_code == 404
    assert member.post(LINKS, json={"code": "no spaces!"}).status_code == 422
    assert member.post(LINKS, json={}).status_code == 422


def test_a_token_without_a_user_links_nobody(people, api, client, clock):
    code = link_code(slack(client, clock, "link", "U0NEW"))
    ingest = api.post("/api/v1/tokens", json={"name": "svc", "role": "operator"}).json()["token"]
    refused = api.as_(ingest).post(LINKS, json={"code": code})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "token_without_user"


def test_admins_link_and_unlink_by_hand(people, api, client, clock, store):
    _, operator = people
    body = {"platform": "slack", "team_id": TEAM, "chat_user_id": "U0OLGA", "user": "olga"}
    assert operator.post(IDENTITIES, json=body).status_code == 403
    assert api.post(IDENTITIES, json={**body, "user": "ghost"}).status_code == 404
    linked = api.post(IDENTITIES, json=body)
    assert linked.status_code == 201 and linked.json()["linked_by"] == "user:admin"
    relinked = api.post(IDENTITIES, json={**body, "user": "mia"}).json()
    assert relinked["user"] == "mia"
    assert audit(store, "chat_identity.linked")[-1].details["previous_user"] == "olga"
    path = f"{IDENTITIES}/slack/{TEAM}/U0OLGA"
    assert operator.request("DELETE", path).status_code == 403
    assert api.request("DELETE", path).status_code == 200
    assert api.request("DELETE", path).status_code == 404
    assert [e.subject for e in audit(store, "chat_identity.unlinked")] == [f"slack:{TEAM}/U0OLGA"]
    assert "not linked" in texts(slack(client, clock, "mine", "U0OLGA"))
    assert api.request("DELETE", f"{IDENTITIES}/irc/{TEAM}/U0OLGA").status_code == 422


# --- Mattermost ------------------------------------------------------------------------------
def mattermost_body(text: str, user: str = "mmuser0000000000000000000a",
                    token: str | None = MATTERMOST_TOKEN) -> bytes:
    form = {"command": "/gpu", "text": text, "user_id": user, "team_id": "mmteam",
            "channel_id": "mmchannel", "user_name": "someone",
            "response_url": "https://mm.invalid/hooks/commands/1"}
    if token is not None:
        form["token"] = token
    return urlencode(form).encode()


def mm(client, text: str, **kwargs):
    return client.post(MATTERMOST, content=mattermost_body(text, **kwargs),
                       headers={"Content-Type": "application/x-www-form-urlencoded"})


@pytest.mark.parametrize("token", [None, "", "wrong-token", MATTERMOST_TOKEN + "x"])
def test_mattermost_with_a_wrong_token_gets_401(people, client, token):
    response = mm(client, "link", token=token)
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "mattermost_bad_token"


def test_mattermost_links_by_code_and_answers_in_text(h100s, client):
    member, _ = h100s
    unlinked = mm(client, "mine").json()
    assert unlinked["response_type"] == "ephemeral" and "not linked" in unlinked["text"]
    assert set(unlinked) == {"response_type", "text"}
    code = re.search(r"gpufleet chatops link (\S+)", mm(client, "link").json()["text"]).group(1)
    assert member.post(LINKS, json={"code": code}).json()["platform"] == "mattermost"
    created = mm(client, 'request 1 --project vision --reason "from mattermost"').json()
    assert created["response_type"] == "in_channel" and "GR-" in created["text"], created
    refused = mm(client, 'request 1 --project speech --reason "x"').json()
    assert "not a member of project 'speech'" in refused["text"]


@pytest.mark.parametrize("unset", ["slack", "mattermost"])
def test_a_platform_without_its_secret_answers_404(store, clock, tmp_path, unset):
    settings = Settings(data_dir=tmp_path / "data")
    gf = Gpufleet(store, settings, clock)
    with TestClient(create_app(gf, background_loops=False)) as client:
        body = command_body("mine")
        path = COMMANDS if unset == "slack" else MATTERMOST
        response = client.post(path, content=body,
                               headers=sign(body, int(clock.now().timestamp())))
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "chatops_not_configured"
    gf.close_telemetry()
