"""Events enter the outbox in the transaction that writes them, for the subscribers whose
filter they match, and only for them (docs/operations.md, "Subscriptions")."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from gpufleet.domain.access import Role
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.operations.event_subscriptions import SubscriberCache
from gpufleet.services.operations.events import EventFilter
from gpufleet.store.tables import AuditEvent, OutboxMessage, Receiver
from gpufleet.wire.events import EventSubscriptionCreate
from gpufleet.wire.receivers import ReceiverUpdate
from tests.conftest import START

ADMIN = Principal(role=Role.ADMIN, user_name="admin")
SECRET = "s" * 32


def _subscribe(gf, name, types, where=()):
    return gf.create_event_subscription(ADMIN, EventSubscriptionCreate(
        name=name, url=f"http://127.0.0.1:9/{name}", secret=SECRET, types=list(types),
        where=list(where)))


def _pool_event(session, action="pool.approved", count=8, project="vision"):
    return audit.record(session, at=START, actor="user:olga", action=action,
                        subject_kind="pool", subject="PL-1", reason="capacity",
                        project=project, flavour="H100-80GB", count=count)


def _queued(store) -> list[tuple[str, str]]:
    with store.read() as s:
        return sorted((m.receiver.name, m.kind) for m in s.scalars(select(OutboxMessage)))


def test_only_matching_subscriptions_get_a_message(gf):
    _subscribe(gf, "big-pools", ["pool.approved"], ["data.count>=8", "labels.project=vision"])
    _subscribe(gf, "all-pools", ["pool.*"])
    _subscribe(gf, "requests", ["request.*"])
    _subscribe(gf, "small", ["pool.approved"], ["data.count<8"])
    with gf.store.write() as s:
        event = _pool_event(s)
    assert _queued(gf.store) == [("all-pools", "event.pool.approved"),
                                 ("big-pools", "event.pool.approved")]
    with gf.store.read() as s:
        message = s.scalars(select(OutboxMessage).join(Receiver)
                            .where(Receiver.name == "big-pools")).one()
        assert message.idempotency_key == f"event:{event.seq}|big-pools|*"
        assert message.payload["event"] == {
            "schema": 1, "id": event.seq, "type": "pool.approved",
            "at": "2026-11-02T09:00:00Z", "actor": "user:olga",
            "subject": {"kind": "pool", "id": "PL-1"}, "reason": "capacity",
            "labels": {"project": "vision"},
            "data": {"project": "vision", "flavour": "H100-80GB", "count": 8}}
        assert message.payload["labels"] == {"project": "vision"}


def test_a_disabled_subscription_gets_no_events_and_keeps_what_it_had(gf):
    _subscribe(gf, "all-pools", ["pool.*"])
    with gf.store.write() as s:
        _pool_event(s)
    gf.update_receiver(ADMIN, "all-pools", ReceiverUpdate(enabled=False))
    with gf.store.write() as s:
        _pool_event(s, action="pool.rejected")
    assert _queued(gf.store) == [("all-pools", "event.pool.approved")]
    gf.update_receiver(ADMIN, "all-pools", ReceiverUpdate(enabled=True))
    with gf.store.write() as s:
        _pool_event(s, action="pool.requested")
    assert _queued(gf.store) == [("all-pools", "event.pool.approved"),
                                 ("all-pools", "event.pool.requested")]


def test_a_rolled_back_change_queues_nothing(gf):
    _subscribe(gf, "all-pools", ["pool.*"])
    with pytest.raises(RuntimeError), gf.store.write() as s:
        _pool_event(s)
        s.flush()  # the event is written (its message is queued at commit) ...
        raise RuntimeError("... and the change fails")
    assert _queued(gf.store) == []
    with gf.store.read() as s:
        assert s.scalar(select(func.count()).select_from(AuditEvent)
                        .where(AuditEvent.action == "pool.approved")) == 0


def test_subscribers_are_read_once_per_ttl_and_after_a_change(gf):
    ticks = [0.0]
    cache = gf.event_publisher.subscribers
    cache._monotonic, cache.ttl_s = (lambda: ticks[0]), 5.0
    cache.invalidate()
    before = cache.loads
    for _ in range(5):  # state changes with no subscribers: one read, not one per flush
        with gf.store.write() as s:
            _pool_event(s)
    assert cache.loads == before + 1
    # Another replica subscribes (a row this process did not write): seen after the TTL.
    with gf.store.write() as s:
        s.add(Receiver(name="elsewhere", kind="webhook", config={"url": "http://x"},
                       matchers=[], kinds=["event.pool.*"], min_severity="info",
                       broadcast=True, tells_owners=False, enabled=True,
                       created_by="admin", created_at=START))
    with gf.store.write() as s:
        _pool_event(s)
    assert _queued(gf.store) == []
    ticks[0] = 5.0
    with gf.store.write() as s:
        _pool_event(s)
    assert _queued(gf.store) == [("elsewhere", "event.pool.approved")]
    # This process's own change is seen at once.
    _subscribe(gf, "mine", ["pool.*"])
    with gf.store.write() as s:
        _pool_event(s)
    assert _queued(gf.store).count(("mine", "event.pool.approved")) == 1


def test_a_cache_with_no_ttl_reads_every_time(store):
    cache = SubscriberCache(0.0)
    with store.read() as s:
        cache.get(s)
        cache.get(s)
    assert cache.loads == 2


def test_deleting_a_subscription_stops_its_messages(gf):
    _subscribe(gf, "all-pools", ["pool.*"])
    gf.delete_event_subscription(ADMIN, "all-pools")
    with gf.store.write() as s:
        _pool_event(s)
    assert _queued(gf.store) == []
    with gf.store.read() as s:
        actions = list(s.scalars(select(AuditEvent.action).where(
            AuditEvent.subject_kind == "event_subscription").order_by(AuditEvent.id)))
    assert actions == ["event_subscription.created", "event_subscription.deleted"]


def test_log_positions_follow_commit_order_not_insert_order(gf):
    """A transaction that inserted its event first but commits last gets the later
    position: a reader resuming after what it saw never skips it. Only PostgreSQL can run
    two write transactions at once; SQLite's single writer commits in id order."""
    if gf.store.is_sqlite:
        pytest.skip("SQLite runs one write transaction at a time")
    with gf.store.write() as slow:
        first_inserted = _pool_event(slow, count=1)
        slow.flush()
        with gf.store.write() as fast:
            second_inserted = _pool_event(fast, count=2)
        assert second_inserted.id > first_inserted.id
        seen = gf.events_page(ADMIN, EventFilter(), None, 10)
        assert [e.data["count"] for e in seen.items] == [2]
    resumed = gf.events_page(ADMIN, EventFilter(), seen.last_id, 10)
    assert [e.data["count"] for e in resumed.items] == [1]
