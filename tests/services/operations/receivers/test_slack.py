"""Slack through slack-sdk against a local server standing in for Slack's Web API, and
Slack incoming webhooks: Block Kit text, owners by e-mail, 429 Retry-After."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

from gpufleet.services.operations.receivers import slack, slack_webhook
from tests.local_receivers import LocalHttpReceiver, Received, Reply
from tests.services.operations.receivers.outgoing_world import outgoing, transport


def _fake_slack(ratelimited: list[bool]):
    def respond(got: Received) -> Reply:
        path = urlsplit(got.path).path
        if ratelimited and ratelimited.pop(0):
            return Reply(429, b'{"ok": false, "error": "ratelimited"}',
                         {"Retry-After": "30", "Content-Type": "application/json"})
        if path == "/api/users.lookupByEmail":
            query = parse_qs(urlsplit(got.path).query) or parse_qs(got.body.decode())
            if query.get("email") == ["alice@example.com"]:
                return Reply(200, b'{"ok": true, "user": {"id": "U0ALICE"}}',
                             {"Content-Type": "application/json"})
            return Reply(200, b'{"ok": false, "error": "users_not_found"}',
                         {"Content-Type": "application/json"})
        if path == "/api/chat.postMessage":
            return Reply(200, b'{"ok": true, "ts": "1.2"}', {"Content-Type": "application/json"})
        return Reply(404, b'{"ok": false, "error": "unknown_method"}')
    return respond


def _posted(server: LocalHttpReceiver) -> list[dict]:
    return [r.json() for r in server.received if r.path.endswith("/chat.postMessage")]


def test_the_broadcast_copy_goes_to_the_channel_in_block_kit():
    with LocalHttpReceiver(_fake_slack([])) as server, transport() as t:
        config = {"token": "xoxb-test-token", "channel": "#gpu-ops",
                  "api_url": f"{server.url}/api"}
        attempt = slack.deliver(outgoing("slack", config), t)
    assert attempt.ok, attempt
    [posted] = _posted(server)
    assert posted["channel"] == "#gpu-ops"
    assert posted["text"] == "[critical] GPU-3f2a quarantined by XID 79"
    section, context = posted["blocks"]
    assert section["type"] == "section" and "*GPU-3f2a quarantined by XID 79*" in \
        section["text"]["text"]
    assert "project=vision" in context["elements"][0]["text"]
    assert server.received[0].headers["authorization"] == "Bearer xoxb-test-token"


def test_an_owner_is_found_by_email_and_messaged_directly():
    with LocalHttpReceiver(_fake_slack([])) as server, transport() as t:
        config = {"token": "xoxb-test-token", "api_url": f"{server.url}/api/"}
        ok = slack.deliver(outgoing("slack", config, recipient="alice",
                                    email="alice@example.com"), t)
        unknown = slack.deliver(outgoing("slack", config, recipient="bob",
                                         email="bob@example.com"), t)
        no_email = slack.deliver(outgoing("slack", config, recipient="carol"), t)
    assert ok.ok
    assert [p["channel"] for p in _posted(server)] == ["U0ALICE"]
    assert (unknown.ok, unknown.outcome, unknown.permanent) == (False, "slack_users_not_found",
                                                                True)
    assert (no_email.outcome, no_email.permanent) == ("no_email", True)


def test_a_429_carries_retry_after():
    with LocalHttpReceiver(_fake_slack([True])) as server, transport() as t:
        config = {"token": "xoxb-test-token", "channel": "C1", "api_url": f"{server.url}/api"}
        attempt = slack.deliver(outgoing("slack", config), t)
    assert (attempt.ok, attempt.outcome, attempt.status, attempt.retry_after_s) == (
        False, "slack_ratelimited", 429, 30.0)
    assert not attempt.permanent


def test_an_unreachable_slack_is_a_retryable_failure():
    with LocalHttpReceiver() as server:
        url = server.url
    with transport(timeout_s=1) as t:
        attempt = slack.deliver(outgoing("slack", {"token": "xoxb-test-token", "channel": "C1",
                                                   "api_url": f"{url}/api"}), t)
    assert (attempt.ok, attempt.outcome, attempt.permanent) == (False, "unreachable", False)


def test_an_incoming_webhook_gets_block_kit_json():
    with LocalHttpReceiver() as hook, transport() as t:
        attempt = slack_webhook.deliver(outgoing("slack_webhook", {"url": hook.url + "/T/B/x"}), t)
    assert attempt.ok
    [got] = hook.received
    assert got.path == "/T/B/x"
    body = json.loads(got.body)
    assert body["text"].startswith("[critical]") and body["blocks"][0]["type"] == "section"


def test_an_incoming_webhook_429_is_retried_after_its_retry_after():
    with LocalHttpReceiver(lambda _r: Reply(429, b"rate_limited", {"Retry-After": "12"})) as h, \
            transport() as t:
        attempt = slack_webhook.deliver(outgoing("slack_webhook", {"url": h.url}), t)
    assert (attempt.outcome, attempt.status, attempt.retry_after_s) == ("http_429", 429, 12.0)
