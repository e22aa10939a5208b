"""Each admission rule on its own: the verdict and reason code it gives for given facts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.admission import (
    AdmissionFacts,
    Approval,
    Capacity,
    CapacityFact,
    MaximumDuration,
    Outcome,
    Quota,
    QuotaFact,
    TimeWindow,
    needs_operator,
)

NOW = datetime(2026, 11, 21, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def facts(**changes) -> AdmissionFacts:
    base = dict(now=NOW, demand_milli=2000, starts_at=None, ends_at=None,
                max_duration=timedelta(days=90))
    return AdmissionFacts(**{**base, **changes})


CASES = {
    "open-ended now": (TimeWindow(), {}, Outcome.ACCEPT, "ok"),
    "end before start": (TimeWindow(), dict(starts_at=NOW + 2 * HOUR, ends_at=NOW + HOUR),
                         Outcome.REJECT, "end_before_start"),
    "end passed": (TimeWindow(), dict(starts_at=NOW - 2 * HOUR, ends_at=NOW - HOUR),
                   Outcome.REJECT, "end_in_past"),
    "reservation": (TimeWindow(), dict(starts_at=NOW + HOUR), Outcome.WAIT,
                    "waiting_for_start"),
    "within duration": (MaximumDuration(), dict(ends_at=NOW + 24 * HOUR), Outcome.ACCEPT, "ok"),
    "too long": (MaximumDuration(), dict(ends_at=NOW + timedelta(days=91)), Outcome.REJECT,
                 "duration_too_long"),
    "no quotas asked": (Quota(), {}, Outcome.ACCEPT, "ok"),
    "a flavour without quota": (Quota(), dict(quotas=[QuotaFact("A", None, 0),
                                                      QuotaFact("B", 1000, 1000)]),
                                Outcome.ACCEPT, "no_quota"),
    "larger than every quota": (Quota(), dict(quotas=[QuotaFact("A", 1000, 0)]),
                                Outcome.REJECT, "quota_exceeded"),
    "quota held": (Quota(), dict(quotas=[QuotaFact("A", 3000, 2000)]), Outcome.WAIT,
                   "quota_exhausted"),
    "one flavour has room": (Quota(), dict(quotas=[QuotaFact("A", 3000, 2000),
                                                   QuotaFact("B", 4000, 2000)]),
                             Outcome.ACCEPT, "ok"),
    "placed": (Capacity(), dict(capacity=CapacityFact(usable_gpus=8)), Outcome.ACCEPT, "ok"),
    "no room": (Capacity(), dict(capacity=CapacityFact(
        usable_gpus=8, quarantined_gpus=1, placement_refusal="no_capacity")),
                Outcome.WAIT, "waiting_for_capacity"),
    "decided": (Approval(), {}, Outcome.ACCEPT, "ok"),
    "pending": (Approval(), dict(awaiting_approval=True), Outcome.WAIT, "awaiting_approval"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_rule_verdicts(case):
    rule, changes, outcome, code = CASES[case]
    verdict = rule.check(facts(**changes))
    assert (verdict.outcome, verdict.code) == (outcome, code)


def test_capacity_names_what_was_excluded():
    verdict = Capacity().check(facts(capacity=CapacityFact(
        usable_gpus=6, quarantined_gpus=1, unschedulable_gpus=8,
        placement_refusal="no_capacity", placement_message="no node has room")))
    assert verdict.message == ("no node has room (matching GPUs excluded: 1 quarantined, 8 on "
                               "cordoned, unreachable or retired nodes)")


def test_an_unquoted_flavour_needs_an_operator():
    verdicts = [Quota().check(facts(quotas=[QuotaFact("A", None, 0)]))]
    assert needs_operator(verdicts)
    assert "no quota" in Approval().check(facts(awaiting_approval=True,
                                                 needs_operator=True)).message
