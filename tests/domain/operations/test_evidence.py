"""Evidence and summaries in the units an operator reads: bytes as GiB, seconds as minutes,
percent with %, bit masks in hex — never raw bytes in exponent notation (8.59e+10)."""

from __future__ import annotations

import pytest

from gpufleet.domain.operations.evidence import evidence_line
from gpufleet.domain.operations.quantities import Quantity, duration, show, significant
from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.domain.operations.rules import render_summary, rule_from_mapping

GIB = 1024**3


@pytest.mark.parametrize(("value", "unit", "shown"), [
    (80 * GIB, "bytes", "80 GiB"), (14_759_608_041, "bytes", "13.7 GiB"),
    (512, "bytes", "512 B"), (1536 * 1024**4, "bytes", "1.5 PiB"),
    (3.2e9, "bytes_per_second", "2.98 GiB/s"), (97.345, "percent", "97.3 %"),
    (91.0, "celsius", "91 °C"), (350.0, "watts", "350 W"), (1.2e6, "joules", "1.2 MJ"),
    (1980.0, "mhz", "1980 MHz"), (0xE8, "flags", "0xe8"), (1.0, "boolean", "1"),
    (79.0, "code", "79"), (1_234_567.0, "count", "1234567"), (2.5, "count", "2.5"),
    (45.0, "seconds", "45 s"), (330.0, "seconds", "6 min"), (0.27, "hours", "16 min"),
    (3.5, "hours", "3.5 h"), (100.0, "hours", "4.2 d"), (8.59e10, None, "85900000000"),
])
def test_values_are_shown_in_their_unit(value, unit, shown):
    assert show(value, unit) == shown


def test_numbers_never_take_exponent_notation():
    assert [significant(v) for v in (8.59e10, 0.000123, 13.746, 100.0)] == \
        ["85900000000", "0.000123", "13.7", "100"]
    assert duration(89) == "89 s" and duration(90 * 60) == "1.5 h"


def rule(**body):
    return rule_from_mapping({"name": "r", "severity": "warning", **body})


def test_a_byte_threshold_reads_in_gib():
    r = rule(kind="threshold", metric="gpu.memory_used_bytes", op=">=", value=75 * GIB)
    assert evidence_line(r, 8.59e10, {}) == "gpu.memory_used_bytes 80 GiB ≥ 75 GiB"


def test_a_ratio_reads_as_a_percentage_of_the_other_metric():
    r = rule(kind="threshold", metric="gpu.memory_used_bytes",
             ratio_to="gpu.memory_total_bytes", op=">=", value=95)
    assert evidence_line(r, 97.345, {}) == \
        "gpu.memory_used_bytes 97.3 % of gpu.memory_total_bytes ≥ 95 %"


def test_bit_masks_stay_hex_and_counters_stay_counts():
    throttled = rule(kind="threshold", metric="gpu.clock_throttle_reasons",
                     op="has_any_bits", value=0xE8)
    assert evidence_line(throttled, 0x48, {}) == "gpu.clock_throttle_reasons 0x48 & 0xe8"
    xid = rule(kind="increase", metric="gpu.xid_errors_total", over="10m")
    assert evidence_line(xid, 2.0, {}) == "gpu.xid_errors_total +2 in 10 min"


def test_silence_and_state_values_read_as_durations_sizes_and_shares():
    stale = rule(kind="absence", absent="agent", after="5m")
    assert evidence_line(stale, 330.0, {}) == "silent for 6 min"
    pending = rule(kind="state", condition="request_pending", after="6h")
    assert evidence_line(pending, 7.5, {}) == "pending for 7.5 h"
    quota = rule(kind="state", condition="quota_nearly_exhausted", value=90)
    assert evidence_line(quota, 96.25, {}) == "96.2 % of the quota held"
    idle = rule(kind="state", condition="idle_allocation")
    assert evidence_line(idle, 0.27, {"state": "idle_held"}) == \
        "idle for 16 min, its memory held"
    zombie = rule(kind="state", condition="zombie_process")
    assert evidence_line(zombie, 2.63 * GIB, {"reason": "binding_ended"}) == \
        "holds 2.63 GiB; the binding of its unit has ended"


def test_unattributed_usage_says_which_fault_it_is():
    r = rule(kind="state", condition="unattributed_usage")
    mismatch = {"kind": "process", "reason": "mismatch", "claimed_allocation": "GR-1277",
                "allocation": "GR-1243"}
    assert evidence_line(r, 14_759_608_041, mismatch) == \
        "a process holding 13.7 GiB claims GR-1277; its unit is held by GR-1243"
    assert evidence_line(r, None, {"kind": "activity", "reason": "unbound"}) == \
        "activity on a unit no allocation holds"


def test_value_in_a_summary_is_shown_in_its_unit_unless_formatted():
    r = rule(kind="threshold", metric="gpu.memory_used_bytes", op=">=", value=75 * GIB,
             summary="{gpu}: {value} ({value:.0f} bytes)")
    assert render_summary(r, {"gpu": "GPU-1"}, 8.59e10) == "GPU-1: 80 GiB (85900000000 bytes)"
    assert f"{Quantity(0.27, 'hours')}" == "16 min"


def test_no_default_rule_prints_exponent_notation():
    """Every default rule's summary and evidence at a large value of its unit."""
    facts = {"gpu": "GPU-1", "node": "n", "kind": "process", "reason": "unbound",
             "pid": "1", "xid": "79", "allocation": "GR-1", "project": "p"}
    for r in default_rules():
        for value in (8.59e10, 0.27, 97.3):
            text = render_summary(r, facts, value) + " " + evidence_line(r, value, facts)
            assert "e+" not in text and "e-" not in text, (r.name, text)
