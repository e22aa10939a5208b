"""A local server standing in for Slack's Web API (`chat.postMessage`, `chat.update`), and
the app's settings pointed at it: what the chat-ops notifier tests run against."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.local_receivers import LocalHttpReceiver, Received, Reply

APPROVALS = "C0APPROVALS"
JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Call:
    method: str  # chat.postMessage, chat.update
    body: dict


class FakeSlack:
    """Answers as Slack does: a post gets the channel's id and a fresh `ts`. `script`
    holds answers to give instead, one per call, in order (None: answer normally), so a
    test makes Slack fail on exactly the calls it means. `accepted` lists the calls Slack
    took, in order."""

    def __init__(self):
        self.script: list[Reply | None] = []
        self.accepted: list[Call] = []
        self._ts = 0
        self._lock = threading.Lock()
        self.server = LocalHttpReceiver(self._respond)

    def __enter__(self) -> FakeSlack:
        self.server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)

    @property
    def api_url(self) -> str:
        return f"{self.server.url}/api/"

    def _respond(self, got: Received) -> Reply:
        with self._lock:
            scripted = self.script.pop(0) if self.script else None
            if scripted is not None:
                return scripted
            method = urlsplit(got.path).path.rsplit("/", 1)[-1]
            body = got.json()
            channel = body.get("channel")
            if method == "chat.postMessage":
                self._ts += 1
                ts = f"1700000000.{self._ts:06d}"
            elif method == "chat.update":
                ts = body["ts"]
            else:
                return Reply(200, b'{"ok": false, "error": "unknown_method"}', JSON)
            self.accepted.append(Call(method, body))
            return Reply(200, json.dumps({"ok": True, "channel": channel, "ts": ts}).encode(),
                         JSON)

    def posts(self, channel: str | None = None) -> list[dict]:
        return [c.body for c in self.accepted if c.method == "chat.postMessage"
                and (channel is None or c.body["channel"] == channel)]

    def updates(self) -> list[dict]:
        return [c.body for c in self.accepted if c.method == "chat.update"]



def buttons(message: dict) -> list[dict]:
    return [e for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]
