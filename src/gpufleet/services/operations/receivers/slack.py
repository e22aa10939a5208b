"""Slack's Web API through slack-sdk: `chat.postMessage` to the receiver's channel for the
broadcast copy, and to each owner directly, found by `users.lookupByEmail` with their
gpufleet e-mail. A 429 carries `Retry-After`, which the sender honours."""

from __future__ import annotations

import urllib.error

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.domain.operations.rendering import slack_message
from gpufleet.services.operations.receivers.outgoing import (
    DELIVERED,
    Outgoing,
    Transport,
    no_email,
)

# Answers that no retry can change: the owner has no Slack account under that e-mail.
_PERMANENT = {"users_not_found", "invalid_auth", "account_inactive", "not_authed"}


def deliver(message: Outgoing, transport: Transport) -> Attempt:
    config = message.config
    client = WebClient(token=config["token"], timeout=int(max(1, transport.timeout_s)),
                       base_url=(config.get("api_url") or WebClient.BASE_URL).rstrip("/") + "/")
    try:
        if message.recipient is None:
            channel = config["channel"]
        elif not message.recipient_email:
            return no_email(message)
        else:
            channel = client.users_lookupByEmail(email=message.recipient_email)["user"]["id"]
        client.chat_postMessage(channel=channel, **slack_message(message.payload))
    except SlackApiError as exc:
        return api_error_attempt(exc)
    except TimeoutError as exc:
        return Attempt(ok=False, outcome="timeout", detail=str(exc) or "timed out")
    except (urllib.error.URLError, OSError) as exc:
        return Attempt(ok=False, outcome="unreachable", detail=f"{type(exc).__name__}: {exc}")
    return DELIVERED


def api_error_attempt(exc: SlackApiError) -> Attempt:
    """A Slack Web API refusal as a delivery attempt (the chat-ops notifier judges its
    calls the same way): 429 with its Retry-After, an error no retry mends permanent."""
    response = exc.response
    status = response.status_code
    headers = {str(k).lower(): v for k, v in (response.headers or {}).items()}
    retry_after = headers.get("retry-after")
    if isinstance(retry_after, list):
        retry_after = retry_after[0] if retry_after else None
    error = response.get("error") if isinstance(response.data, dict) else None
    outcome = "slack_ratelimited" if status == 429 else (
        f"slack_{error}" if error else f"http_{status}")
    return Attempt(ok=False, outcome=outcome[:63], status=status,
                   detail=str(error or response.data)[:500],
                   retry_after_s=float(retry_after) if str(retry_after or "").isdigit()
                   else None,
                   permanent=error in _PERMANENT)
