"""The outbox sender: delivers queued notifications at least once, never stalling one
receiver behind another (docs/operations.md, "The outbox").

The only state is the outbox rows. A round *claims* due messages — pushes their
`next_attempt_at` a lease ahead in one short write transaction (`FOR UPDATE SKIP LOCKED`
on PostgreSQL, so two replicas never claim the same row; SQLite has one writer) — and
hands each receiver's batch to a worker of its own. The worker sends, then records each
attempt in `outbox_deliveries` and either marks the message delivered or schedules the
next attempt (exponential backoff with jitter, at least the receiver's `Retry-After`),
until the message is older than `outbox_give_up_after_s`. A process killed mid-send
leaves its claimed rows to come due again when the lease ends: sent again, at least once.

A receiver with a worker in flight is not claimed for again, so a receiver that hangs
holds one worker for at most `outbox_receiver_timeout_s` per message and delays nobody
else's messages. Inbox messages need no I/O: they are delivered in the claim itself.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.domain.operations.delivery import Attempt, RetryPolicy
from gpufleet.services.operations.receivers import DELIVER, Outgoing, Transport
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import OutboxDelivery, OutboxMessage, Receiver, User

log = logging.getLogger(__name__)

INBOX = "inbox"
# A worker records its outcomes at least this often (see `OutboxSender._work`).
RECORD_EVERY = 25
RECORD_AFTER_S = 0.25
# Beyond the batch's attempts, time for the worker to record them (a busy state store).
LEASE_MARGIN_S = 10


@dataclass(frozen=True)
class Round:
    """What one `dispatch` did: messages handed to workers, and inbox messages delivered
    in the claim itself."""

    dispatched: int
    delivered_inline: int


class OutboxSender:
    def __init__(self, store: StateStore, settings: Settings, clock: Clock, *,
                 jitter: Callable[[], float] = random.random):
        self.store = store
        self.clock = clock
        self.batch = settings.outbox_receiver_batch
        self.timeout_s = settings.outbox_receiver_timeout_s
        # Long enough for a worker to try its whole batch, each attempt timing out.
        self.lease = timedelta(seconds=self.batch * self.timeout_s + LEASE_MARGIN_S)
        self.policy = RetryPolicy(base_s=settings.outbox_retry_base_s,
                                  max_s=settings.outbox_retry_max_s,
                                  give_up_after_s=settings.outbox_give_up_after_s,
                                  retry_after_max_s=settings.outbox_retry_after_max_s)
        self.workers = settings.outbox_workers
        self._jitter = jitter
        self._lock = threading.Lock()
        self._busy: set[int] = set()  # receivers with a worker in flight
        self._futures: set[Future] = set()
        self._pool: ThreadPoolExecutor | None = None
        self._http: httpx.Client | None = None

    # --- the round -----------------------------------------------------------------------
    def dispatch(self) -> Round:
        """Claim what is due for every receiver without a worker in flight and start their
        workers; returns at once (the loop calls it every `outbox_send_interval_s`)."""
        with self._lock:
            busy = set(self._busy)
        batches, inline = self._claim(busy)
        for receiver_id, batch in batches.items():
            self._start(receiver_id, batch)
        return Round(sum(len(b) for b in batches.values()), inline)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the workers in flight (tests, the bench, an orderly shutdown)."""
        with self._lock:
            futures = set(self._futures)
        wait(futures, timeout=timeout_s)

    def run_once(self) -> Round:
        """One round, waiting for its deliveries: what tests and the bench call."""
        done = self.dispatch()
        self.wait()
        return done

    def close(self) -> None:
        """Stop taking work; deliveries in flight are abandoned to their lease (the next
        start sends them again)."""
        with self._lock:
            pool, self._pool = self._pool, None
            http, self._http = self._http, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        if http is not None:
            http.close()

    def _start(self, receiver_id: int, batch: list[Outgoing]) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="outbox")
                self._http = httpx.Client(follow_redirects=False)
            self._busy.add(receiver_id)
            transport = Transport(self._http, self.timeout_s)
            future = self._pool.submit(self._work, batch, transport)
            self._futures.add(future)

        def finished(f: Future) -> None:
            with self._lock:
                self._busy.discard(receiver_id)
                self._futures.discard(f)
        future.add_done_callback(finished)

    # --- claiming ------------------------------------------------------------------------
    def _claim(self, busy: set[int]) -> tuple[dict[int, list[Outgoing]], int]:
        now = self.clock.now()
        due = _due(now)
        # A disabled receiver's messages are held: not claimed, so not sent and never
        # given up on while it is off (docs/operations.md, "Receivers").
        enabled = Receiver.enabled.is_(True)
        with self.store.read() as session:  # most rounds find nothing: no write lock then
            if session.scalar(select(OutboxMessage.id).join(Receiver).where(due, enabled)
                              .limit(1)) is None:
                return {}, 0
        with self.store.write() as session:
            receivers = {r.id: r for r in session.scalars(select(Receiver).where(
                Receiver.id.in_(select(OutboxMessage.receiver_id).where(due).distinct()),
                enabled, Receiver.id.not_in(busy) if busy else True))}
            batches: dict[int, list[Outgoing]] = {}
            inline = 0
            for receiver in receivers.values():
                limit = self.batch * 20 if receiver.kind == INBOX else self.batch
                ids = list(session.scalars(
                    select(OutboxMessage.id)
                    .where(due, OutboxMessage.receiver_id == receiver.id)
                    .order_by(OutboxMessage.next_attempt_at, OutboxMessage.id).limit(limit)
                    .with_for_update(skip_locked=True)))
                if not ids:
                    continue
                messages = list(session.scalars(select(OutboxMessage).where(
                    OutboxMessage.id.in_(ids)).order_by(OutboxMessage.next_attempt_at,
                                                        OutboxMessage.id)))
                if receiver.kind == INBOX:
                    inline += _deliver_inline(session, messages, now)
                    continue
                emails = _emails(session, {m.recipient for m in messages if m.recipient})
                for m in messages:
                    m.next_attempt_at = now + self.lease
                batches[receiver.id] = [_outgoing(m, receiver, emails) for m in messages]
        return batches, inline

    # --- a receiver's worker -------------------------------------------------------------
    def _work(self, batch: list[Outgoing], transport: Transport) -> None:
        """Send a receiver's batch in order. Outcomes are recorded a few at a time (one
        transaction for up to `RECORD_EVERY` attempts or `RECORD_AFTER_S`): a crash before
        the record only means those are sent again, which at least once allows. A failure
        is recorded at once, and the rest of the batch waits with it."""
        deliver = DELIVER[batch[0].receiver_kind]
        settled: list[tuple[Outgoing, Attempt, int]] = []
        first_unrecorded = time.perf_counter()
        for index, message in enumerate(batch):
            started = time.perf_counter()
            try:
                attempt = deliver(message, transport)
            except Exception as exc:  # a bug in one receiver must not lose the message
                log.exception("receiver %s failed on message %d", message.receiver, message.id)
                attempt = Attempt(ok=False, outcome="error",
                                  detail=f"{type(exc).__name__}: {exc}"[:500])
            settled.append((message, attempt, int((time.perf_counter() - started) * 1000)))
            failing = not attempt.ok and not attempt.permanent
            if failing or len(settled) >= RECORD_EVERY or (
                    time.perf_counter() - first_unrecorded >= RECORD_AFTER_S):
                retry_at = self._record(settled)
                settled, first_unrecorded = [], time.perf_counter()
                if failing and retry_at is not None:
                    # The receiver is failing: the rest of its batch waits with this
                    # message instead of each costing a timeout now.
                    self._release(batch[index + 1:], retry_at)
                    return
        if settled:
            self._record(settled)

    def _record(self, settled: list[tuple[Outgoing, Attempt, int]]) -> datetime | None:
        """Log the attempts and settle their messages in one transaction; returns when
        the last one will be retried (None: delivered, abandoned, or gone with its
        receiver)."""
        now = self.clock.now()
        retry_at = None
        with self.store.write() as session:
            rows = {r.id: r for r in session.scalars(select(OutboxMessage).where(
                OutboxMessage.id.in_([m.id for m, _, _ in settled])))}
            for message, attempt, duration_ms in settled:
                row = rows.get(message.id)
                if row is None:  # its receiver was removed meanwhile
                    retry_at = None
                    continue
                retry_at = self._settle(session, row, message, attempt, duration_ms, now)
        return retry_at

    def _settle(self, session: Session, row: OutboxMessage, message: Outgoing,
                attempt: Attempt, duration_ms: int, now: datetime) -> datetime | None:
        row.attempts += 1
        session.add(OutboxDelivery(message_id=row.id, receiver_id=row.receiver_id, at=now,
                                   attempt=row.attempts, ok=attempt.ok,
                                   outcome=attempt.outcome[:63], detail=attempt.detail,
                                   status=attempt.status, duration_ms=duration_ms))
        if attempt.ok:
            row.delivered_at, row.last_error = now, None
            return None
        row.last_error = f"{attempt.outcome}: {attempt.detail or ''}"[:2000]
        if attempt.permanent or self.policy.gives_up(row.created_at, now):
            row.abandoned_at = now
            log.warning("gave up on outbox message %d to %s after %d attempts: %s",
                        row.id, message.receiver, row.attempts, row.last_error)
            return None
        delay_s = self.policy.delay_s(row.attempts, self._jitter(), attempt.retry_after_s)
        row.next_attempt_at = now + timedelta(seconds=delay_s)
        return row.next_attempt_at

    def _release(self, rest: list[Outgoing], at: datetime) -> None:
        if not rest:
            return
        with self.store.write() as session:
            for row in session.scalars(select(OutboxMessage).where(
                    OutboxMessage.id.in_([m.id for m in rest]),
                    OutboxMessage.delivered_at.is_(None))):
                row.next_attempt_at = at


def _due(now: datetime):
    return (OutboxMessage.delivered_at.is_(None) & OutboxMessage.abandoned_at.is_(None)
            & (OutboxMessage.next_attempt_at <= now))


def _emails(session: Session, names: set[str]) -> dict[str, str]:
    if not names:
        return {}
    return {name: email for name, email in session.execute(
        select(User.name, User.email).where(User.name.in_(names))) if email}


def _outgoing(m: OutboxMessage, receiver: Receiver, emails: dict[str, str]) -> Outgoing:
    return Outgoing(id=m.id, receiver=receiver.name, receiver_kind=receiver.kind,
                    config=dict(receiver.config), recipient=m.recipient,
                    recipient_email=emails.get(m.recipient) if m.recipient else None,
                    idempotency_key=m.idempotency_key, kind=m.kind, severity=m.severity,
                    payload=dict(m.payload), created_at=m.created_at, attempt=m.attempts + 1)


def _deliver_inline(session: Session, messages: list[OutboxMessage], now: datetime) -> int:
    """Inbox messages: stored is delivered; logged like any other attempt."""
    for m in messages:
        m.attempts += 1
        m.delivered_at = now
        session.add(OutboxDelivery(message_id=m.id, receiver_id=m.receiver_id, at=now,
                                   attempt=m.attempts, ok=True, outcome="delivered",
                                   detail=None, duration_ms=0))
    return len(messages)
