"""A server with chat-ops configured, Slack's Web API and response URLs as a local HTTP
receiver, and signed requests made the way Slack and Mattermost make them."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from gpufleet.settings import Settings
from tests.api.chatops.block_kit import seen_text
from tests.local_receivers import LocalHttpReceiver, Received, Reply

SECRET = "chat-test-signing-secret-0123456789"
BOT_TOKEN = "xoxb-test-bot-token"
MATTERMOST_TOKEN = "mm-command-token-abcdef"
TEAM = "T0TEAM"
CHANNEL = "C0GENERAL"
MIA, OLGA = "U0MIA", "U0OLGA"


@dataclass
class SlackStandIn:
    """Slack's Web API (`users.info` answers from `emails`) and the response URLs."""

    receiver: LocalHttpReceiver
    emails: dict[str, str] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return f"{self.receiver.url}/api/"

    def response_url(self, name: str = "press") -> str:
        return f"{self.receiver.url}/actions/{name}"

    def answer(self, got: Received) -> Reply:
        url = urlsplit(got.path)
        if url.path.endswith("/users.info"):
            asked = {**parse_qs(got.body.decode()), **parse_qs(url.query)}  # POST form or GET
            user = asked.get("user", [""])[0]
            if user not in self.emails:
                return _json({"ok": False, "error": "user_not_found"})
            return _json({"ok": True, "user": {"id": user, "profile": {
                "email": self.emails[user]}}})
        return Reply(body=b"ok")

    def posts_to(self, name: str = "press") -> list[dict]:
        return [r.json() for r in self.receiver.received
                if r.method == "POST" and r.path == f"/actions/{name}"]

    def lookups(self) -> list[Received]:
        return [r for r in self.receiver.received if "users.info" in r.path]


def _json(body: dict) -> Reply:
    return Reply(body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


@pytest.fixture
def slack() -> Iterator[SlackStandIn]:
    stand_in = SlackStandIn(LocalHttpReceiver())
    stand_in.receiver.respond = stand_in.answer
    with stand_in.receiver:
        yield stand_in


@pytest.fixture
def settings(tmp_path, slack) -> Settings:
    """conftest's settings with Slack and Mattermost configured."""
    return Settings(data_dir=tmp_path / "data", heartbeat_interval_s=30,
                    unreachable_after_missed_heartbeats=3, slack_signing_secret=SECRET,
                    slack_bot_token=BOT_TOKEN, slack_api_url=slack.api_url,
                    mattermost_command_token=MATTERMOST_TOKEN)


def sign(body: bytes, timestamp: int, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), f"v0:{timestamp}:".encode() + body, hashlib.sha256)
    return {"X-Slack-Request-Timestamp": str(timestamp),
            "X-Slack-Signature": f"v0={digest.hexdigest()}",
            "Content-Type": "application/x-www-form-urlencoded"}


def command_body(text: str, user: str = MIA, team: str = TEAM, **extra: str) -> bytes:
    return urlencode({"command": "/gpu", "text": text, "user_id": user, "team_id": team,
                      "channel_id": CHANNEL, "user_name": user.lower(),
                      "response_url": "https://hooks.slack.invalid/commands/1",
                      "trigger_id": "1.2.3", **extra}).encode()


def interaction_body(action_id: str, user: str, response_url: str,
                     team: str = TEAM) -> bytes:
    payload = {"type": "block_actions", "user": {"id": user}, "team": {"id": team},
               "channel": {"id": "C0APPROVALS"}, "container": {"message_ts": "1700000000.1"},
               "response_url": response_url, "actions": [{"action_id": action_id}]}
    return urlencode({"payload": json.dumps(payload)}).encode()


texts = seen_text  # what the endpoint tests call it
