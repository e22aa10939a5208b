"""The outbox sender against real receivers on localhost, on SQLite and PostgreSQL:
at least once, retries with backoff and Retry-After, a receiver down for an hour loses
nothing, a slow receiver delays nobody else, a restart resends what was in flight."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import func, select

from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.domain.operations.signatures import verify
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.operations.outbox import notify_all
from gpufleet.services.operations.receiver_admin import create_receiver
from gpufleet.services.operations.sender import OutboxSender
from gpufleet.store.tables import OutboxDelivery, OutboxMessage, User
from gpufleet.wire.receivers import ReceiverCreate
from tests.conftest import START
from tests.local_receivers import LocalHttpReceiver, Reply

SECRET = "a-webhook-secret-of-some-length"


def _sender(store, settings, clock, **changes) -> OutboxSender:
    return OutboxSender(store, settings.model_copy(update=changes), clock, jitter=lambda: 0.0)


def _receiver(store, name, url, kind="webhook", **fields):
    config = {"url": url, "secret": SECRET} if kind == "webhook" else {"url": url}
    with store.write() as s:
        create_receiver(s, SYSTEM, ReceiverCreate(name=name, kind=kind, config=config,
                                                  **fields), START)


def _queue(store, clock, count, *, prefix="n", **labels):
    notes = [Notification(kind="health.quarantined", severity=Severity.CRITICAL,
                          summary=f"GPU {i} quarantined", dedup_key=f"{prefix}-{i}",
                          labels={"project": "vision", **labels}) for i in range(count)]
    with store.write() as s:
        return len(notify_all(s, notes, clock.now()))


def _states(store) -> dict[str, int]:
    with store.read() as s:
        rows = s.scalars(select(OutboxMessage)).all()
    return {"delivered": sum(m.delivered_at is not None for m in rows),
            "abandoned": sum(m.abandoned_at is not None for m in rows),
            "waiting": sum(m.delivered_at is None and m.abandoned_at is None for m in rows)}


def test_a_webhook_gets_the_signed_body_and_its_idempotency_key(store, settings, clock):
    with LocalHttpReceiver() as hook:
        _receiver(store, "hook", hook.url)
        assert _queue(store, clock, 1) == 1
        sender = _sender(store, settings, clock)
        assert sender.run_once().dispatched == 1
        sender.close()
    [got] = hook.received
    body = got.json()
    assert body["notification"]["summary"] == "GPU 0 quarantined"
    assert got.headers["idempotency-key"] == body["idempotency_key"] == "n-0|hook|*"
    stamp = int(got.headers["x-gpufleet-signature"].split(",")[0][2:])
    assert verify(SECRET, got.headers["x-gpufleet-signature"], got.body, stamp)
    assert not verify(SECRET, got.headers["x-gpufleet-signature"], got.body + b" ", stamp)
    assert not verify("another-secret-0000", got.headers["x-gpufleet-signature"], got.body,
                      stamp)
    assert _states(store) == {"delivered": 1, "abandoned": 0, "waiting": 0}
    with store.read() as s:
        [log] = s.scalars(select(OutboxDelivery)).all()
    assert (log.ok, log.outcome, log.attempt) == (True, "delivered", 1)


def test_a_receiver_down_for_an_hour_loses_none(store, settings, clock):
    up = threading.Event()
    with LocalHttpReceiver(lambda _r: Reply() if up.is_set() else Reply(503, b"down")) as hook:
        _receiver(store, "hook", hook.url)
        _queue(store, clock, 120)
        sender = _sender(store, settings, clock)
        for _minute in range(60):  # down for an hour, the sender trying all along
            sender.run_once()
            clock.advance(60)
        assert _states(store) == {"delivered": 0, "abandoned": 0, "waiting": 120}
        failed = len(hook.received)
        # Backoff: far fewer attempts than messages × minutes, and one per round at most
        # (a failing receiver's batch waits with its first message).
        assert 1 < failed <= 60
        up.set()
        clock.advance(settings.outbox_retry_max_s)
        for _ in range(4):
            sender.run_once()
        sender.close()
    assert _states(store) == {"delivered": 120, "abandoned": 0, "waiting": 0}
    delivered_keys = {r.headers["idempotency-key"] for r in hook.received[failed:]}
    assert len(delivered_keys) == 120
    with store.read() as s:
        outcomes = dict(s.execute(select(OutboxDelivery.outcome, func.count())
                                  .group_by(OutboxDelivery.outcome)).all())
    assert outcomes == {"http_503": failed, "delivered": 120}


def test_backoff_grows_and_honours_retry_after(store, settings, clock):
    replies = iter([Reply(503), Reply(503), Reply(429, headers={"Retry-After": "1800"}),
                    Reply()])
    with LocalHttpReceiver(lambda _r: next(replies)) as hook:
        _receiver(store, "hook", hook.url)
        _queue(store, clock, 1)
        sender = _sender(store, settings, clock, outbox_retry_base_s=10)
        due = []
        for _ in range(3):
            sender.run_once()
            with store.read() as s:
                due.append(s.scalar(select(OutboxMessage.next_attempt_at)) - clock.now())
            clock.advance(due[-1].total_seconds())
        sender.run_once()
        sender.close()
    # jitter 0: half the exponential delay; then Retry-After wins
    assert due == [timedelta(seconds=5), timedelta(seconds=10), timedelta(seconds=1800)]
    assert len(hook.received) == 4
    assert _states(store)["delivered"] == 1


def test_a_message_older_than_the_give_up_age_is_abandoned_and_kept(store, settings, clock):
    with LocalHttpReceiver(lambda _r: Reply(500, b"broken")) as hook:
        _receiver(store, "hook", hook.url)
        _queue(store, clock, 1)
        sender = _sender(store, settings, clock, outbox_give_up_after_s=7200)
        for _ in range(30):
            sender.run_once()
            clock.advance(600)
        sender.close()
    assert _states(store) == {"delivered": 0, "abandoned": 1, "waiting": 0}
    with store.read() as s:
        message = s.scalar(select(OutboxMessage))
    assert message.abandoned_at - message.created_at >= timedelta(seconds=7200)
    assert message.last_error.startswith("http_500")
    assert len(hook.received) == message.attempts


def _wait_for(condition, what: str) -> None:
    for _ in range(400):
        if condition():
            return
        time.sleep(0.025)
    raise AssertionError(f"never happened: {what}")


def test_a_slow_receiver_does_not_delay_another(store, settings, clock):
    with LocalHttpReceiver() as slow, LocalHttpReceiver() as fast:
        slow.hold = threading.Event()
        _receiver(store, "slow", slow.url, matchers=["project=vision"])
        _receiver(store, "fast", fast.url, matchers=["project=vision"])
        _queue(store, clock, 3)
        sender = _sender(store, settings, clock)
        sender.dispatch()
        _wait_for(lambda: len(fast.received) == 3, "the fast receiver got its 3 messages")
        _wait_for(lambda: _delivered_to(store, "fast") == 3, "fast's deliveries recorded")
        assert _delivered_to(store, "slow") == 0  # still answering its first request
        sender.dispatch()  # a second round takes nothing more for the busy receiver
        assert len(slow.received) == 1
        slow.hold.set()
        sender.wait()
        sender.close()
    assert _delivered_to(store, "slow") == 3


def test_a_receiver_that_hangs_times_out_and_is_retried(store, settings, clock):
    with LocalHttpReceiver() as hook:
        hook.hold = threading.Event()
        _receiver(store, "hook", hook.url)
        _queue(store, clock, 2)
        sender = _sender(store, settings, clock, outbox_receiver_timeout_s=0.2)
        sender.run_once()
        hook.hold.set()
        sender.close()
    with store.read() as s:
        logs = s.scalars(select(OutboxDelivery)).all()
    assert [d.outcome for d in logs] == ["timeout"]  # the second waits with the first
    assert _states(store) == {"delivered": 0, "abandoned": 0, "waiting": 2}


def _delivered_to(store, receiver: str) -> int:
    from gpufleet.store.tables import Receiver

    with store.read() as s:
        return s.scalar(select(func.count()).select_from(OutboxMessage).join(Receiver).where(
            Receiver.name == receiver, OutboxMessage.delivered_at.is_not(None)))


def test_a_message_in_flight_when_the_process_dies_is_sent_again(store, settings, clock):
    """kill -9 mid-send: the rows are the only state. The claimed message is nobody's until
    its lease ends; then the next process sends it again (at least once). The real kill -9
    is in test_sender_process.py; this one runs on both databases."""
    with LocalHttpReceiver() as hook:
        hook.hold = threading.Event()
        _receiver(store, "hook", hook.url)
        _queue(store, clock, 1)
        dead = _sender(store, settings, clock)
        dead._record = lambda _settled: None  # killed: it never records what it sent
        dead.dispatch()
        _wait_for(lambda: len(hook.received) == 1, "the first send started")
        restarted = _sender(store, settings, clock)  # the process that comes back
        assert restarted.run_once().dispatched == 0  # leased to the dead one
        clock.advance(dead.lease.total_seconds())
        hook.hold.set()
        assert restarted.run_once().dispatched == 1
        restarted.close()
    keys = [r.headers["idempotency-key"] for r in hook.received]
    assert keys == ["n-0|hook|*", "n-0|hook|*"]  # the same key: the reader can de-duplicate
    assert _states(store)["delivered"] == 1


def test_inbox_messages_are_delivered_in_the_claim(store, settings, clock):
    with store.write() as s:
        s.add(User(name="alice", role="member", email="alice@example.com", created_at=START))
        create_receiver(s, SYSTEM, ReceiverCreate(name="owners", kind="inbox"), START)
    with store.write() as s:
        notify_all(s, [Notification(kind="health.quarantined", severity=Severity.WARNING,
                                    summary="GPU out", dedup_key="q1", owners=("alice",))],
                   clock.now())
    sender = _sender(store, settings, clock)
    done = sender.run_once()
    assert (done.dispatched, done.delivered_inline) == (0, 1)
    assert _states(store) == {"delivered": 1, "abandoned": 0, "waiting": 0}


def test_two_senders_never_claim_the_same_message(store, settings, clock):
    """Two replicas: a message claimed by one is skipped by the other (row locks on
    PostgreSQL, the single writer on SQLite)."""
    with LocalHttpReceiver() as hook:
        _receiver(store, "hook", hook.url)
        _queue(store, clock, 200)
        one, two = (_sender(store, settings, clock, outbox_receiver_batch=20)
                    for _ in range(2))
        rounds = 0
        while _states(store)["waiting"] and rounds < 40:
            threads = [threading.Thread(target=s.run_once) for s in (one, two)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rounds += 1
        one.close()
        two.close()
    keys = [r.headers["idempotency-key"] for r in hook.received]
    assert len(keys) == len(set(keys)) == 200


def test_owners_are_reached_at_their_gpufleet_email(store, settings, clock):
    from email import message_from_bytes

    from tests.local_receivers import local_smtp

    with local_smtp() as (port, envelopes):
        with store.write() as s:
            s.add(User(name="alice", role="member", email="alice@example.com",
                       created_at=START))
            s.add(User(name="bob", role="member", created_at=START))  # no e-mail
            create_receiver(s, SYSTEM, ReceiverCreate(
                name="mail", kind="email", broadcast=False, tells_owners=True,
                config={"host": "127.0.0.1", "port": port, "from": "g@example.com"}), START)
        with store.write() as s:
            notify_all(s, [Notification(kind="reclaim.warning", severity=Severity.WARNING,
                                        summary="GR-1042 idle for 4 h", dedup_key="w1",
                                        owners=("alice", "bob"))], clock.now())
        sender = _sender(store, settings, clock)
        sender.run_once()
        sender.close()
    assert [e.rcpt_tos for e in envelopes] == [["alice@example.com"]]
    assert message_from_bytes(envelopes[0].content)["Subject"] == \
        "[warning] GR-1042 idle for 4 h"
    assert _states(store) == {"delivered": 1, "abandoned": 1, "waiting": 0}
    with store.read() as s:
        outcomes = sorted(s.scalars(select(OutboxDelivery.outcome)))
    assert outcomes == ["delivered", "no_email"]
