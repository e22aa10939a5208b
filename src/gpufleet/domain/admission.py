"""Admission checks: small rules that each return a verdict with a reason, never raise.

A rule looks at one thing (the time window, the maximum duration, the quota, the pools,
the capacity that is healthy and reachable) and answers `accept`, `wait` (the request is
legal but cannot be granted yet: `why` shows these) or `reject` (it can never be granted as
asked: the API answers 4xx). A policy is an ordered list of rules; the services build the
facts a rule needs and the rules decide (STYLE.md, "a rule is a small named class").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum


class Outcome(StrEnum):
    ACCEPT = "accept"
    WAIT = "wait"
    REJECT = "reject"


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    code: str
    message: str
    details: dict = field(default_factory=dict)

    @classmethod
    def accept(cls, code: str = "ok", message: str = "") -> Verdict:
        return cls(Outcome.ACCEPT, code, message)


@dataclass(frozen=True)
class QuotaFact:
    """One flavour a request could be granted as, and the project's standing on it."""

    flavour: str
    limit_milli: int | None  # None: the project has no quota for this flavour
    used_milli: int          # pools plus allocations outside pools


@dataclass(frozen=True)
class CapacityFact:
    """Units of the requested kind on matching GPUs, by why they can or cannot be used."""

    usable_gpus: int
    quarantined_gpus: int = 0
    unschedulable_gpus: int = 0  # on cordoned, unreachable or retired nodes
    placement_refusal: str | None = None  # the engine's reason code when it could not place
    placement_message: str | None = None


@dataclass(frozen=True)
class AdmissionFacts:
    now: datetime
    demand_milli: int                  # what the request counts against a quota
    starts_at: datetime | None
    ends_at: datetime | None
    max_duration: timedelta
    quotas: Sequence[QuotaFact] = ()
    capacity: CapacityFact | None = None
    served_by_pool: str | None = None       # the project's pool with room for all of it
    awaiting_approval: bool = False         # pending: no operator or policy has decided
    needs_operator: bool = False            # no quota covers it, so no policy may decide


class Rule:
    name: str = "rule"

    def check(self, facts: AdmissionFacts) -> Verdict:
        raise NotImplementedError


class Approval(Rule):
    """A pending request waits for a decision, an operator's when no quota covers it."""

    name = "approval"

    def check(self, facts: AdmissionFacts) -> Verdict:
        if not facts.awaiting_approval:
            return Verdict.accept()
        unquoted = " (no quota covers its flavour)" if facts.needs_operator else ""
        return Verdict(Outcome.WAIT, "awaiting_approval",
                       f"waiting for an operator to approve it{unquoted}")


class TimeWindow(Rule):
    name = "time_window"

    def check(self, facts: AdmissionFacts) -> Verdict:
        start = facts.starts_at or facts.now
        if facts.ends_at is not None and facts.ends_at <= start:
            return Verdict(Outcome.REJECT, "end_before_start",
                           "the end time is not after the start time",
                           {"starts_at": start.isoformat(), "ends_at": facts.ends_at.isoformat()})
        if facts.ends_at is not None and facts.ends_at <= facts.now:
            return Verdict(Outcome.REJECT, "end_in_past", "the end time has already passed")
        if facts.starts_at is not None and facts.starts_at > facts.now:
            return Verdict(Outcome.WAIT, "waiting_for_start",
                           f"reserved from {facts.starts_at.isoformat()}",
                           {"starts_at": facts.starts_at.isoformat()})
        return Verdict.accept()


class MaximumDuration(Rule):
    name = "maximum_duration"

    def check(self, facts: AdmissionFacts) -> Verdict:
        if facts.ends_at is None:
            return Verdict.accept()
        start = max(facts.starts_at or facts.now, facts.now)
        if facts.ends_at - start > facts.max_duration:
            days = facts.max_duration / timedelta(days=1)
            return Verdict(Outcome.REJECT, "duration_too_long",
                           f"a request may last at most {days:g} days",
                           {"max_duration_s": int(facts.max_duration.total_seconds())})
        return Verdict.accept()


class Quota(Rule):
    """docs/design.md, "Concepts": the most a project may hold at once per flavour.

    With several candidate flavours (any model, a model list) the request fits when one of
    them has room. A flavour without a quota never blocks, but it needs an operator. A
    request its project's pool has room for counts nothing more: the pool's units are
    already part of what the project holds (quota caps, pools guarantee).
    """

    name = "quota"

    def check(self, facts: AdmissionFacts) -> Verdict:
        if not facts.quotas:
            return Verdict.accept()
        if any(q.limit_milli is None for q in facts.quotas):
            return Verdict.accept("no_quota", "no quota covers this flavour: an operator "
                                  "must approve it")
        if facts.served_by_pool is not None:
            return within_pool(facts.served_by_pool)
        if all(facts.demand_milli > q.limit_milli for q in facts.quotas):
            return Verdict(Outcome.REJECT, "quota_exceeded",
                           "the request alone is larger than the project's quota",
                           quota_details(facts.quotas, facts.demand_milli))
        if all(q.used_milli + facts.demand_milli > q.limit_milli for q in facts.quotas):
            return quota_exhausted(facts.quotas, facts.demand_milli)
        return Verdict.accept()


def within_pool(pool: str) -> Verdict:
    return Verdict.accept("within_pool", f"served from {pool}, which the project's quota "
                          "already counts")


def quota_exhausted(quotas: Sequence[QuotaFact], demand_milli: int) -> Verdict:
    return Verdict(Outcome.WAIT, "quota_exhausted", "the project holds its quota; the "
                   "request waits for units to be released", quota_details(quotas, demand_milli))


def quota_details(quotas: Sequence[QuotaFact], demand_milli: int) -> dict:
    return {"quotas": [{"flavour": q.flavour, "limit_milli": q.limit_milli,
                        "used_milli": q.used_milli} for q in quotas],
            "requested_milli": demand_milli}


class Capacity(Rule):
    """Healthy GPUs on schedulable nodes, and what the placement engine said about them."""

    name = "capacity"

    def check(self, facts: AdmissionFacts) -> Verdict:
        capacity = facts.capacity
        if capacity is None or capacity.placement_refusal is None:
            return Verdict.accept()
        return capacity_wait(capacity)


def capacity_wait(capacity: CapacityFact) -> Verdict:
    """Why placement found no room, and which matching GPUs were out of its reach."""
    details = {"usable_gpus": capacity.usable_gpus,
               "quarantined_gpus": capacity.quarantined_gpus,
               "unschedulable_gpus": capacity.unschedulable_gpus,
               "placement": capacity.placement_refusal}
    excluded = []
    if capacity.quarantined_gpus:
        excluded.append(f"{capacity.quarantined_gpus} quarantined")
    if capacity.unschedulable_gpus:
        excluded.append(f"{capacity.unschedulable_gpus} on cordoned, unreachable or "
                        "retired nodes")
    message = capacity.placement_message or "no free units fit the request"
    if excluded:
        message += f" (matching GPUs excluded: {', '.join(excluded)})"
    return Verdict(Outcome.WAIT, "waiting_for_capacity", message, details)


ON_CREATE: tuple[Rule, ...] = (TimeWindow(), MaximumDuration(), Quota())
WHILE_PENDING: tuple[Rule, ...] = (Approval(), *ON_CREATE)


def evaluate(rules: Iterable[Rule], facts: AdmissionFacts) -> list[Verdict]:
    return [rule.check(facts) for rule in rules]


def first(verdicts: Iterable[Verdict], outcome: Outcome) -> Verdict | None:
    return next((v for v in verdicts if v.outcome is outcome), None)


def needs_operator(verdicts: Iterable[Verdict]) -> bool:
    return any(v.code == "no_quota" for v in verdicts)
