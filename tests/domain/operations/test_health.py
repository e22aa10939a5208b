"""The health state machine: every (state, findings) pair, named, and the clear refusal."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.errors import Conflict
from gpufleet.domain.inventory import GpuHealth
from gpufleet.domain.operations.health import (
    Evidence,
    Finding,
    Move,
    Verdict,
    check_clear,
    check_retire,
    decide,
    worst,
)

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
HOLD = timedelta(minutes=30)


def finding(verdict: Verdict, rule: str = "xid") -> Finding:
    return Finding(rule, verdict, Evidence("gpu.xid_errors_total", 1, NOW, "XID 79"))


FINDINGS = {"nothing": [], "suspect": [finding(Verdict.SUSPECT, "nvlink_errors")],
            "quarantine": [finding(Verdict.QUARANTINE)],
            "both": [finding(Verdict.SUSPECT, "nvlink_errors"), finding(Verdict.QUARANTINE)]}
# (state, findings) → the state it moves to (None: stays), a rule having made it suspect
# longer ago than the hold.
EXPECTED = {
    ("healthy", "nothing"): None,
    ("healthy", "suspect"): "suspect",
    ("healthy", "quarantine"): "quarantined",
    ("healthy", "both"): "quarantined",
    ("suspect", "nothing"): "healthy",
    ("suspect", "suspect"): None,
    ("suspect", "quarantine"): "quarantined",
    ("suspect", "both"): "quarantined",
    ("quarantined", "nothing"): None,  # only an operator clears a quarantine
    ("quarantined", "suspect"): None,
    ("quarantined", "quarantine"): None,
    ("quarantined", "both"): None,
}
CASES = [pytest.param(state, name, id=f"{state} + {name}")
         for state, name in itertools.product(("healthy", "suspect", "quarantined"), FINDINGS)]


@pytest.mark.parametrize(("state", "name"), CASES)
def test_every_transition(state, name):
    move = decide(GpuHealth(state), "thermal_slowdown", NOW - 2 * HOLD, FINDINGS[name], NOW,
                  HOLD)
    expected = EXPECTED[(state, name)]
    assert (move.to.value if move else None) == expected
    if move is not None and move.to is not GpuHealth.HEALTHY:
        assert move.finding is worst(FINDINGS[name])


def test_a_quarantine_finding_outranks_a_suspect_one_whatever_the_order():
    both = FINDINGS["both"]
    assert worst(both).verdict is Verdict.QUARANTINE
    assert worst(list(reversed(both))).verdict is Verdict.QUARANTINE


def test_suspicion_clears_itself_only_after_the_hold():
    early = decide(GpuHealth.SUSPECT, "thermal_slowdown", NOW - HOLD / 2, [], NOW, HOLD)
    late = decide(GpuHealth.SUSPECT, "thermal_slowdown", NOW - HOLD, [], NOW, HOLD)
    assert early is None
    assert late == Move(GpuHealth.HEALTHY, None)


def test_suspicion_no_rule_raised_is_not_the_evaluators_to_clear():
    """Registration's 'missing from its node's inventory', or an operator's mark."""
    assert decide(GpuHealth.SUSPECT, None, NOW - 10 * HOLD, [], NOW, HOLD) is None


def test_clearing_a_healthy_gpu_is_a_conflict_naming_the_state():
    with pytest.raises(Conflict) as refused:
        check_clear(GpuHealth.HEALTHY, "GPU-1")
    assert refused.value.code == "gpu_already_healthy"
    assert "healthy" in refused.value.message
    check_clear(GpuHealth.SUSPECT, "GPU-1")
    check_clear(GpuHealth.QUARANTINED, "GPU-1")


@pytest.mark.parametrize("state", ["healthy", "suspect", "retired"])
def test_only_a_quarantined_gpu_retires(state):
    with pytest.raises(Conflict) as refused:
        check_retire(GpuHealth(state), "GPU-1")
    assert refused.value.code == "gpu_not_quarantined" and state in refused.value.message
    check_retire(GpuHealth.QUARANTINED, "GPU-1")


def test_a_retired_gpu_is_never_cleared_nor_moved():
    with pytest.raises(Conflict) as refused:
        check_clear(GpuHealth.RETIRED, "GPU-1")
    assert refused.value.code == "gpu_retired"
    for name in FINDINGS:
        assert decide(GpuHealth.RETIRED, None, None, FINDINGS[name], NOW, HOLD) is None
