"""A Slack incoming webhook: Block Kit message to the channel the webhook was made for."""

from __future__ import annotations

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.domain.operations.rendering import slack_message
from gpufleet.services.operations.receivers.outgoing import Outgoing, Transport, http_attempt


def deliver(message: Outgoing, transport: Transport) -> Attempt:
    return http_attempt(lambda: transport.http.post(
        message.config["url"], json=slack_message(message.payload),
        timeout=transport.timeout_s))
