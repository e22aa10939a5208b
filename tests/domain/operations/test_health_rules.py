"""Each health rule's verdict on hand-built signals: what it finds, what it never finds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.health import Verdict
from gpufleet.domain.operations.health_rules import (
    APPLICATION_XIDS,
    EccUncorrectedRule,
    GpuSignals,
    HealthThresholds,
    MissingFromInventoryRule,
    NvlinkErrorRateRule,
    Reading,
    RowRemapFailureRule,
    RowRemapPendingRule,
    SlowdownRule,
    XidRule,
    default_pack,
    findings,
)

NOW = datetime(2026, 11, 25, 12, tzinfo=UTC)
WINDOW = timedelta(minutes=10)
T = HealthThresholds()
XIDS = XidRule(T.xid_quarantine, T.xid_suspect)


def signals(**fields) -> GpuSignals:
    return GpuSignals(uuid="GPU-1", window=WINDOW, **fields)


def xid(*codes: int) -> GpuSignals:
    return signals(xid_increases={c: Reading(1, NOW) for c in codes})


def verdict(rule, s: GpuSignals):
    found = rule.verdict(s, NOW)
    return None if found is None else found.verdict


@pytest.mark.parametrize(("code", "expected"), [
    (48, Verdict.QUARANTINE), (64, Verdict.QUARANTINE), (74, Verdict.QUARANTINE),
    (79, Verdict.QUARANTINE), (95, Verdict.QUARANTINE), (119, Verdict.QUARANTINE),
    (120, Verdict.QUARANTINE), (63, Verdict.SUSPECT), (94, Verdict.SUSPECT),
    (13, None), (31, None), (43, None), (45, None), (8, None)])
def test_xids_by_severity(code, expected):
    assert verdict(XIDS, xid(code)) is expected


def test_xid_evidence_names_the_code_and_its_meaning():
    found = XIDS.verdict(xid(79), NOW)
    assert found.rule == "xid" and found.evidence.metric == "gpu.xid_errors_total"
    assert found.evidence.line == "XID 79 (GPU has fallen off the bus): +1 in 10 min"


def test_a_quarantine_xid_wins_over_a_suspect_one_seen_with_it():
    assert verdict(XIDS, xid(63, 79)) is Verdict.QUARANTINE


@pytest.mark.parametrize("code", sorted(APPLICATION_XIDS))
def test_application_xids_never_quarantine_even_when_configured(code):
    with pytest.raises(InvalidInput, match="application error"):
        XidRule(frozenset({code, 79}), frozenset())
    with pytest.raises(InvalidInput):
        XidRule(frozenset({79}), frozenset({code}))
    assert verdict(XIDS, xid(code)) is None


def test_an_xid_that_did_not_rise_is_no_finding():
    assert verdict(XIDS, signals(xid_increases={79: Reading(0, NOW)})) is None


def test_uncorrected_ecc_is_judged_by_its_increase_not_its_total():
    rule = EccUncorrectedRule(min_increase=2)
    assert verdict(rule, signals()) is None
    assert verdict(rule, signals(ecc_uncorrected_increase=Reading(1, NOW))) is None
    assert verdict(rule, signals(ecc_uncorrected_increase=Reading(2, NOW))) \
        is Verdict.QUARANTINE


def test_row_remapping_failure_quarantines_and_pending_marks_suspect():
    failed, pending = RowRemapFailureRule(), RowRemapPendingRule()
    assert verdict(failed, signals(remap_failed=Reading(1, NOW))) is Verdict.QUARANTINE
    assert verdict(failed, signals(remap_failed=Reading(0, NOW))) is None
    assert verdict(pending, signals(remap_pending=Reading(1, NOW))) is Verdict.SUSPECT
    assert verdict(pending, signals(remap_pending=Reading(0, NOW))) is None


def test_nvlink_errors_are_a_rate_over_the_window():
    rule = NvlinkErrorRateRule(suspect_per_s=0.01, quarantine_per_s=1.0)
    # 5 errors in 10 min is 0.0083/s: a long-lived link's background, not a fault
    assert verdict(rule, signals(nvlink_errors_increase=Reading(5, NOW))) is None
    assert verdict(rule, signals(nvlink_errors_increase=Reading(6, NOW))) is Verdict.SUSPECT
    assert verdict(rule, signals(nvlink_errors_increase=Reading(600, NOW))) \
        is Verdict.QUARANTINE
    # the same count over a window ten times as long is ten times the rate lower
    slow = GpuSignals(uuid="GPU-1", window=10 * WINDOW,
                      nvlink_errors_increase=Reading(6, NOW))
    assert verdict(rule, slow) is None


def test_a_slowdown_must_be_sustained():
    rule = SlowdownRule("thermal_slowdown", "thermal", "thermal_share", 0.9,
                        timedelta(minutes=10))
    hot = Reading(1.0, NOW)
    assert verdict(rule, signals(thermal_share=hot, throttle_span=WINDOW)) is Verdict.SUSPECT
    assert verdict(rule, signals(thermal_share=hot, throttle_span=WINDOW / 2)) is None
    assert verdict(rule, signals(thermal_share=Reading(0.8, NOW),
                                 throttle_span=WINDOW)) is None
    assert verdict(rule, signals(power_share=hot, throttle_span=WINDOW)) is None


def test_a_missing_gpu_is_suspect_then_quarantined():
    rule = MissingFromInventoryRule(timedelta(minutes=30))
    assert verdict(rule, signals()) is None
    assert verdict(rule, signals(missing_since=NOW - timedelta(minutes=5))) is Verdict.SUSPECT
    assert verdict(rule, signals(missing_since=NOW - timedelta(minutes=30))) \
        is Verdict.QUARANTINE
    never = MissingFromInventoryRule(None)
    assert verdict(never, signals(missing_since=NOW - timedelta(days=3))) is Verdict.SUSPECT


def test_the_default_pack_finds_nothing_on_a_quiet_gpu_and_everything_on_a_sick_one():
    pack = default_pack()
    assert findings(pack, signals(), NOW) == []
    sick = signals(xid_increases={79: Reading(1, NOW)},
                   ecc_uncorrected_increase=Reading(3, NOW),
                   remap_pending=Reading(1, NOW), thermal_share=Reading(1, NOW),
                   throttle_span=WINDOW)
    found = findings(pack, sick, NOW)
    assert [f.rule for f in found] == ["xid", "ecc_uncorrected", "row_remap_pending",
                                       "thermal_slowdown"]
    assert found[0].verdict is Verdict.QUARANTINE
