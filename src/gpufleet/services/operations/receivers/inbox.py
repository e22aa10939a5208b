"""The users' own inbox: the outbox row is the stored message, so delivering it is only
marking it delivered; `GET /api/v1/notifications` lists it for its recipient."""

from __future__ import annotations

from gpufleet.domain.operations.delivery import DELIVERED, Attempt
from gpufleet.services.operations.receivers.outgoing import Outgoing, Transport


def deliver(message: Outgoing, transport: Transport) -> Attempt:
    return DELIVERED
