"""The reclaim loop: idle allocations warned, then released, shrunk or reported, and
allocations near their end warned (docs/operations.md, "Reclamation").

Idleness is the telemetry's own judgement (`TelemetryQueries.idle`, per unit from the
minute masks, over each policy's idle window): a unit whose activity is unknown, or that
was bound for less than the window, is never idle. What to do with each allocation is the
domain's `next_step`; this module reads the facts, asks it, and writes what it said — in
one write transaction per round, under the leader lock, so one replica acts and a round
run twice does nothing twice (open warnings are the state; notifications carry
de-duplication keys).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.clock import Clock
from gpufleet.domain.access import Action
from gpufleet.domain.errors import Unavailable
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.domain.operations.reclaim_policy import ReclaimAction, ReclaimPolicy
from gpufleet.domain.operations.reclamation import (
    OUTCOME_OF_STEP,
    WOULD,
    Idleness,
    OpenWarning,
    Outcome,
    Step,
    ending_summary,
    next_step,
    units_taken_of,
    units_text,
    warning_summary,
)
from gpufleet.domain.requests import RequestState, request_code
from gpufleet.services.access import audit
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.lifecycle import requests as lifecycle_requests
from gpufleet.services.lifecycle import shrink
from gpufleet.services.lifecycle.lifecycle import Lifecycle
from gpufleet.services.operations import outbox
from gpufleet.services.operations.exemptions import exempt_now
from gpufleet.services.operations.reclaim_policies import PolicyBook, default_policy
from gpufleet.services.telemetry.ownership import Slot, read_slots
from gpufleet.services.telemetry.queries import TelemetryQueries
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Gpu, GpuRequest, ReclaimWarning, User
from gpufleet.wire.reclaim import RoundView, StepView

log = logging.getLogger(__name__)

ACTOR = "system:reclaim"
LEADER_LOCK = "reclamation"
IDLE, ENDING = "idle", "ending"
# Outcomes that close an idle stretch for good: after them the allocation is warned again
# only once it was used (its idle stretch starts anew).
_STRETCH_HANDLED = {Outcome.NOTIFIED, Outcome.WOULD_RELEASE, Outcome.WOULD_SHRINK,
                    Outcome.WOULD_NOTIFY}


def unit_key(slot_unit: tuple[str, str | None]) -> str:
    gpu, mig = slot_unit
    return gpu if mig is None else f"{gpu}/{mig}"


@dataclass
class Allocation:
    """One active allocation as a round sees it: its units now, where they are."""

    code: str
    project: str
    slots: list[Slot] = field(default_factory=list)

    @property
    def units(self) -> frozenset[str]:
        return frozenset(unit_key(s.unit) for s in self.slots)

    @property
    def environment(self) -> str | None:
        """Its units' environment; None when they span several (no environment policy
        applies then: the project's, else the default)."""
        found = {s.environment for s in self.slots}
        return found.pop() if len(found) == 1 else None

    def labels(self, owner: str) -> dict[str, str]:
        def joined(values) -> str:
            return ",".join(sorted(set(values)))
        return {"environment": joined(s.environment for s in self.slots),
                "node": joined(s.node for s in self.slots),
                "gpu": joined(s.unit[0] for s in self.slots),
                "allocation": self.code, "project": self.project, "owner": owner}


@dataclass(frozen=True)
class Judged:
    allocation: Allocation
    policy: ReclaimPolicy
    idleness: Idleness
    idle_since: datetime | None


class Reclamation:
    def __init__(self, store: StateStore, queries: TelemetryQueries, lifecycle: Lifecycle,
                 settings: Settings, clock: Clock):
        self.store = store
        self.queries = queries
        self.lifecycle = lifecycle
        self.settings = settings
        self.clock = clock

    @property
    def default(self) -> ReclaimPolicy:
        return default_policy(self.settings)

    # --- one round ---------------------------------------------------------------------
    def run(self, principal: Principal, *, dry_run: bool = False) -> RoundView:
        """A round now, for an operator (`gpufleet reclaim run`); `dry_run`: decide, write
        nothing, and say what would be done."""
        principal.require(Action.MANAGE_RECLAIM)
        return self.round(dry_run=dry_run)

    def tick(self) -> RoundView:
        """The server loop's round (`api/app.py`)."""
        return self.round(dry_run=False)

    def round(self, *, dry_run: bool) -> RoundView:
        now = self.clock.now()
        with self.store.read() as session:
            book = PolicyBook(session, self.default)
            allocations = self._allocations(session, now)
        judged = self._judge(book, allocations, now)
        if dry_run:
            with self.store.read() as session:
                return self._decide(session, judged, now, apply=False)
        with self.lifecycle.freeing_write() as session:
            if not self.store.try_leader_lock(session, LEADER_LOCK):
                return RoundView(at=now, dry_run=False, steps=[])
            view = self._decide(session, judged, now, apply=True)
        if any(s.step == Step.ACT and s.action is not ReclaimAction.NOTIFY and not s.dry_run
               for s in view.steps):
            self.lifecycle.grant_waiting()  # the units taken may be what the queue waits for
        return view

    def _allocations(self, session: Session, now: datetime) -> dict[str, Allocation]:
        found: dict[str, Allocation] = {}
        for slot in read_slots(session, SYSTEM, now - timedelta(minutes=1), now,
                               cache=self.queries.slot_cache):
            if slot.start <= now and (slot.end is None or slot.end > now):
                found.setdefault(slot.allocation,
                                 Allocation(slot.allocation, slot.project)).slots.append(slot)
        return found

    def _judge(self, book: PolicyBook, allocations: dict[str, Allocation],
               now: datetime) -> list[Judged]:
        """Each allocation's policy and its units' idleness over that policy's window (one
        idle query per distinct window among the enabled policies)."""
        policies = {code: book.policy_for(a.project, a.environment)
                    for code, a in allocations.items()}
        verdicts: dict[int, dict[str, dict[str, tuple[str, datetime]]]] = {}
        for minutes in sorted({p.idle_window_minutes for p in policies.values() if p.enabled}):
            try:
                listing = self.queries.idle(SYSTEM, window_minutes=minutes)
            except Unavailable as exc:  # no masks (a remote store without them): no verdicts
                log.warning("reclamation cannot judge idleness: %s", exc.message)
                listing = None
            per: dict[str, dict[str, tuple[str, datetime]]] = defaultdict(dict)
            for item in listing.items if listing else ():
                per[item.allocation][unit_key((item.gpu_uuid, item.mig_uuid))] = (
                    item.state, item.idle_since)
            verdicts[minutes] = per
        judged = []
        for code, allocation in sorted(allocations.items()):
            policy = policies[code]
            units = verdicts.get(policy.idle_window_minutes, {}).get(code, {})
            units = {k: v for k, v in units.items() if k in allocation.units}
            idleness = Idleness(units=allocation.units, idle=frozenset(units),
                                held=frozenset(k for k, (state, _) in units.items()
                                               if state == "idle_held"))
            since = max((at for _, at in units.values()), default=None)
            judged.append(Judged(allocation, policy, idleness, since))
        return judged

    # --- deciding and acting -----------------------------------------------------------
    def _decide(self, session: Session, judged: list[Judged], now: datetime, *,
                apply: bool) -> RoundView:
        requests = {r.id: r for r in session.scalars(select(GpuRequest).where(
            GpuRequest.state == RequestState.ACTIVE.value))}
        by_code = {request_code(rid): r for rid, r in requests.items()}
        open_idle, last_handled, warned_ends = self._warnings(session, requests)
        exempt = exempt_now(session, requests, now)
        owners = _owner_names(session, requests.values())
        steps, ending = [], []
        for j in judged:
            request = by_code.get(j.allocation.code)
            if request is None:
                continue
            warning = open_idle.get(request.id)
            handled = last_handled.get(request.id)
            step = next_step(j.policy, j.idleness, exempt=request.id in exempt,
                             warning=OpenWarning(warning.deadline_at) if warning else None,
                             now=now,
                             handled_since=handled, idle_since=j.idle_since)
            owner = owners.get(request.id, request.requested_by)
            summary = None
            if step is Step.WARN:
                summary = self._summary(j, now)
            if step is not Step.NOTHING:
                steps.append(StepView(
                    allocation=j.allocation.code, project=j.allocation.project,
                    environment=j.allocation.environment, step=step.value,
                    action=j.policy.action, dry_run=j.policy.dry_run,
                    units=len(j.idleness.units),
                    idle_units=len(j.idleness.reclaimable(j.policy)),
                    deadline_at=(now + j.policy.grace if step is Step.WARN
                                 else warning.deadline_at if warning else None),
                    summary=summary or (warning.summary if warning else None)))
            if apply and step is not Step.NOTHING:
                self._apply(session, step, j, request, warning, owner, summary, now)
            if self._ending_due(j.policy, request, warned_ends, now):
                ending.append(j.allocation.code)
                if apply:
                    self._warn_ending(session, j, request, owner, now)
        if apply:
            self._close_ended(session, {j.allocation.code for j in judged}, now)
        return RoundView(at=now, dry_run=not apply, steps=steps, ending_warned=ending)

    @staticmethod
    def _close_ended(session: Session, judged: set[str], now: datetime) -> None:
        """Close, as `ended`, the open idle warnings of allocations that ended (released by
        their owner, expired) or hold no unit any more before their deadline."""
        for warning in session.scalars(select(ReclaimWarning).where(
                ReclaimWarning.outcome.is_(None), ReclaimWarning.kind == IDLE)):
            code = request_code(warning.request_id)
            if code in judged:
                continue
            warning.outcome, warning.outcome_at = Outcome.ENDED.value, now
            audit.record(session, at=now, actor=ACTOR, action="reclaim.ended",
                         subject_kind="request", subject=code,
                         reason="the allocation ended before its deadline")

    def _warnings(self, session: Session, requests: dict[int, GpuRequest]):
        """Open idle warnings by request; when each allocation's last idle stretch was
        handled for good (notified, or a dry run's would-do); the ends already warned of."""
        open_idle: dict[int, ReclaimWarning] = {}
        handled: dict[int, datetime] = {}
        warned_ends: set[tuple[int, datetime]] = set()
        ids = list(requests)
        for lo in range(0, len(ids), 500):
            for row in session.scalars(select(ReclaimWarning).where(
                    ReclaimWarning.request_id.in_(ids[lo:lo + 500]))):
                if row.kind == ENDING:
                    warned_ends.add((row.request_id, row.deadline_at))
                elif row.outcome is None:
                    open_idle[row.request_id] = row
                elif row.outcome in _STRETCH_HANDLED:
                    previous = handled.get(row.request_id)
                    handled[row.request_id] = max(previous or row.outcome_at, row.outcome_at)
        return open_idle, handled, warned_ends

    def _summary(self, j: Judged, now: datetime) -> str:
        taking = units_taken_of(j.policy, j.idleness)
        idle_for = max(j.policy.idle_window, now - j.idle_since) if j.idle_since else \
            j.policy.idle_window
        return warning_summary(j.allocation.code,
                               units=units_text(len(j.idleness.units),
                                                [s.model for s in j.allocation.slots]),
                               idle_for=idle_for, deadline=now + j.policy.grace,
                               action=j.policy.action, taking=len(taking),
                               of=len(j.idleness.units))

    def _apply(self, session: Session, step: Step, j: Judged, request: GpuRequest,
               warning: ReclaimWarning | None, owner: str, summary: str | None,
               now: datetime) -> None:
        code = j.allocation.code
        if step is Step.WARN:
            self._warn(session, j, request, owner, summary or "", now)
        elif step is Step.ACT and warning is not None:
            self._act(session, j, request, warning, owner, now)
        elif step in OUTCOME_OF_STEP and warning is not None:
            outcome = OUTCOME_OF_STEP[step]
            warning.outcome, warning.outcome_at = outcome.value, now
            audit.record(session, at=now, actor=ACTOR, action=f"reclaim.{outcome.value}",
                         subject_kind="request", subject=code, dry_run=warning.dry_run,
                         warned_at=warning.warned_at.isoformat())

    def _warn(self, session: Session, j: Judged, request: GpuRequest, owner: str,
              summary: str, now: datetime) -> None:
        code, policy = j.allocation.code, j.policy
        deadline = now + policy.grace
        session.add(ReclaimWarning(
            request_id=request.id, kind=IDLE, project=j.allocation.project,
            environment=j.allocation.environment, owner=owner, action=policy.action.value,
            dry_run=policy.dry_run, units=len(j.idleness.units),
            idle_units=sorted(j.idleness.reclaimable(policy)), summary=summary,
            warned_at=now, deadline_at=deadline, units_taken=0, gpus_taken=0.0))
        audit.record(session, at=now, actor=ACTOR, action="reclaim.warned",
                     subject_kind="request", subject=code, reason=summary,
                     action_at_deadline=policy.action.value, deadline=deadline.isoformat(),
                     dry_run=policy.dry_run, policy=dict(policy.source))
        if policy.dry_run:
            return  # a dry run tells nobody: it records what it would do
        outbox.notify(session, Notification(
            kind="reclaim.warning", severity=Severity.WARNING, summary=summary,
            text=_policy_text(policy), dedup_key=f"reclaim.warning:{code}:{now.isoformat()}",
            labels=j.allocation.labels(owner), owners=_owners(owner)), now)

    def _act(self, session: Session, j: Judged, request: GpuRequest, warning: ReclaimWarning,
             owner: str, now: datetime) -> None:
        code, policy = j.allocation.code, j.policy
        taking = units_taken_of(policy, j.idleness)
        if policy.dry_run:
            outcome = WOULD[policy.action]
        elif policy.action is ReclaimAction.NOTIFY:
            outcome = Outcome.NOTIFIED
        elif policy.action is ReclaimAction.RELEASE or taking >= j.idleness.units:
            outcome = Outcome.RELEASED  # a shrink of every unit is a release
        else:
            outcome = Outcome.SHRUNK
        reason = f"idle since the warning at {warning.warned_at:%Y-%m-%d %H:%M} UTC " \
                 f"({policy.action.value} by reclamation policy)"
        slots = [s for s in j.allocation.slots if unit_key(s.unit) in taking]
        planned_end = request.ends_at
        if outcome is Outcome.RELEASED:
            lifecycle_requests.release_for(session, request, ACTOR, now, reason)
        elif outcome is Outcome.SHRUNK:
            slots = self._shrink(session, request, j, taking, now, reason)
        elif outcome is Outcome.NOTIFIED:
            slots = []
        warning.outcome, warning.outcome_at = outcome.value, now
        warning.units_taken = len(slots)
        warning.gpus_taken = sum(s.weight for s in slots)
        warning.planned_end_at = planned_end
        audit.record(session, at=now, actor=ACTOR, action=f"reclaim.{outcome.value}",
                     subject_kind="request", subject=code, reason=reason,
                     units_taken=len(slots), dry_run=policy.dry_run)
        if policy.dry_run:
            return
        taken = f"{len(slots)} unit{'s' if len(slots) != 1 else ''}"
        what = {Outcome.RELEASED: f"{code}: released by reclamation ({taken} back to the pool)",
                Outcome.SHRUNK: f"{code}: shrunk by reclamation ({taken} back to the pool; "
                                f"the used units stay)",
                Outcome.NOTIFIED: f"{code}: still idle after its warning "
                                  "(policy: notify; nothing taken)"}[outcome]
        outbox.notify(session, Notification(
            kind=f"reclaim.{outcome.value}", severity=Severity.WARNING, summary=what,
            text=warning.summary, dedup_key=f"reclaim.{outcome.value}:{code}:{warning.id}",
            labels=j.allocation.labels(owner), owners=_owners(owner)), now)

    def _shrink(self, session: Session, request: GpuRequest, j: Judged,
                taking: frozenset[str], now: datetime, reason: str) -> list[Slot]:
        """End the units on GPUs where every unit the allocation holds is idle (a GPU is
        the unit the release path ends; a MIG GPU with one used instance stays)."""
        per_gpu: dict[str, list[Slot]] = defaultdict(list)
        for slot in j.allocation.slots:
            per_gpu[slot.unit[0]].append(slot)
        gpus = [g for g, slots in per_gpu.items()
                if all(unit_key(s.unit) in taking for s in slots)]
        if not gpus:
            return []
        ids = dict(session.execute(select(Gpu.uuid, Gpu.id).where(Gpu.uuid.in_(gpus))).all())
        shrink.release_units(session, request, ids.values(), ACTOR, now, reason)
        return [s for g in gpus for s in per_gpu[g]]

    # --- the end of an allocation ------------------------------------------------------
    @staticmethod
    def _ending_due(policy: ReclaimPolicy, request: GpuRequest,
                    warned: set[tuple[int, datetime]], now: datetime) -> bool:
        lead = policy.end_warning_lead
        ends = request.ends_at
        return (lead > timedelta(0) and ends is not None and now < ends <= now + lead
                and (request.id, ends) not in warned)

    def _warn_ending(self, session: Session, j: Judged, request: GpuRequest, owner: str,
                     now: datetime) -> None:
        code = j.allocation.code
        summary = ending_summary(code, units=units_text(len(j.idleness.units),
                                                        [s.model for s in j.allocation.slots]),
                                 ends_at=request.ends_at)
        session.add(ReclaimWarning(
            request_id=request.id, kind=ENDING, project=j.allocation.project,
            environment=j.allocation.environment, owner=owner, action="release",
            dry_run=False, units=len(j.idleness.units), idle_units=[], summary=summary,
            warned_at=now, deadline_at=request.ends_at, units_taken=0, gpus_taken=0.0))
        audit.record(session, at=now, actor=ACTOR, action="request.ending_warned",
                     subject_kind="request", subject=code, reason=summary,
                     ends_at=request.ends_at.isoformat())
        outbox.notify(session, Notification(
            kind="request.ending", severity=Severity.INFO, summary=summary,
            dedup_key=f"request.ending:{code}:{request.ends_at.isoformat()}",
            labels=j.allocation.labels(owner), owners=_owners(owner)), now)


def _owner_names(session: Session, requests) -> dict[int, str]:
    """Each request's requester as a user name where it has one (what receivers that tell
    owners address), else its actor (`token:ci`)."""
    by_user = {r.id: r.requester_user_id for r in requests if r.requester_user_id}
    if not by_user:
        return {}
    names = dict(session.execute(select(User.id, User.name).where(
        User.id.in_(set(by_user.values())))).all())
    return {rid: names[uid] for rid, uid in by_user.items() if uid in names}


def _owners(owner: str) -> tuple[str, ...]:
    return () if ":" in owner else (owner,)


def _policy_text(policy: ReclaimPolicy) -> str:
    decided = ", ".join(f"{k} from {v}" for k, v in policy.source) or "server default"
    return (f"Policy: idle window {policy.idle_window}, grace {policy.grace}, action "
            f"{policy.action.value}, idle-held {policy.idle_held.value} ({decided}).")

