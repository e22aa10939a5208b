"""Answer a button press through the payload's `response_url` (Slack's "responding to
interactions"): replace the approval message with who decided, or tell only the presser
why nothing changed. The URL comes from a body whose signature was verified, so only Slack
(or whoever holds the signing secret) chose it. Sent after the HTTP answer, so the press is
acknowledged within Slack's 3 s whatever the post costs; a failure is logged, not raised."""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.webhook import WebhookClient

log = logging.getLogger(__name__)
TIMEOUT_S = 5


def send(url: str, message: dict[str, Any], *, replace_original: bool) -> None:
    body = {**message, "replace_original": replace_original}
    try:
        response = WebhookClient(url, timeout=TIMEOUT_S).send_dict(body)
    except Exception as exc:  # a network failure must not surface as the press's answer
        log.warning("Slack response_url post failed: %s", type(exc).__name__)
        return
    if response.status_code != 200:
        log.warning("Slack response_url answered %s", response.status_code)
