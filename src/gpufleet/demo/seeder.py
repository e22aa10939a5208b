"""Every lifecycle call the demo's seeding makes, one method each, through its journal.

A call is made once per data dir: replayed from the journal when an earlier, interrupted
seeding made it (`demo.seed_journal`), made and recorded otherwise. The principals a call is
made as are drawn from the seeding's random generator before the call is looked up in the
journal, so a resumed seeding draws exactly what the first one drew.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.demo.seed_journal import Outcome, SeedJournal
from gpufleet.domain.errors import GpufleetError
from gpufleet.domain.requests import RequestState
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire import requests as wr


class SeedingHalted(Exception):
    """The demo is stopping: the seeding ends before its next call."""


@dataclass
class People:
    members: dict[str, list[Principal]]  # project -> its member users
    operators: list[Principal]


def _request(view: wr.RequestView) -> Outcome:
    return Outcome(view.code, view.state, tuple(unit.gpu_uuid for unit in view.units))


def _done(_reply: object) -> Outcome:
    return Outcome()


SEED_STEPS = ("quotas", "pools", "history", "allocations", "queue")


@dataclass
class SeedProgress:
    """Where a seeding running in a worker thread stands, for the demo to show while it
    waits. Written by the seeding's thread only; each read sees a whole value."""

    step: str = "planning"
    calls: int = 0  # service calls made (or replayed from the journal) so far

    def line(self) -> str:
        number = SEED_STEPS.index(self.step) + 1 if self.step in SEED_STEPS else 0
        return f"step {number} of {len(SEED_STEPS)} ({self.step}), {self.calls} calls made"


class Seeder:
    def __init__(self, gf: Gpufleet, people: People, rng: random.Random,
                 journal: SeedJournal, halt: threading.Event | None = None,
                 progress: SeedProgress | None = None):
        self.gf = gf
        self.progress = progress
        self.lc = gf.lifecycle
        self.people = people
        self.rng = rng
        self.journal = journal
        self.halt = halt

    def member(self, project: str) -> Principal:
        return self.rng.choice(self.people.members[project])

    def operator(self) -> Principal:
        return self.rng.choice(self.people.operators)

    def _call(self, name: str, make: Callable[[], Outcome],
              refusable: bool = False) -> Outcome:
        """The outcome of the next call, replayed or made; a refusal (GpufleetError) is an
        Outcome with `refused` only where the caller expects one, and raises otherwise."""
        if self.progress is not None:
            self.progress.calls += 1
        recorded = self.journal.replay(name)
        if recorded is not None:
            return recorded
        if self.halt is not None and self.halt.is_set():
            raise SeedingHalted
        try:
            outcome = make()
        except GpufleetError as exc:
            if not refusable:
                raise  # not recorded: a resumed seeding tries it again
            outcome = Outcome(refused=exc.code)
        self.journal.record(name, outcome)
        return outcome

    # --- requests ---------------------------------------------------------------------
    def create(self, project: str, body: wr.RequestCreate,
               refusable: bool = False) -> Outcome:
        who = self.member(project)
        return self._call("create", lambda: _request(self.lc.create_request(who, body)),
                          refusable)

    def approve(self, code: str, reason: str | None = None,
                refusable: bool = False) -> Outcome:
        who = self.operator()
        return self._call("approve", lambda: _request(self.lc.approve(who, code, reason)),
                          refusable)

    def create_and_approve(self, project: str, body: wr.RequestCreate,
                           reason: str | None = None, refusable: bool = False) -> Outcome:
        outcome = self.create(project, body, refusable)
        if outcome.state == RequestState.PENDING.value:
            outcome = self.approve(outcome.code, reason, refusable)
        return outcome

    def reject(self, code: str, reason: str) -> None:
        who = self.operator()
        self._call("reject", lambda: _done(self.lc.reject(who, code, reason)))

    def cancel(self, project: str, code: str, reason: str) -> None:
        who = self.member(project)
        self._call("cancel", lambda: _done(self.lc.cancel(who, code, reason)))

    def release(self, project: str, code: str, reason: str) -> None:
        who = self.member(project)
        self._call("release", lambda: _done(self.lc.release(who, code, reason)))

    # --- quotas, auto-approval and pools ---------------------------------------------------
    def set_quota(self, admin: Principal, project: str, flavour: str, limit: int) -> None:
        body = wr.QuotaSet(flavour=flavour, limit=limit)
        self._call("set_quota", lambda: _done(self.lc.set_quota(admin, project, body)))

    def set_auto_approve(self, admin: Principal, project: str,
                         body: wr.AutoApproveSet) -> None:
        self._call("set_auto_approve",
                   lambda: _done(self.lc.set_auto_approve(admin, project, body)))

    def request_pool(self, body: wr.PoolCreate) -> Outcome:
        who = self.member(body.project)
        return self._call("request_pool", lambda: Outcome(
            self.lc.request_pool(who, body).code))

    def approve_pool(self, code: str, reason: str) -> None:
        who = self.operator()
        self._call("approve_pool", lambda: _done(self.lc.approve_pool(who, code, reason)))
