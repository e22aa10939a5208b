"""Make every audit event an event, in the transaction that writes it
(docs/operations.md, "Events").

Installed on the state store's write sessions, it
- stamps each new audit event with its project and labels before it is inserted
  (`event_labels`);
- at commit, numbers the transaction's events in the log (`seq`, see `number_events`) and
  queues an outbox message for each subscriber whose filter an event matches — in the same
  transaction, so an event is delivered exactly when it committed, at least once, and a
  rolled-back change tells nobody;
- after the commit, rings the bell that wakes readers waiting for events.

The audit package writes audit events and knows nothing of this (the import contract
keeps access below operations); this module listens to the session instead.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from gpufleet.domain.operations.event_filters import all_hold, flatten, type_matches
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.services.operations.event_bell import EventBell
from gpufleet.services.operations.event_labels import stamp_all
from gpufleet.services.operations.event_subscriptions import SubscriberCache
from gpufleet.services.operations.events import to_event
from gpufleet.services.operations.outbox import EVENT_KIND_PREFIX, queue
from gpufleet.store.database import StateStore
from gpufleet.store.tables import AuditEvent, Receiver
from gpufleet.wire.events import Event

_FLUSHED = "gpufleet.events.flushed"   # session.info: events inserted, not yet numbered
_WROTE = "gpufleet.events.wrote"       # session.info: this transaction wrote events
_PUBLISHER = "_gpufleet_event_publisher"
# One key for every writer of events (pg_advisory_xact_lock): numbering and committing are
# one at a time, the rest of each transaction is not.
_NUMBERING_LOCK_KEY = int.from_bytes(b"gfevents", "big", signed=True)


class EventPublisher:
    def __init__(self, subscribers: SubscriberCache, bell: EventBell):
        self.subscribers = subscribers
        self.bell = bell

    @classmethod
    def for_store(cls, store: StateStore, cache_s: float) -> EventPublisher:
        """The one publisher of `store`, installed on first use: two front doors on one
        store (tests, tools) must not publish each event twice."""
        existing = getattr(store, _PUBLISHER, None)
        if existing is None:
            existing = cls(SubscriberCache(cache_s), EventBell())
            existing.install(store)
            setattr(store, _PUBLISHER, existing)
        return existing

    def install(self, store: StateStore) -> None:
        store.listen_to_writes("before_flush", self._before_flush)
        store.listen_to_writes("after_flush", self._after_flush)
        store.listen_to_writes("before_commit", self._before_commit)
        store.listen_to_writes("after_commit", self._after_commit)
        store.listen_to_writes("after_rollback", self._after_rollback)

    def _before_flush(self, session: Session, _context, _instances) -> None:
        events = _new_events(session)
        if events:
            stamp_all(session, events)

    def _after_flush(self, session: Session, _context) -> None:
        events = _new_events(session)
        if events:
            session.info.setdefault(_FLUSHED, []).extend(events)
            session.info[_WROTE] = True

    def _before_commit(self, session: Session) -> None:
        session.flush()  # the commit's own flush comes after this hook: do it now
        events = session.info.pop(_FLUSHED, None)
        if not events:
            return
        number_events(session, events)
        self._queue_for_subscribers(session, events)
        session.flush()

    def _queue_for_subscribers(self, session: Session, events: list[AuditEvent]) -> None:
        subscribers = self.subscribers.get(session)  # cached: no query when nobody listens
        if not subscribers:
            return
        by_receiver: dict[int, list[tuple[Notification, datetime]]] = defaultdict(list)
        for row in events:
            event = to_event(row)
            fields = None
            for subscriber in subscribers:
                if not type_matches(subscriber.types, event.type):
                    continue
                if subscriber.conditions:
                    fields = fields or flatten(event.model_dump(mode="json", by_alias=True))
                    if not all_hold(subscriber.conditions, fields):
                        continue
                by_receiver[subscriber.receiver_id].append((notification_of(event), row.at))
        with session.no_autoflush:
            for receiver_id, queued in by_receiver.items():
                receiver = session.get(Receiver, receiver_id)
                if receiver is not None:  # removed since the cache was read
                    queue(session, [n for n, _ in queued], [receiver], queued[0][1])

    def _after_commit(self, session: Session) -> None:
        if session.info.pop(_WROTE, False):
            self.bell.ring()

    def _after_rollback(self, session: Session) -> None:
        session.info.pop(_WROTE, None)
        session.info.pop(_FLUSHED, None)


def number_events(session: Session, events: list[AuditEvent]) -> None:
    """Give the transaction's events their log positions, in commit order.

    Ids are given at insert; on PostgreSQL a transaction that took a smaller id may commit
    after one that took a larger, and a reader resuming "after id N" would skip it for
    good. So positions come from a sequence while holding a transaction-scoped lock that
    every event writer takes only here, at its commit: positions are handed out in the
    order the transactions commit, and a reader that sees position N sees every position
    below it. The lock is taken last, when the transaction needs no other lock, so it
    cannot deadlock. SQLite has one writer at a time: ids are already in commit order."""
    ordered = sorted(events, key=lambda e: e.id)
    if session.get_bind().dialect.name != "postgresql":
        for row in ordered:
            row.seq = row.id
        return
    session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _NUMBERING_LOCK_KEY})
    last = session.execute(text(
        "SELECT setval('audit_event_seq', nextval('audit_event_seq') + :n - 1)"),
        {"n": len(ordered)}).scalar_one()
    for offset, row in enumerate(ordered):
        row.seq = last - len(ordered) + 1 + offset


def _new_events(session: Session) -> list[AuditEvent]:
    return [o for o in session.new if isinstance(o, AuditEvent)]


def notification_of(event: Event) -> Notification:
    """What a subscriber is sent: the event, as `event` in the payload, keyed by its log
    position so it is queued once per subscriber, ever."""
    summary = f"{event.type}: {event.subject.kind} {event.subject.id}"
    if event.reason:
        summary = f"{summary} — {event.reason}"
    return Notification(kind=f"{EVENT_KIND_PREFIX}{event.type}", severity=Severity.INFO,
                        summary=summary[:500], dedup_key=f"event:{event.id}",
                        labels=event.labels,
                        event=event.model_dump(mode="json", by_alias=True))
