"""The chat-ops notifier: approvals posted to a channel with Approve / Reject buttons and
updated once decided, and the requester told in a thread as their request moves
(docs/chatops.md, "Approvals in a channel, and the requester's thread").

**The event log is the queue.** Every request transition is an audit event written in the
transition's own transaction (docs/operations.md, "Events"), numbered in commit order; the
notifier reads it after a durable cursor (`chat_cursors`), so a change is told exactly when
it committed and nothing that committed is missed — across restarts, and whichever replica
reads. It is not an outbox receiver because its messages depend on each other: a thread
reply needs the `ts` of the thread's first message, an update the `ts` of the approval
message, and the outbox neither keeps a receiver's messages in order through retries nor
lets a delivery write back what Slack answered.

**Order and retries.** Events are told one at a time, in log order. A failed Slack call
(5xx, timeout, 429) stops the round; the cursor stays on that event and the next try waits
as the outbox's would (`outbox_retry_base_s` doubling to `outbox_retry_max_s`, jittered,
never sooner than Slack's Retry-After), so later events wait behind it and a thread never
reads out of order. An error no retry mends (`channel_not_found`, `invalid_auth`) or an
event older than `outbox_give_up_after_s` is logged and passed.

**Nothing told twice on a retry.** Each call's effect is recorded as soon as Slack answers:
the approval message's and the thread's `ts` in the request's `ChatThread` row (a retried
event skips a post whose `ts` is recorded), the thread reply — always an event's last call —
by moving the cursor past the event. `chat.update` sets the same content again if
repeated. A process killed between a post and its record posts that one message again:
at least once, never lost (docs/design.md, "Reliability": what was acknowledged survives).

**One replica.** A round starts in a transaction holding the leader lock, and takes a lease
on the cursor (renewed with each event told), so another replica starts only after the
lease lapses. No bot token: the notifier does nothing and keeps no cursor; the first round
with a token starts from the newest event (no backlog from before it was configured).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from gpufleet.clock import Clock
from gpufleet.domain.chatops import blocks
from gpufleet.domain.operations.delivery import RetryPolicy
from gpufleet.domain.requests import request_id_from_code
from gpufleet.services.chatops.slack_web import Posted, SlackCallFailed, SlackWeb
from gpufleet.services.lifecycle import requests
from gpufleet.services.operations.events import latest_event_id
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import AuditEvent, ChatCursor, ChatThread, GpuRequest

log = logging.getLogger(__name__)

LOOP = "chatops-outbound"  # the cursor's name and the leader lock's
CREATED = "request.created"
WATCHED = (CREATED, *sorted(blocks.THREAD_EVENTS))
# An event costs at most: the approval post, its update, the thread's first post, a reply.
CALLS_PER_EVENT = 4
LEASE_MARGIN_S = 10
PENDING = "pending"


@dataclass(frozen=True)
class EventToTell:
    seq: int
    type: str
    at: datetime
    actor: str
    code: str
    reason: str | None
    data: dict[str, Any]


@dataclass(frozen=True)
class Where:
    """A request's place in chat (its `ChatThread` row; all None without one)."""

    channel_id: str | None = None
    thread_ts: str | None = None
    requester: str | None = None
    approval_channel_id: str | None = None
    approval_ts: str | None = None

    @classmethod
    def of(cls, row: ChatThread | None) -> Where:
        if row is None:
            return cls()
        return cls(row.channel_id, row.thread_ts, row.requester_chat_user_id,
                   row.approval_channel_id, row.approval_ts)


@dataclass
class Round:
    """What one round did: events told, Slack calls made, events passed (an error no
    retry mends, or too old), and whether it stopped on a failure to retry later."""

    told: int = 0
    calls: int = 0
    passed: int = 0
    retrying: bool = False
    errors: list[str] = field(default_factory=list)


class _LeaseLost(Exception):
    """Another replica took the cursor over (this one paused past its lease)."""


class ChatNotifier:
    def __init__(self, store: StateStore, settings: Settings, clock: Clock, *,
                 jitter: Callable[[], float] = random.random, owner: str | None = None):
        self.store = store
        self.settings = settings
        self.clock = clock
        self.batch = settings.outbox_receiver_batch
        self.timeout_s = settings.outbox_receiver_timeout_s
        self.lease = timedelta(seconds=CALLS_PER_EVENT * self.timeout_s + LEASE_MARGIN_S)
        self.policy = RetryPolicy(base_s=settings.outbox_retry_base_s,
                                  max_s=settings.outbox_retry_max_s,
                                  give_up_after_s=settings.outbox_give_up_after_s,
                                  retry_after_max_s=settings.outbox_retry_after_max_s)
        self._jitter = jitter
        self.owner = owner or (f"{socket.gethostname()[:30]}:{os.getpid()}:"
                               f"{uuid.uuid4().hex[:12]}")

    @property
    def enabled(self) -> bool:
        token = self.settings.slack_bot_token
        return token is not None and bool(token.get_secret_value())

    def run_once(self) -> Round:
        """Tell what happened since the cursor, in order, until caught up or a call
        fails; what the server's chat-ops loop calls every `outbox_send_interval_s`."""
        done = Round()
        if not self.enabled:
            return done
        claimed = self._claim()
        if claimed is None:
            return done
        events, caught_up_to = claimed
        token = self.settings.slack_bot_token.get_secret_value()
        web = SlackWeb(token, self.settings.slack_api_url, self.timeout_s)
        try:
            for event in events:
                try:
                    done.calls += self._tell(event, web)
                except SlackCallFailed as failed:
                    attempt = failed.attempt
                    done.errors.append(f"{event.code} {event.type}: {failed}")
                    if not (attempt.permanent
                            or self.policy.gives_up(event.at, self.clock.now())):
                        self._back_off(failed)
                        done.retrying = True
                        return done
                    log.warning("chat-ops: passing event %d (%s %s) untold: %s %s",
                                event.seq, event.type, event.code, failed,
                                attempt.detail or "")
                    done.passed += 1
                else:
                    done.told += 1
                self._advance(event.seq)
            self._finish(caught_up_to)
        except _LeaseLost:
            log.warning("chat-ops: another replica took over the cursor; this round stops")
        return done

    # --- the cursor ----------------------------------------------------------------------
    def _claim(self) -> tuple[list[EventToTell], int] | None:
        """The events to tell now and where the cursor may go once they are told; None
        when there is nothing to do (not the leader, waiting out a retry, another replica's
        lease, or nothing new)."""
        now = self.clock.now()
        with self.store.read() as session:  # most rounds find nothing: no write lock then
            cursor = session.get(ChatCursor, LOOP)
            if cursor is not None and (cursor.next_attempt_at > now or not session.scalar(
                    self._watched(cursor.after_seq).with_only_columns(AuditEvent.seq)
                    .limit(1))):
                return None
        with self.store.write() as session:
            if not self.store.try_leader_lock(session, LOOP):
                return None
            newest = latest_event_id(session)
            cursor = session.get(ChatCursor, LOOP)
            if cursor is None:  # the first round with a token: from now on
                session.add(ChatCursor(name=LOOP, after_seq=newest, attempts=0,
                                       next_attempt_at=now, updated_at=now))
                return None
            if cursor.next_attempt_at > now or (
                    cursor.lease_owner not in (None, self.owner)
                    and cursor.lease_until is not None and cursor.lease_until > now):
                return None
            rows = list(session.scalars(self._watched(cursor.after_seq)
                                        .where(AuditEvent.seq <= newest)
                                        .order_by(AuditEvent.seq).limit(self.batch)))
            if not rows:
                return None
            cursor.lease_owner, cursor.lease_until = self.owner, now + self.lease
            cursor.updated_at = now
            events = [EventToTell(r.seq, r.action, r.at, r.actor, r.subject, r.reason,
                                  dict(r.details or {})) for r in rows]
        return events, newest if len(rows) < self.batch else rows[-1].seq

    @staticmethod
    def _watched(after_seq: int):
        return select(AuditEvent).where(AuditEvent.seq > after_seq,
                                        AuditEvent.action.in_(WATCHED),
                                        AuditEvent.subject_kind == "request")

    def _held_cursor(self, session) -> ChatCursor:
        cursor = session.get(ChatCursor, LOOP)
        if cursor is None or cursor.lease_owner != self.owner:
            raise _LeaseLost
        return cursor

    def _advance(self, seq: int) -> None:
        now = self.clock.now()
        with self.store.write() as session:
            cursor = self._held_cursor(session)
            cursor.after_seq = max(cursor.after_seq, seq)
            cursor.attempts, cursor.last_error = 0, None
            cursor.lease_until, cursor.updated_at = now + self.lease, now

    def _finish(self, caught_up_to: int) -> None:
        with self.store.write() as session:
            cursor = self._held_cursor(session)
            cursor.after_seq = max(cursor.after_seq, caught_up_to)
            cursor.lease_owner = cursor.lease_until = None
            cursor.updated_at = self.clock.now()

    def _back_off(self, failed: SlackCallFailed) -> None:
        now = self.clock.now()
        attempt = failed.attempt
        with self.store.write() as session:
            cursor = self._held_cursor(session)
            cursor.attempts += 1
            delay_s = self.policy.delay_s(cursor.attempts, self._jitter(),
                                          attempt.retry_after_s)
            cursor.next_attempt_at = now + timedelta(seconds=delay_s)
            cursor.last_error = f"{failed}: {attempt.detail or ''}"[:2000]
            cursor.lease_owner = cursor.lease_until = None
            cursor.updated_at = now
            attempts = cursor.attempts
        log.warning("chat-ops: %s (attempt %d); retrying in %.0f s", failed, attempts, delay_s)

    # --- one event -----------------------------------------------------------------------
    def _tell(self, event: EventToTell, web: SlackWeb) -> int:
        """Make the event's Slack calls, recording each post's `ts` as it is answered;
        returns how many calls were made."""
        read = self._read(event.code)
        if read is None:  # a request removed since: nothing to tell
            return 0
        request_id, view, where = read
        calls = 0
        channel = self.settings.slack_approvals_channel
        if (event.type == CREATED and channel and view["state"] == PENDING
                and not where.approval_ts):
            posted = web.post(channel, blocks.approval_message(view))
            calls += 1
            where = self._record(request_id, approval=posted)
        to = event.data.get("to")
        if (event.data.get("from") == PENDING and to and to != PENDING
                and where.approval_ts and where.approval_channel_id):
            web.update(where.approval_channel_id, where.approval_ts,
                       blocks.decided_message({**view, "state": to},
                                              blocks.actor_name(event.actor)))
            calls += 1
        if not where.channel_id or event.type not in WATCHED or (
                event.type == "reclaim.warned" and event.data.get("dry_run")):
            return calls
        if not where.thread_ts:
            posted = web.post(where.channel_id, blocks.thread_opener(view, where.requester))
            calls += 1
            where = self._record(request_id, thread=posted)
        if event.type in blocks.THREAD_EVENTS:
            web.post(where.channel_id, blocks.thread_reply(event.type, event.actor,
                                                           event.reason, view,
                                                           where.requester),
                     thread_ts=where.thread_ts)
            calls += 1
        return calls

    def _read(self, code: str) -> tuple[int, dict[str, Any], Where] | None:
        """The request as the API shows it now (its JSON: what the Block Kit builders
        take), and where it lives in chat."""
        request_id = request_id_from_code(code)
        with self.store.read() as session:
            request = session.get(GpuRequest, request_id) if request_id is not None else None
            if request is None:
                return None
            view = requests.view(session, request).model_dump(mode="json")
            return request.id, view, Where.of(session.get(ChatThread, request.id))

    def _record(self, request_id: int, *, approval: Posted | None = None,
                thread: Posted | None = None) -> Where:
        """Write down where a post landed, creating the request's `ChatThread` row for a
        request that did not come from chat. Tried twice: the inbound side may insert
        the row between our read and our insert."""
        for tries_left in (1, 0):
            try:
                with self.store.write() as session:
                    row = session.get(ChatThread, request_id)
                    if row is None:
                        row = ChatThread(request_id=request_id, platform="slack",
                                         created_at=self.clock.now())
                        session.add(row)
                    if approval is not None:
                        row.approval_channel_id, row.approval_ts = approval.channel, approval.ts
                    if thread is not None:
                        row.channel_id, row.thread_ts = thread.channel, thread.ts
                    session.flush()
                    return Where.of(row)
            except IntegrityError:
                if not tries_left:
                    raise
        raise AssertionError("unreachable")
