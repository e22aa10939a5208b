"""One module per receiver kind; each turns an outgoing message into one delivery attempt
(docs/operations.md, "Receivers"). `DELIVER` is the table the sender looks a kind up in."""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.domain.operations.delivery import Attempt
from gpufleet.services.operations.receivers import (
    alertmanager,
    email_smtp,
    inbox,
    slack,
    slack_webhook,
    webhook,
)
from gpufleet.services.operations.receivers.outgoing import Outgoing, Transport

DELIVER: dict[str, Callable[[Outgoing, Transport], Attempt]] = {
    "webhook": webhook.deliver,
    "slack_webhook": slack_webhook.deliver,
    "slack": slack.deliver,
    "email": email_smtp.deliver,
    "alertmanager": alertmanager.deliver,
    "inbox": inbox.deliver,
}

__all__ = ["DELIVER", "Outgoing", "Transport"]
