"""The MIG instance rule's verdicts on hand-built signals, the XIDs it refuses to judge an
instance on, and the GPU's ECC rule when instances contained the errors."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpufleet.domain.errors import Conflict, InvalidInput
from gpufleet.domain.inventory import GpuHealth
from gpufleet.domain.operations.health import Verdict, decide
from gpufleet.domain.operations.health_rules import (
    APPLICATION_XIDS,
    EccUncorrectedRule,
    GpuSignals,
    Reading,
)
from gpufleet.domain.operations.mig_health import (
    GPU_WIDE_XIDS,
    MigSignals,
    MigXidRule,
    check_mig_clear,
    mig_findings,
)
from gpufleet.settings import Settings

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
WINDOW = timedelta(minutes=10)
HOLD = timedelta(minutes=30)
RULE = MigXidRule()


def on_instance(*codes: int) -> MigSignals:
    return MigSignals("GPU-1", "MIG-a", WINDOW, {c: Reading(1, NOW) for c in codes})


def test_a_contained_xid_94_quarantines_the_instance_it_names():
    (finding,) = mig_findings(RULE, on_instance(94), NOW)
    assert (finding.rule, finding.verdict) == ("mig_xid", Verdict.QUARANTINE)
    assert finding.evidence.line == \
        "XID 94 (contained ECC error) on MIG instance MIG-a: +1 in 10 min"


@pytest.mark.parametrize("code", sorted(APPLICATION_XIDS | GPU_WIDE_XIDS))
def test_application_and_gpu_wide_xids_never_move_an_instance(code):
    """The GPU rules judge GPU-wide codes (they count every series of the GPU)."""
    assert mig_findings(RULE, on_instance(code), NOW) == []


@pytest.mark.parametrize("codes", [{13}, {43, 94}, {79}, {95}])
def test_the_rule_refuses_application_and_gpu_wide_codes(codes):
    with pytest.raises(InvalidInput) as raised:
        MigXidRule(quarantine=frozenset(codes))
    assert raised.value.code == "invalid_health_rule"


@pytest.mark.parametrize("value", [[31], [94, 48], [119]])
def test_the_settings_refuse_them_naming_the_setting(value):
    with pytest.raises(ValidationError, match="health_mig_xid_quarantine"):
        Settings(health_mig_xid_quarantine=value)


STATES = (GpuHealth.HEALTHY, GpuHealth.SUSPECT, GpuHealth.QUARANTINED)


@pytest.mark.parametrize(("state", "struck"), list(itertools.product(STATES, (True, False))),
                         ids=lambda v: v.value if isinstance(v, GpuHealth) else
                         ("XID 94" if v else "quiet"))
def test_every_instance_state_after_an_evaluation(state, struck):
    """healthy/suspect → quarantined on XID 94; a quarantine stays until an operator clears
    it; a rule's suspicion clears itself after the hold."""
    found = mig_findings(RULE, on_instance(94), NOW) if struck else []
    move = decide(state, "mig_xid", NOW - HOLD, found, NOW, HOLD)
    if state is GpuHealth.QUARANTINED:
        assert move is None
    elif struck:
        assert move.to is GpuHealth.QUARANTINED
    elif state is GpuHealth.SUSPECT:
        assert move.to is GpuHealth.HEALTHY
    else:
        assert move is None


def test_clearing_a_healthy_instance_is_a_conflict():
    with pytest.raises(Conflict) as raised:
        check_mig_clear(GpuHealth.HEALTHY, "GPU-1", "MIG-a")
    assert raised.value.code == "mig_instance_already_healthy"
    check_mig_clear(GpuHealth.QUARANTINED, "GPU-1", "MIG-a")


def ecc(increase: float, contained: float) -> GpuSignals:
    return GpuSignals(uuid="GPU-1", window=WINDOW, contained_on_instances=contained,
                      ecc_uncorrected_increase=Reading(increase, NOW))


def test_uncorrectable_errors_instances_contained_mark_the_gpu_suspect_only():
    finding = EccUncorrectedRule().verdict(ecc(1, contained=1), NOW)
    assert finding.verdict is Verdict.SUSPECT
    assert "contained by MIG instances" in finding.evidence.line


@pytest.mark.parametrize(("increase", "contained"), [(1, 0), (2, 1)])
def test_uncorrectable_errors_beyond_what_was_contained_quarantine_the_gpu(increase,
                                                                          contained):
    finding = EccUncorrectedRule().verdict(ecc(increase, contained), NOW)
    assert finding.verdict is Verdict.QUARANTINE
