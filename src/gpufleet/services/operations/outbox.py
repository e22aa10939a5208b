"""Queue notifications in the outbox, in the caller's transaction.

`notify` is the one way a feature tells anyone anything: it writes one outbox row per
receiver (and per owner, for receivers that tell owners) in the same transaction as the
change that caused it, so a notification exists exactly when its cause committed — never
lost to a crash between the two, never sent for a change that rolled back. Delivery is the
sender's business, later and outside the transaction (docs/operations.md, "The outbox").

The rows are written with multi-row Core INSERTs, not ORM objects: an evaluation round
over the fleet queues thousands at once, and one ORM object per row was most of its cost
(BENCHMARKS.md, "The outbox"). So callers get back what was queued (`Queued`), not rows
of the session: nothing of the outbox is in their identity map, and no id is read back.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from fnmatch import fnmatchcase

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from gpufleet.domain.operations.matchers import LabelMatcher, all_match, parse_matchers
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.store.tables import OutboxMessage, Receiver

MAX_KEY_CHARS = 255
# Keys per IN list when looking for those queued before: bounded on both databases.
KEYS_PER_LOOKUP = 500


EVENT_KIND_PREFIX = "event."


@dataclass
class Route:
    """A receiver's routing, read once per call from its row: the ORM attributes cost more
    than the routing itself when every notification of a fleet-wide round meets every
    receiver (BENCHMARKS.md, "The outbox")."""

    receiver_id: int
    name: str
    enabled: bool
    min_rank: int
    kinds: tuple[str, ...]
    broadcast: bool
    matchers: tuple[LabelMatcher, ...]
    tells_owners: bool
    _kind_taken: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def of(cls, receiver: Receiver) -> Route:
        return cls(receiver.id, receiver.name, receiver.enabled,
                   Severity(receiver.min_severity).rank, tuple(receiver.kinds),
                   receiver.broadcast, _parsed(tuple(receiver.matchers)),
                   receiver.tells_owners)

    def accepts(self, notification: Notification) -> bool:
        """Whether the receiver takes `notification` at all (severity, kind, enabled);
        its matchers decide the broadcast copy only.

        A receiver that lists no kinds takes every kind but events (`event.*`): events are
        every audited change, far too many for a channel, and go only to receivers that
        subscribed to them by name (docs/operations.md, "Subscriptions")."""
        if not self.enabled or notification.severity.rank < self.min_rank:
            return False
        kind = notification.kind
        taken = self._kind_taken.get(kind)
        if taken is None:
            taken = self._kind_taken[kind] = (
                any(fnmatchcase(kind, k) for k in self.kinds) if self.kinds
                else not kind.startswith(EVENT_KIND_PREFIX))
        return taken

    def recipients(self, notification: Notification) -> list[str | None]:
        """Who the receiver tells about `notification`: None for its broadcast copy (a
        channel, a list; not for a notification meant for its owners only), then each
        owner the notification names, if it tells owners."""
        if not self.accepts(notification):
            return []
        targets: list[str | None] = []
        if self.broadcast and notification.broadcast and all_match(self.matchers,
                                                                  notification.labels):
            targets.append(None)
        if self.tells_owners:
            targets.extend(dict.fromkeys(notification.owners))
        return targets


@functools.lru_cache(maxsize=1024)
def _parsed(matchers: tuple[str, ...]) -> tuple[LabelMatcher, ...]:
    """Matchers parsed once, not once per notification × receiver: ~15 % of the CPU of
    queueing a fleet-wide evaluation round (BENCHMARKS.md, "The outbox")."""
    return parse_matchers(matchers)


def idempotency_key(notification: Notification, receiver: str, recipient: str | None) -> str:
    key = f"{notification.dedup_key}|{receiver}|{recipient or '*'}"
    if len(key) <= MAX_KEY_CHARS:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[:MAX_KEY_CHARS - 65]}#{digest}"


@dataclass(frozen=True)
class Queued:
    """One outbox message `notify` wrote: to which receiver (by name), for whom (None: its
    broadcast copy), under which key."""

    receiver: str
    recipient: str | None
    idempotency_key: str
    kind: str


def notify(session: Session, notification: Notification, now: datetime) -> list[Queued]:
    """Queue `notification` for every receiver that takes it, in the caller's transaction;
    returns what was queued. A (dedup key, receiver, recipient) queued before is skipped,
    so evaluating the same condition twice tells nobody twice."""
    return notify_all(session, [notification], now)


def notify_all(session: Session, notifications: Iterable[Notification],
               now: datetime) -> list[Queued]:
    """`notify` for many notifications with one read of the receivers, one read of the
    keys already queued and one INSERT (what an evaluation over the whole fleet calls).

    Disabled receivers are not read: a notification is never queued for them, and
    enabling one later does not tell it what it missed (docs/operations.md, "Receivers")."""
    receivers = list(session.scalars(select(Receiver).where(Receiver.enabled.is_(True))))
    return queue(session, notifications, receivers, now)


def queue(session: Session, notifications: Iterable[Notification],
          receivers: Iterable[Receiver], now: datetime) -> list[Queued]:
    """`notify_all` for receivers the caller has already chosen (the event publisher,
    which matches subscriptions itself): the same acceptance and de-duplication.

    The receivers must have ids (be flushed): the rows name them by id."""
    routes = [Route.of(r) for r in receivers]
    wanted: dict[str, tuple[Notification, Route, str | None]] = {}
    for n in notifications:
        for route in routes:
            for recipient in route.recipients(n):
                wanted.setdefault(idempotency_key(n, route.name, recipient),
                                  (n, route, recipient))
    if not wanted:
        return []
    seen = _queued_before(session, list(wanted))
    rows: list[dict] = []
    queued: list[Queued] = []
    payloads: dict[int, dict] = {}  # one payload per notification, shared by its copies
    for key, (n, route, recipient) in wanted.items():
        if key in seen:
            continue
        payload = payloads.get(id(n))
        if payload is None:
            payload = payloads[id(n)] = n.as_payload()
        rows.append({"created_at": now, "receiver_id": route.receiver_id, "recipient": recipient,
                     "idempotency_key": key, "kind": n.kind, "severity": n.severity.value,
                     "payload": payload, "attempts": 0, "next_attempt_at": now,
                     "delivered_at": None, "abandoned_at": None, "last_error": None})
        queued.append(Queued(route.name, recipient, key, n.kind))
    _insert(session, rows)
    return queued


def _insert(session: Session, rows: list[dict]) -> None:
    """One Core INSERT for all the rows, executed as the driver's executemany: sqlite3's
    in C, psycopg's pipelined. (One multi-row VALUES statement was slower on both: its
    compilation, ~25,000 bound parameters for 1,000 notifications, costs more than the
    rows — BENCHMARKS.md, "The outbox".)"""
    if rows:
        session.execute(insert(OutboxMessage.__table__), rows)


def _queued_before(session: Session, keys: list[str]) -> set[str]:
    seen: set[str] = set()
    for lo in range(0, len(keys), KEYS_PER_LOOKUP):
        seen.update(session.scalars(select(OutboxMessage.idempotency_key).where(
            OutboxMessage.idempotency_key.in_(keys[lo:lo + KEYS_PER_LOOKUP]))))
    return seen
