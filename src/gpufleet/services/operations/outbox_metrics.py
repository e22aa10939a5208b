"""The outbox on the server's `/metrics`: what waits for each receiver, what was given up
on, and how late the oldest waiting message is — so a receiver that stopped answering
shows on a dashboard before anyone misses a message (docs/operations.md, "The outbox")."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.services.telemetry.server_metrics import Family
from gpufleet.store.tables import OutboxMessage, Receiver


def families(session: Session, now: datetime) -> list[Family]:
    messages = Family("gpufleet_outbox_messages", "Outbox messages not delivered, by "
                      "receiver and state (waiting: to be tried again; abandoned: given up).",
                      ("receiver", "state"))
    oldest = Family("gpufleet_outbox_oldest_waiting_seconds", "Age of the oldest message "
                    "waiting for each receiver (0: none waits).", ("receiver",))
    names = dict(session.execute(select(Receiver.id, Receiver.name)).all())
    for name in names.values():
        messages.add(0, receiver=name, state="waiting")
        messages.add(0, receiver=name, state="abandoned")
        oldest.add(0, receiver=name)
    undelivered = OutboxMessage.delivered_at.is_(None)
    for receiver_id, abandoned, count, first in session.execute(
            select(OutboxMessage.receiver_id, OutboxMessage.abandoned_at.is_not(None),
                   func.count(), func.min(OutboxMessage.created_at))
            .where(undelivered)
            .group_by(OutboxMessage.receiver_id, OutboxMessage.abandoned_at.is_not(None))):
        name = names[receiver_id]
        messages.add(count, receiver=name, state="abandoned" if abandoned else "waiting")
        if not abandoned and first is not None:
            oldest.add(max(0.0, (now - first).total_seconds()), receiver=name)
    return [messages, oldest]
