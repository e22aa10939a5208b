"""The two Slack Web API calls the chat-ops notifier makes, through slack-sdk:
`chat.postMessage` (a new message, or a reply in a thread) and `chat.update` (the approval
message once decided). A refusal, a timeout or an unreachable Slack raises `SlackCallFailed`
carrying the attempt, judged as the Slack receiver judges its own (a 429's Retry-After),
and permanent only for an error about the message itself (`MESSAGE_ERRORS`), so the
notifier retries as the outbox does (docs/operations.md, "The
outbox"). The bot token goes in the Authorization header only; slack-sdk redacts it from
its debug log, and nothing here logs it.
"""

from __future__ import annotations

import urllib.error
from dataclasses import dataclass, replace
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.services.operations.receivers.slack import api_error_attempt

# Errors about this one message or channel, which no retry mends: the event is passed.
# A bad or revoked token is not among them: every call fails alike until an operator fixes
# the setting, and then what waited is told (within `outbox_give_up_after_s`).
MESSAGE_ERRORS = frozenset({
    "channel_not_found", "not_in_channel", "is_archived", "message_not_found",
    "cant_update_message", "edit_window_closed", "msg_too_long", "no_text", "invalid_blocks",
    "invalid_arguments", "restricted_action", "thread_not_found"})


class SlackCallFailed(Exception):
    def __init__(self, method: str, attempt: Attempt):
        super().__init__(f"{method}: {attempt.outcome}")
        self.method = method
        self.attempt = attempt


@dataclass(frozen=True)
class Posted:
    """Where a posted message is: the channel's id (Slack answers it even when the post
    named `#channel`) and the message's `ts`, which `chat.update` and thread replies need."""

    channel: str
    ts: str


class SlackWeb:
    def __init__(self, token: str, api_url: str, timeout_s: float):
        self._client = WebClient(token=token, timeout=int(max(1, timeout_s)),
                                 base_url=api_url.rstrip("/") + "/")

    def post(self, channel: str, message: dict[str, Any],
             thread_ts: str | None = None) -> Posted:
        fields = _fields(message)
        if thread_ts:
            fields["thread_ts"] = thread_ts
        answer = self._call("chat.postMessage", lambda: self._client.chat_postMessage(
            channel=channel, **fields))
        ts = answer.get("ts")
        if not isinstance(ts, str) or not ts:
            raise SlackCallFailed("chat.postMessage", Attempt(
                ok=False, outcome="slack_no_ts", detail="the answer named no message ts"))
        answered = answer.get("channel")
        return Posted(answered if isinstance(answered, str) and answered else channel, ts)

    def update(self, channel: str, ts: str, message: dict[str, Any]) -> None:
        self._call("chat.update", lambda: self._client.chat_update(
            channel=channel, ts=ts, **_fields(message)))

    @staticmethod
    def _call(method: str, call):
        try:
            return call()
        except SlackApiError as exc:
            attempt = api_error_attempt(exc)
            error = attempt.outcome.removeprefix("slack_")
            raise SlackCallFailed(method, replace(
                attempt, permanent=error in MESSAGE_ERRORS)) from None
        except TimeoutError as exc:
            raise SlackCallFailed(method, Attempt(
                ok=False, outcome="timeout", detail=str(exc) or "timed out")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise SlackCallFailed(method, Attempt(
                ok=False, outcome="unreachable", detail=f"{type(exc).__name__}: {exc}")) from None


def _fields(message: dict[str, Any]) -> dict[str, Any]:
    """A Block Kit message as `chat.*` arguments: `response_type` belongs to slash-command
    answers, not to the Web API."""
    return {"text": message["text"], "blocks": message["blocks"]}
