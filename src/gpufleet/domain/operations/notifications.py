"""A notification: one thing a person or a system must be told, before it is delivered.

Features (health, alerts, reclamation, the lifecycle) say *what* happened as a
`Notification`; the outbox decides *who* gets it (receivers whose matchers match its
labels, and the owners it names) and delivers it at least once (docs/operations.md,
"Notifications and the outbox").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Severity(StrEnum):
    """Ordered: a receiver that takes `warning` also takes `critical`."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}

# The labels every notification about a unit carries where they apply, so a receiver can
# route on them and a reader knows whose it is (docs/operations.md, "Labels").
UNIT_LABELS = ("environment", "node", "gpu", "mig_instance", "allocation", "project", "owner")


@dataclass(frozen=True)
class Notification:
    """What to tell, and about what.

    `kind`: a dotted event name (`health.quarantined`, `alert.firing`, `reclaim.warning`).
    `dedup_key`: the same key is queued once per receiver and recipient, ever — an
    evaluation that runs twice (a retry, a second replica) tells nobody twice.
    `owners`: gpufleet user names to tell directly (the allocation's requester), through
    every receiver that reaches people (`Receiver.tells_owners`).
    """

    kind: str
    severity: Severity
    summary: str
    dedup_key: str
    text: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[str, ...] = ()
    # False: for the owners only, never a channel's copy (an owner's own alerts of a group:
    # services/operations/alert_notifications.py).
    broadcast: bool = True
    # The event itself (docs/operations.md, "Events") when this tells a subscriber of one.
    event: Mapping[str, Any] | None = None

    def as_payload(self) -> dict:
        """The stable JSON a receiver renders (docs/operations.md, "Notification schema")."""
        payload = {"kind": self.kind, "severity": self.severity.value, "summary": self.summary,
                   "text": self.text, "labels": dict(self.labels),
                   "dedup_key": self.dedup_key}
        if self.event is not None:
            payload["event"] = dict(self.event)
        return payload
