"""Granting, batched: approvals that arrive together are placed and written together.

A grant on its own is a transaction of some thirty statements and a commit. Under load,
callers waiting for the grant lock leave their requests in a queue, and whoever holds the
lock grants the whole queue in one transaction (group commit): the quota and pool ledgers
are read once, and bindings, claims and labels go in a few multi-row statements. A lone
caller still has its grant at once, in a batch of one. Requests are served in the order
they were queued; a batch that cannot place a request records why, as a single grant does.

Decisions come from the placement cache. If the database refuses a batch (a unit another
server took, a MIG layout that changed), nothing of it is kept: the nodes it touched are
re-read, and its requests are granted one at a time, each retried a few times.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select

from gpufleet.clock import Clock
from gpufleet.domain.errors import Conflict
from gpufleet.domain.placement import Decision, StaleDecision
from gpufleet.services import requests
from gpufleet.services.bindings import UnitTaken
from gpufleet.services.placement_cache import PlacementCache
from gpufleet.store.database import StateStore
from gpufleet.store.tables import GpuRequest

log = logging.getLogger(__name__)

ATTEMPTS_ALONE = 5  # tries of a request granted on its own after its batch was refused
BATCH_LIMIT = 256  # requests per transaction


@dataclass
class _Ticket:
    request_ids: list[int]
    granted: set[int] = field(default_factory=set)
    error: BaseException | None = None
    done: bool = False


class Granter:
    def __init__(self, store: StateStore, clock: Clock, cache: PlacementCache):
        self.store = store
        self.clock = clock
        self.cache = cache
        self._grant_lock = threading.Lock()  # one batch at a time: the cache is not shared
        self._queue_lock = threading.Lock()
        self._queue: list[_Ticket] = []

    def grant(self, request_ids: Sequence[int]) -> set[int]:
        """Place and bind these approved requests (in this order); the ids now active."""
        ticket = _Ticket(list(request_ids))
        with self._queue_lock:
            self._queue.append(ticket)
        with self._grant_lock:
            if not ticket.done:  # nobody served it while this thread waited
                with self._queue_lock:
                    tickets, self._queue = self._queue, []
                self._serve(tickets)
        if ticket.error is not None:
            raise ticket.error
        return ticket.granted

    def warm(self) -> None:
        """Read the fleet into the cache now rather than at the first grant."""
        with self._grant_lock, self.store.read() as session:
            self.cache.refresh(session)

    def _serve(self, tickets: list[_Ticket]) -> None:
        ids = list(dict.fromkeys(i for ticket in tickets for i in ticket.request_ids))
        granted: set[int] = set()
        try:
            for start in range(0, len(ids), BATCH_LIMIT):
                granted |= self._grant_together(ids[start:start + BATCH_LIMIT])
        except Exception as exc:  # each caller raises it in its own thread
            for ticket in tickets:
                ticket.error = exc
        for ticket in tickets:
            ticket.granted = granted & set(ticket.request_ids)
            ticket.done = True

    def _grant_together(self, ids: list[int]) -> set[int]:
        try:
            return self._write(ids)
        except (Conflict, StaleDecision) as exc:
            _raise_unless_refused(exc)
            log.info("a batch of %d grants was refused (%s); granting one at a time",
                     len(ids), exc)
        return {request_id for request_id in ids if self._grant_alone(request_id)}

    def _grant_alone(self, request_id: int) -> bool:
        for attempt in range(1, ATTEMPTS_ALONE + 1):
            try:
                return bool(self._write([request_id]))
            except (Conflict, StaleDecision) as exc:
                _raise_unless_refused(exc)
                log.info("grant of request %d was refused (%s); attempt %d", request_id, exc,
                         attempt)
        return False

    def _write(self, ids: list[int]) -> set[int]:
        """One transaction granting what it can of `ids`. If it fails, the cache holds
        decisions the store does not: the nodes they touched are marked stale."""
        touched: set[str] = set()

        def commit(decision: Decision) -> None:
            touched.update(decision.nodes)
            self.cache.commit(decision)

        try:
            with self.store.write_dedicated() as session:
                self.cache.refresh(session)
                order = {request_id: n for n, request_id in enumerate(ids)}
                batch = sorted(session.scalars(select(GpuRequest)
                                               .where(GpuRequest.id.in_(ids))),
                               key=lambda r: order[r.id])
                return set(requests.activate(session, batch, self.clock.now(), self.cache,
                                             commit))
        except BaseException:
            self.cache.mark_stale(touched)
            raise


def _raise_unless_refused(exc: Exception) -> None:
    """A refused grant — a unit taken, a slot claimed meanwhile, a decision the cache no
    longer supports — is tried again; any other conflict is the caller's to see."""
    refused = (isinstance(exc, (UnitTaken, StaleDecision))
               or (isinstance(exc, Conflict) and exc.code == "integrity_conflict"))
    if not refused:
        raise exc
