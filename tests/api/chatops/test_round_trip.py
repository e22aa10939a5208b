"""Both halves of chat-ops together, as a Slack workspace sees them: a member asks with
`/gpu request`, the request is posted to the approvals channel and opened in a thread where
it was asked, an operator presses Approve, the approval message says who decided, and the
thread tells the requester it is active (with its exports) and, after `/gpu release`,
released. Signed requests over real HTTP through the app, SQLite and PostgreSQL; one local
server stands in for Slack's Web API and its response URLs."""

from __future__ import annotations

import re

import pytest

from gpufleet.services.chatops.notifier import ChatNotifier
from gpufleet.settings import Settings
from tests.api.chatops.slack_world import (
    CHANNEL,
    MIA,
    OLGA,
    SECRET,
    TEAM,
    SlackStandIn,
    command_body,
    interaction_body,
    sign,
    texts,
)
from tests.services.chatops.slack_world import APPROVALS, FakeSlack, buttons


@pytest.fixture
def slack():
    """Slack's chat methods (FakeSlack) and its users.info and response URLs (SlackStandIn)
    on one local server, as one workspace."""
    with FakeSlack() as fake:
        directory = SlackStandIn(fake.server)
        chat_methods = fake.server.respond
        fake.server.respond = lambda got: (
            chat_methods(got) if "/api/chat." in got.path else directory.answer(got))
        fake.directory = directory
        yield fake


@pytest.fixture
def settings(tmp_path, slack) -> Settings:
    return Settings(data_dir=tmp_path / "data", heartbeat_interval_s=30,
                    unreachable_after_missed_heartbeats=3, slack_signing_secret=SECRET,
                    slack_bot_token="xoxb-round-trip", slack_api_url=slack.api_url,
                    slack_approvals_channel=APPROVALS, outbox_receiver_timeout_s=5)


def test_a_request_from_slack_to_release(h100s, api, client, clock, gf, slack):
    for chat_user, user in ((MIA, "mia"), (OLGA, "olga")):
        assert api.post("/api/v1/chatops/identities", json={
            "platform": "slack", "team_id": TEAM, "chat_user_id": chat_user,
            "user": user}).status_code == 201
    notifier = ChatNotifier(gf.store, gf.settings, gf.clock, jitter=lambda: 0.0)
    notifier.run_once()  # the first round starts at the newest event

    def signed(path: str, body: bytes):
        response = client.post(path, content=body,
                               headers=sign(body, int(clock.now().timestamp())))
        assert response.status_code == 200, response.text
        return response

    asked = signed("/api/v1/chatops/slack/commands", command_body(
        'request 2 H100-80GB --project vision --same-node --reason "eval run"')).json()
    code = re.search(r"GR-\d+", asked["text"]).group(0)
    assert asked["response_type"] == "in_channel" and "pending" in texts(asked)
    notifier.run_once()

    [approval] = slack.posts(APPROVALS)
    assert [b["action_id"] for b in buttons(approval)] == [f"approve:{code}",
                                                           f"reject:{code}"]
    [opener] = slack.posts(CHANNEL)
    assert opener["blocks"][0]["text"]["text"].startswith(f"<@{MIA}> *{code}*")

    signed("/api/v1/chatops/slack/interactions", interaction_body(
        buttons(approval)[0]["action_id"], OLGA, slack.directory.response_url()))
    [pressed] = slack.directory.posts_to()
    assert pressed["replace_original"] is True and "by olga" in texts(pressed)
    notifier.run_once()
    [update] = slack.updates()
    assert update["channel"] == APPROVALS and update["text"] == f"{code} approved by olga"
    assert not any(b["type"] == "actions" for b in update["blocks"])

    signed("/api/v1/chatops/slack/commands", command_body(f"release {code}"))
    notifier.run_once()
    _, *replies = slack.posts(CHANNEL)
    assert [r["text"] for r in replies] == [f"{code} was approved by olga", f"{code} is active",
                                            f"{code} was released by mia"]
    assert {r["thread_ts"] for r in replies} == {opener_ts(slack, opener)}
    assert f"export GPUFLEET_ALLOCATION={code}" in texts(replies[1])
    assert "export CUDA_VISIBLE_DEVICES=" in texts(replies[1])
    history = [e["action"] for e in api.get(f"/api/v1/requests/{code}/history").json()["items"]]
    assert history.count("chat.command") == 3  # request, approve, release: each from chat


def test_an_auto_approved_chat_request_is_told_it_is_active(h100s, api, client, clock, gf,
                                                          slack):
    """Granted in the request's own round: its origin commits with it, so the thread opens
    and says "active" even though no later event names the request."""
    assert api.post("/api/v1/chatops/identities", json={
        "platform": "slack", "team_id": TEAM, "chat_user_id": MIA,
        "user": "mia"}).status_code == 201
    assert api.request("PUT", "/api/v1/projects/vision/quotas", json={
        "flavour": "H100-80GB", "limit": 8}).status_code == 200
    assert api.request("PUT", "/api/v1/projects/vision/auto-approve", json={
        "max_gpus": 4, "max_hours": 48}).status_code == 200
    notifier = ChatNotifier(gf.store, gf.settings, gf.clock, jitter=lambda: 0.0)
    notifier.run_once()
    body = command_body('request 1 H100-80GB --project vision --hours 12 --reason "quick look"')
    reply = client.post("/api/v1/chatops/slack/commands", content=body,
                        headers=sign(body, int(clock.now().timestamp()))).json()
    code = re.search(r"GR-\d+", reply["text"]).group(0)
    notifier.run_once()
    assert slack.posts(APPROVALS) == []  # nobody has to decide
    opener, *replies = slack.posts(CHANNEL)
    assert f"*{code}*" in opener["blocks"][0]["text"]["text"]
    assert f"{code} is active" in [r["text"] for r in replies]


def opener_ts(slack: FakeSlack, opener: dict) -> str:
    """The ts Slack gave the opener: the order of posts numbers them."""
    index = next(i for i, call in enumerate(c for c in slack.accepted
                                            if c.method == "chat.postMessage")
                 if call.body is opener)
    return f"1700000000.{index + 1:06d}"
