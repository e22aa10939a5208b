"""Granting, batched: approvals that arrive together are approved, placed and written together.

A grant on its own is a transaction of some thirty statements and a commit. Under load,
callers queue their tickets while a batch is being written; when it ends, one of the
waiting callers leads the next batch, taking the whole queue into one transaction (group
commit), and the others wait until their batch has committed. In it, operators' approvals
are made first, then the quota and pool ledgers are read once, and bindings, claims and
labels go in a few multi-row statements. A lone caller still has its grant at once, in a
batch of one.

Requests are served oldest first (by request id, as the lifecycle loop's queue is), whatever
order their callers reached the granter in; and when units may have come free since the
queue of approved, waiting requests was last tried (the placement cache re-read nodes: a
release, an expiry, a registration), the batch takes that queue in too, so an approval
racing a release never takes the freed units ahead of an older request. A batch that
cannot place a request records why, as a single grant does. Each caller gets its
requests' views as the batch left them, read in the batch's own transaction (one query for
all of them).

Decisions come from the placement cache. If the database refuses a batch (a unit another
server took, a MIG layout that changed), nothing of it is kept: the nodes it touched are
re-read, and its requests are granted one at a time, each retried a few times. A request
another replica changed meanwhile (granted it, cancelled it) refuses the batch the same way
(`concurrent_update`: requests' updates are checked against the state they were read in),
and the retry reads it as it now is, so a request is never granted twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.domain.errors import Conflict, GpufleetError
from gpufleet.domain.placement import Decision, StaleDecision
from gpufleet.domain.requests import request_code
from gpufleet.services.access.principal import Principal
from gpufleet.services.lifecycle import requests
from gpufleet.services.lifecycle.bindings import UnitTaken
from gpufleet.services.lifecycle.granting import DryRunFleet, FleetSource
from gpufleet.services.lifecycle.placement_cache import PlacementCache
from gpufleet.store.database import StateStore
from gpufleet.store.tables import GpuRequest
from gpufleet.wire.requests import RequestView

T = TypeVar("T")

log = logging.getLogger(__name__)

ATTEMPTS_ALONE = 5  # tries of a request granted on its own after its batch was refused
BATCH_LIMIT = 256  # requests per transaction


@dataclass(frozen=True)
class Approval:
    """An operator's approval of one pending request, made in the transaction that then
    grants it: one commit instead of two, and no window where it is approved but unplaced
    for want of a second transaction."""

    principal: Principal
    reason: str | None


@dataclass
class _Ticket:
    """One caller's part of a batch."""

    request_ids: list[int]
    approval: Approval | None = None  # of request_ids[0], before it is granted
    views: dict[int, RequestView] = field(default_factory=dict)
    error: BaseException | None = None
    done: bool = False


class Granter:
    def __init__(self, store: StateStore, clock: Clock, cache: PlacementCache):
        self.store = store
        self.clock = clock
        self.cache = cache
        self._grant_lock = threading.Lock()  # one batch at a time: the cache is not shared
        # Callers queue tickets under the condition; one of them at a time leads, taking
        # the queue and serving it, and wakes the others when done. A caller whose ticket
        # was served returns without ever holding the grant lock.
        self._turn = threading.Condition()
        self._leading = False
        self._queue: list[_Ticket] = []

    def grant(self, request_ids: Sequence[int]) -> dict[int, RequestView]:
        """Place and bind these approved requests (oldest first, behind older waiting ones).
        Returns each one's view once its grant was tried: `active` if it was granted, else
        why it waits."""
        return self._submit(_Ticket(list(request_ids)))

    def approve(self, request_id: int, approval: Approval) -> RequestView:
        """Approve a pending request and grant it in the same transaction; its view. An
        approval the request refuses (not found, not pending, one's own) raises, and
        nothing of it is written. If the database keeps refusing the grant, the approval
        is written alone and the request waits, approved, for the lifecycle loop."""
        return self._submit(_Ticket([request_id], approval))[request_id]

    def dry_run(self, plan: Callable[[Session, FleetSource], T]) -> T:
        """`plan(session, fleet)` on the placement cache as the next grant would find it,
        deciding without applying anything (the request preview). It holds the grant lock,
        as deciding does: the cache is not shared."""
        with self._grant_lock, self.store.read() as session:
            if self.cache.refresh(session):
                self._read_fleet_beside()
            return plan(session, DryRunFleet(self.cache))

    def warm(self) -> None:
        """Read the fleet into the cache now rather than at the first grant."""
        with self._grant_lock, self.store.read() as session:
            self.cache.refresh(session)

    def _submit(self, ticket: _Ticket) -> dict[int, RequestView]:
        with self._turn:
            self._queue.append(ticket)
            while self._leading and not ticket.done:
                self._turn.wait()
            tickets: list[_Ticket] = []
            if not ticket.done:  # nobody leads, and nobody served it: lead
                self._leading = True
                tickets, self._queue = self._queue, []
        if tickets:
            try:
                with self._grant_lock:
                    self._serve(tickets)
            finally:
                with self._turn:
                    self._leading = False
                    self._turn.notify_all()
        if ticket.error is not None:
            raise ticket.error
        return ticket.views

    def _serve(self, tickets: list[_Ticket]) -> None:
        try:
            for batch in _batches(tickets):
                self._grant_together(batch)
        except Exception as exc:  # each caller raises it in its own thread
            for ticket in tickets:
                if not ticket.done:
                    ticket.error = exc
        for ticket in tickets:
            ticket.done = True

    def _grant_together(self, tickets: list[_Ticket]) -> None:
        try:
            self._write(tickets)
            return
        except (Conflict, StaleDecision) as exc:
            _raise_unless_refused(exc)
            log.info("a batch of %d grants was refused (%s); granting one at a time",
                     sum(len(t.request_ids) for t in tickets), exc)
        for ticket in tickets:
            self._grant_alone(ticket)

    def _grant_alone(self, ticket: _Ticket) -> None:
        for attempt in range(1, ATTEMPTS_ALONE + 1):
            try:
                self._write([ticket])
                return
            except (Conflict, StaleDecision) as exc:
                _raise_unless_refused(exc)
                log.info("grant of requests %s was refused (%s); attempt %d",
                         ticket.request_ids, exc, attempt)
        if ticket.approval is not None:  # the approval stands; the loop grants it later
            self._write([ticket], place=False)
        ticket.done = True

    def _write(self, tickets: list[_Ticket], place: bool = True) -> None:
        """One transaction: the tickets' approvals, then granting what it can of their
        requests. Only once it commits do the callers learn the outcome. If it fails, the
        cache holds decisions the store does not: the nodes they touched are marked
        stale."""
        touched: set[str] = set()

        def commit(decision: Decision) -> None:
            touched.update(decision.nodes)
            self.cache.commit(decision)

        ids = {i for ticket in tickets for i in ticket.request_ids}
        refusals: dict[int, GpufleetError] = {}
        try:
            with self.store.write_dedicated() as session:
                now = self.clock.now()
                for n, ticket in enumerate(tickets):
                    if ticket.approval is not None:
                        try:  # a refused approval writes nothing: it raises before
                            requests.approve(session, ticket.approval.principal,
                                             request_code(ticket.request_ids[0]), now,
                                             ticket.approval.reason)
                        except GpufleetError as exc:
                            refusals[n] = exc
                queued: list[int] = []
                if place:
                    if self.cache.refresh(session):
                        self._read_fleet_beside()
                    if self.cache.changed_since_queue:
                        self.cache.changed_since_queue = False
                        queued = requests.waiting_ids(session, now)
                batch = sorted(session.scalars(select(GpuRequest).where(
                    GpuRequest.id.in_(ids | set(queued)))), key=lambda r: r.id)
                if place:
                    requests.activate(session, batch, now, self.cache, commit)
                mine = [request for request in batch if request.id in ids]
                views = {request.id: view for request, view
                         in zip(mine, requests.views(session, mine), strict=True)}
        except BaseException:
            self.cache.mark_stale(touched)
            self.cache.changed_since_queue = True  # the queue's try did not count
            raise
        for n, ticket in enumerate(tickets):
            ticket.error = refusals.get(n)
            ticket.views = {i: views[i] for i in ticket.request_ids if i in views}
            ticket.done = True


    def _read_fleet_beside(self) -> None:
        """Re-read the whole fleet in another thread while grants go on from the copy."""
        started = self.cache.begin_full_read()
        threading.Thread(target=self._read_fleet, args=(started,), daemon=True,
                         name="placement-cache-read").start()

    def _read_fleet(self, started: float) -> None:
        try:
            with self.store.read() as session:
                fleet = self.cache.read_fleet(session)
        except Exception:
            log.exception("re-reading the fleet failed; grants go on from the current copy")
            with self._grant_lock:
                self.cache.abandon_full_read()
            return
        with self._grant_lock:
            self.cache.install(fleet, started)


def _batches(tickets: list[_Ticket]) -> Iterator[list[_Ticket]]:
    """The tickets in order, in runs of at most BATCH_LIMIT requests (a ticket is never
    split; one larger than the limit is a batch of its own)."""
    batch: list[_Ticket] = []
    size = 0
    for ticket in tickets:
        if batch and size + len(ticket.request_ids) > BATCH_LIMIT:
            yield batch
            batch, size = [], 0
        batch.append(ticket)
        size += len(ticket.request_ids)
    if batch:
        yield batch


def _raise_unless_refused(exc: Exception) -> None:
    """A refused grant — a unit taken, a slot claimed meanwhile, a decision the cache no
    longer supports — is tried again; any other conflict is the caller's to see."""
    refused = (isinstance(exc, (UnitTaken, StaleDecision))
               or (isinstance(exc, Conflict)
                   and exc.code in ("integrity_conflict", "concurrent_update")))
    if not refused:
        raise exc
