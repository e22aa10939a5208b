"""Event subscriptions: webhooks that receive the events matching their filter
(docs/operations.md, "Subscriptions").

A subscription is a receiver (kind `webhook`) whose kinds are `event.<glob>`, with its
URL, secret and `where` conditions in its config, so the outbox, the sender and the
delivery log treat it as any other receiver. The subscribers are cached for a few seconds
(`event_subscription_cache_s`): a state change when nobody subscribes costs no query.
This process forgets its cache when it changes a subscription; another replica's change
is seen when the cache expires.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import Conflict, GpufleetError, NotFound
from gpufleet.domain.operations.event_filters import (
    Condition,
    check_type_glob,
    parse_conditions,
)
from gpufleet.domain.operations.notifications import Severity
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.operations.outbox import EVENT_KIND_PREFIX
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import Receiver
from gpufleet.wire.base import Page
from gpufleet.wire.events import EventSubscriptionCreate, EventSubscriptionView

log = logging.getLogger(__name__)
WEBHOOK = "webhook"
_BY_NAME = SortSpec((Receiver.name,))


@dataclass(frozen=True)
class Subscriber:
    """A receiver that takes events, with its filter compiled."""

    receiver_id: int
    name: str
    types: tuple[str, ...]
    conditions: tuple[Condition, ...]


def is_subscription(receiver: Receiver) -> bool:
    return receiver.kind == WEBHOOK and bool(receiver.kinds) and all(
        k.startswith(EVENT_KIND_PREFIX) for k in receiver.kinds)


def create(session: Session, principal: Principal, body: EventSubscriptionCreate,
           now: datetime) -> EventSubscriptionView:
    """Validate the whole filter first (a bad glob or condition: 400 naming it), then
    write the receiver and its audit event together."""
    principal.require(Action.MANAGE_EVENT_SUBSCRIPTIONS)
    types = [check_type_glob(t) for t in body.types]
    parse_conditions(body.where)
    if session.scalar(select(Receiver.id).where(Receiver.name == body.name)) is not None:
        raise Conflict(f"a receiver named {body.name!r} already exists",
                       code="subscription_exists", details={"name": body.name})
    receiver = Receiver(name=body.name, kind=WEBHOOK,
                        config={"url": body.url, "secret": body.secret, "where": body.where,
                                "description": body.description},
                        matchers=[], kinds=[f"{EVENT_KIND_PREFIX}{t}" for t in types],
                        min_severity=Severity.INFO.value, broadcast=True, tells_owners=False,
                        enabled=True, created_by=principal.actor, created_at=now)
    session.add(receiver)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="event_subscription.created",
                 subject_kind="event_subscription", subject=body.name, url=body.url,
                 types=types, where=body.where)
    return view(receiver)


def list_subscriptions(session: Session, principal: Principal, cursor: str | None,
                       limit: int) -> Page[EventSubscriptionView]:
    """By name. Webhook receivers that are not subscriptions share the name index and are
    skipped, so a page may hold fewer than `limit`; `next_cursor` still goes on."""
    principal.require(Action.MANAGE_EVENT_SUBSCRIPTIONS)
    rows, next_cursor = keyset_page(session, select(Receiver).where(Receiver.kind == WEBHOOK),
                                    _BY_NAME, cursor, limit)
    return Page[EventSubscriptionView](
        items=[view(r) for (r,) in rows if is_subscription(r)], next_cursor=next_cursor)


def delete(session: Session, principal: Principal, name: str, now: datetime) -> None:
    """Remove the subscription; what it has queued and not yet delivered goes with it."""
    principal.require(Action.MANAGE_EVENT_SUBSCRIPTIONS)
    receiver = session.scalar(select(Receiver).where(Receiver.name == name))
    if receiver is None or not is_subscription(receiver):
        raise NotFound(f"no event subscription named {name!r}", code="not_found",
                       details={"kind": "event_subscription", "name": name})
    session.delete(receiver)
    audit.record(session, at=now, actor=principal.actor, action="event_subscription.deleted",
                 subject_kind="event_subscription", subject=name)


def view(receiver: Receiver) -> EventSubscriptionView:
    config = receiver.config or {}
    return EventSubscriptionView(
        name=receiver.name, url=config.get("url", ""),
        types=[k.removeprefix(EVENT_KIND_PREFIX) for k in receiver.kinds],
        where=list(config.get("where") or []), description=config.get("description"),
        enabled=receiver.enabled, created_by=receiver.created_by,
        created_at=receiver.created_at)


def load_subscribers(session: Session) -> tuple[Subscriber, ...]:
    """Every enabled receiver that takes events (subscriptions, and any other receiver
    that lists `event.` kinds), its filter compiled."""
    found = []
    for receiver in session.scalars(select(Receiver).where(Receiver.enabled.is_(True))):
        types = tuple(k.removeprefix(EVENT_KIND_PREFIX) for k in receiver.kinds
                      if k.startswith(EVENT_KIND_PREFIX))
        if not types:
            continue
        try:
            conditions = parse_conditions((receiver.config or {}).get("where") or [])
        except GpufleetError as exc:  # written by hand in the database: skip, say so
            log.warning("receiver %s: its event filter is invalid, it gets no events: %s",
                        receiver.name, exc.message)
            continue
        found.append(Subscriber(receiver.id, receiver.name, types, conditions))
    return tuple(found)


class SubscriberCache:
    """The subscribers, read at most once per `ttl_s` (seconds on `monotonic`)."""

    def __init__(self, ttl_s: float, monotonic: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._subscribers: tuple[Subscriber, ...] = ()
        self._read_at: float | None = None
        self.loads = 0  # how often the store was read (what the tests watch)

    def get(self, session: Session) -> tuple[Subscriber, ...]:
        with self._lock:
            read_at, subscribers = self._read_at, self._subscribers
        if read_at is not None and self._monotonic() - read_at < self.ttl_s:
            return subscribers
        started = self._monotonic()
        with session.no_autoflush:
            subscribers = load_subscribers(session)
        with self._lock:
            self._subscribers, self._read_at = subscribers, started
            self.loads += 1
        return subscribers

    def invalidate(self) -> None:
        with self._lock:
            self._read_at = None
