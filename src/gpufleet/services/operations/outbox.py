"""Queue notifications in the outbox, in the caller's transaction.

`notify` is the one way a feature tells anyone anything: it writes one outbox row per
receiver (and per owner, for receivers that tell owners) in the same transaction as the
change that caused it, so a notification exists exactly when its cause committed — never
lost to a crash between the two, never sent for a change that rolled back. Delivery is the
sender's business, later and outside the transaction (docs/operations.md, "The outbox").
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from datetime import datetime
from fnmatch import fnmatchcase

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.operations.matchers import all_match, parse_matchers
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.store.tables import OutboxMessage, Receiver

MAX_KEY_CHARS = 255


EVENT_KIND_PREFIX = "event."


def accepts(receiver: Receiver, notification: Notification) -> bool:
    """Whether `receiver` takes `notification` at all (severity, kind, enabled); its
    matchers decide the broadcast copy only.

    A receiver that lists no kinds takes every kind but events (`event.*`): events are
    every audited change, far too many for a channel, and go only to receivers that
    subscribed to them by name (docs/operations.md, "Subscriptions")."""
    if not receiver.enabled:
        return False
    if notification.severity.rank < Severity(receiver.min_severity).rank:
        return False
    if not receiver.kinds:
        return not notification.kind.startswith(EVENT_KIND_PREFIX)
    return any(fnmatchcase(notification.kind, k) for k in receiver.kinds)


def recipients(receiver: Receiver, notification: Notification) -> list[str | None]:
    """Who `receiver` tells about `notification`: None for its broadcast copy (a channel,
    a list; not for a notification meant for its owners only), then each owner the
    notification names, if the receiver tells owners."""
    if not accepts(receiver, notification):
        return []
    targets: list[str | None] = []
    if receiver.broadcast and notification.broadcast and all_match(
            _parsed(tuple(receiver.matchers)), notification.labels):
        targets.append(None)
    if receiver.tells_owners:
        targets.extend(dict.fromkeys(notification.owners))
    return targets


@functools.lru_cache(maxsize=1024)
def _parsed(matchers: tuple[str, ...]) -> tuple:
    """Matchers parsed once, not once per notification × receiver: ~15 % of the CPU of
    queueing a fleet-wide evaluation round (BENCHMARKS.md, "The outbox")."""
    return parse_matchers(matchers)


def idempotency_key(notification: Notification, receiver: str, recipient: str | None) -> str:
    key = f"{notification.dedup_key}|{receiver}|{recipient or '*'}"
    if len(key) <= MAX_KEY_CHARS:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[:MAX_KEY_CHARS - 65]}#{digest}"


def notify(session: Session, notification: Notification, now: datetime) -> list[OutboxMessage]:
    """Queue `notification` for every receiver that takes it, in the caller's transaction;
    returns the rows queued. A (dedup key, receiver, recipient) queued before is skipped,
    so evaluating the same condition twice tells nobody twice."""
    return notify_all(session, [notification], now)


def notify_all(session: Session, notifications: Iterable[Notification],
               now: datetime) -> list[OutboxMessage]:
    """`notify` for many notifications with one read of the receivers and one read of the
    keys already queued (what an evaluation over the whole fleet calls)."""
    receivers = list(session.scalars(select(Receiver).where(Receiver.enabled.is_(True))))
    return queue(session, notifications, receivers, now)


def queue(session: Session, notifications: Iterable[Notification],
          receivers: Iterable[Receiver], now: datetime) -> list[OutboxMessage]:
    """`notify_all` for receivers the caller has already chosen (the event publisher,
    which matches subscriptions itself): the same acceptance and de-duplication."""
    receivers = list(receivers)
    wanted: dict[str, tuple[Notification, Receiver, str | None]] = {}
    for n in notifications:
        for receiver in receivers:
            for recipient in recipients(receiver, n):
                wanted.setdefault(idempotency_key(n, receiver.name, recipient),
                                  (n, receiver, recipient))
    if not wanted:
        return []
    keys = list(wanted)
    seen: set[str] = set()
    for lo in range(0, len(keys), 500):  # bounded IN lists on both databases
        seen.update(session.scalars(select(OutboxMessage.idempotency_key).where(
            OutboxMessage.idempotency_key.in_(keys[lo:lo + 500]))))
    queued = []
    for key, (n, receiver, recipient) in wanted.items():
        if key in seen:
            continue
        message = OutboxMessage(created_at=now, receiver=receiver, recipient=recipient,
                                idempotency_key=key, kind=n.kind, severity=n.severity.value,
                                payload=n.as_payload(), attempts=0, next_attempt_at=now)
        session.add(message)
        queued.append(message)
    return queued
