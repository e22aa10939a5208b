"""The demo's one receiver: the users' own inbox, telling owners what happens to their
allocations (a quarantine first of all), so the demo shows an owner told within minutes
(docs/operations.md, "Receivers"). Idempotent: a receiver named `inbox` is kept as it is.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from gpufleet.store.database import StateStore
from gpufleet.store.tables import Receiver

INBOX = "inbox"


def seed_owner_inbox(store: StateStore, now: datetime) -> bool:
    """Add the `inbox` receiver (owners only, warning and up); False if it was there."""
    with store.write() as session:
        if session.scalar(select(Receiver.id).where(Receiver.name == INBOX)) is not None:
            return False
        session.add(Receiver(name=INBOX, kind="inbox", config={}, matchers=[], kinds=[],
                             min_severity="warning", broadcast=False, tells_owners=True,
                             enabled=True, created_by="gpufleet demo", created_at=now))
    return True
