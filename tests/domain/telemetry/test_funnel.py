"""The funnel and idleness definitions of docs/design.md, "Funnel and activity", on per-minute
values."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.durations import (
    EARLIEST_TIME,
    LATEST_TIME,
    MAX_DURATION,
    check_time,
    parse_duration,
)
from gpufleet.domain.telemetry.funnel import (
    ActivitySource,
    BindingState,
    ClaimMatch,
    Funnel,
    IdleState,
    Thresholds,
    ZombieReason,
    architecture_of_model,
    check_claim,
    choose_activity_source,
    classify_minute,
    idle_verdict,
    idle_verdict_from_minutes,
    is_unattributed,
    unit_activity,
    zombie_reason,
)
from gpufleet.domain.telemetry.vocabulary import Architecture

T = Thresholds()
GIB = 1024**3


AMPERE, HOPPER = Architecture.AMPERE, Architecture.HOPPER
PROCESSES = {"gpu.memory_used_bytes", "process.memory_used_bytes"}


@pytest.mark.parametrize(("metrics", "is_mig", "arch", "source"), [
    ({"gpu.gr_engine_active", "gpu.utilization"}, False, None, ActivitySource.GR_ENGINE),
    ({"gpu.utilization"}, False, None, ActivitySource.UTILIZATION),
    ({"gpu.utilization"}, True, AMPERE, ActivitySource.UNKNOWN),
    ({"gpu.gr_engine_active"}, True, HOPPER, ActivitySource.GR_ENGINE),
    (PROCESSES, True, AMPERE, ActivitySource.PROCESSES),
    (PROCESSES, True, None, ActivitySource.PROCESSES),
    ({"gpu.memory_used_bytes"}, True, AMPERE, ActivitySource.PROCESSES),  # none running
    ({"process.memory_used_bytes"}, True, AMPERE, ActivitySource.UNKNOWN),  # not reporting
    (PROCESSES, True, HOPPER, ActivitySource.UNKNOWN),  # Hopper has gr_engine through GPM
    (PROCESSES, False, None, ActivitySource.UNKNOWN),
    (set(), False, None, ActivitySource.UNKNOWN),
])
def test_activity_source_is_the_best_signal_the_unit_has(metrics, is_mig, arch, source):
    assert choose_activity_source(metrics, is_mig=is_mig, architecture=arch) is source


@pytest.mark.parametrize(("latest", "running", "is_mig", "arch", "expected"), [
    ({"gpu.gr_engine_active": 40.0, "gpu.utilization": 90.0}, False, False, HOPPER,
     (40.0, ActivitySource.GR_ENGINE)),
    ({"gpu.utilization": 90.0}, False, False, AMPERE, (90.0, ActivitySource.UTILIZATION)),
    ({"gpu.memory_used_bytes": 1.0}, True, True, AMPERE, (100.0, ActivitySource.PROCESSES)),
    ({"gpu.memory_used_bytes": 1.0}, False, True, AMPERE, (0.0, ActivitySource.PROCESSES)),
    ({"gpu.memory_used_bytes": 1.0}, True, True, HOPPER, (None, ActivitySource.UNKNOWN)),
])
def test_unit_activity(latest, running, is_mig, arch, expected):
    assert unit_activity(latest, process_running=running, is_mig=is_mig,
                         architecture=arch) == expected


def test_architecture_of_model():
    assert architecture_of_model("A100-80GB") is Architecture.AMPERE
    assert architecture_of_model("H100-80GB") is Architecture.HOPPER
    assert architecture_of_model("NVIDIA Mystery 9000") is None


@pytest.mark.parametrize(("activity", "sm", "known", "active", "effective"), [
    (None, 90.0, False, False, False),  # unknown is never active, whatever sm says
    (4.99, None, True, False, False),
    (5.0, None, True, True, False),
    (80.0, 49.9, True, True, False),
    (80.0, 50.0, True, True, True),
    (3.0, 60.0, True, False, False),  # effective needs active too
])
def test_classify_minute(activity, sm, known, active, effective):
    verdict = classify_minute(activity, sm, T)
    assert (verdict.known, verdict.active, verdict.effective) == (known, active, effective)


def test_funnel_counts_gpu_hours_by_weight():
    f = Funnel(total_gpu_hours=2.0)
    for _ in range(60):
        f.add_minute(1.0, 80.0, 60.0, T)  # one effective GPU-hour
        f.add_minute(0.5, None, None, T)  # half a GPU, unknown: allocated only
    assert f.allocated_gpu_hours == pytest.approx(1.5)
    assert f.active_gpu_hours == pytest.approx(1.0)
    assert f.effective_gpu_hours == pytest.approx(1.0)
    assert f.unknown_gpu_hours == pytest.approx(0.5)
    assert f.efficiency_percent == pytest.approx(100 * 0.6 / 1.5)
    assert Funnel().efficiency_percent is None


minute = st.tuples(st.none() | st.floats(0, 100), st.none() | st.floats(0, 100))


@given(units=st.lists(st.tuples(st.sampled_from([1.0, 0.5, 1 / 7, 0.25]),
                                st.lists(st.none() | minute, min_size=1, max_size=90)),
                      min_size=0, max_size=8))
def test_funnel_total_allocated_active_effective_never_grow(units):
    """total ≥ allocated ≥ active ≥ effective, for any minutes of any units (each unit a
    GPU of its own, so its weight is at most the GPU it sits on)."""
    window_minutes = max((len(m) for _, m in units), default=1)
    f = Funnel(total_gpu_hours=len(units) * window_minutes / 60)
    for weight, minutes in units:
        for value in minutes:
            if value is not None:  # None: not allocated in that minute
                f.add_minute(weight, value[0], value[1], T)
    eps = 1e-9
    assert f.total_gpu_hours + eps >= f.allocated_gpu_hours
    assert f.allocated_gpu_hours + eps >= f.active_gpu_hours
    assert f.active_gpu_hours + eps >= f.effective_gpu_hours
    assert f.allocated_gpu_hours + eps >= f.active_gpu_hours + f.unknown_gpu_hours
    if f.efficiency_percent is not None:
        assert 0 <= f.efficiency_percent <= 100 + eps


@given(st.lists(st.none() | st.floats(0, 100), min_size=1, max_size=300))
def test_unknown_is_never_idle_nor_active(activity):
    state = idle_verdict_from_minutes(activity, bound_minutes=len(activity),
                                      memory_used_bytes=0, t=T)
    known = [a for a in activity if a is not None]
    if any(a >= T.activity_percent for a in known):
        assert state is IdleState.ACTIVE
    elif len(known) < 0.9 * len(activity):
        assert state is IdleState.UNKNOWN
    else:
        assert state is IdleState.IDLE


@pytest.mark.parametrize(("bound", "known", "active", "memory", "state"), [
    (240, 240, 0, 0, IdleState.IDLE),
    (240, 240, 0, GIB, IdleState.IDLE_HELD),
    (240, 240, 0, None, IdleState.IDLE),
    (240, 240, 1, GIB, IdleState.ACTIVE),
    (239, 239, 0, GIB, IdleState.TOO_NEW),
    (240, 200, 0, GIB, IdleState.UNKNOWN),
    (240, 216, 0, 0, IdleState.IDLE),  # 90 % known is enough
])
def test_idle_verdict(bound, known, active, memory, state):
    assert idle_verdict(window_minutes=240, bound_minutes=bound, known_minutes=known,
                        active_minutes=active, memory_used_bytes=memory, t=T) is state


@pytest.mark.parametrize(("memory", "binding", "seen", "sm_known", "busy", "reason"), [
    (GIB, BindingState.NEVER, 1, 0, 0, ZombieReason.NO_BINDING),
    (GIB, BindingState.ENDED, 1, 0, 0, ZombieReason.BINDING_ENDED),
    (GIB, BindingState.BOUND, 240, 240, 0, ZombieReason.NO_SM_ACTIVITY),
    (GIB, BindingState.BOUND, 240, 240, 1, None),
    (GIB, BindingState.BOUND, 100, 100, 0, None),  # too young to judge
    (GIB, BindingState.BOUND, 240, 0, 0, None),  # its own activity unknown
    (0, BindingState.NEVER, 240, 240, 0, None),  # holds no memory
])
def test_zombie_reason(memory, binding, seen, sm_known, busy, reason):
    assert zombie_reason(memory_used_bytes=memory, binding=binding, window_minutes=240,
                         seen_minutes=seen, sm_known_minutes=sm_known,
                         sm_busy_minutes=busy) is reason


def test_claims_are_checked_against_the_binding():
    assert check_claim("GR-1", ["GR-1", "GR-2"]) is ClaimMatch.MATCHES
    assert check_claim("GR-9", ["GR-1"]) is ClaimMatch.MISMATCH
    assert check_claim(None, ["GR-1"]) is ClaimMatch.NO_CLAIM
    assert check_claim("GR-1", []) is ClaimMatch.UNBOUND
    assert [is_unattributed(m) for m in ClaimMatch] == [False, True, False, True]


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90), ("30m", 1800), ("6h", 21600), ("7d", 604800), ("1h30m", 5400),
    ("2w", 1209600), ("0.5h", 1800), (" 6H ", 21600)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "6", "h", "-1h", "0m", "6 hours", "1h 30m", "1y",
                                  "99999999999999999999d", "3000000w", "36501d", "9" * 400 + "s"])
def test_bad_durations_are_refused_with_their_name(text):
    with pytest.raises(InvalidInput) as raised:
        parse_duration(text, name="since")
    assert raised.value.code == "invalid_duration"
    assert raised.value.details["since"] == text


def test_the_longest_duration_is_accepted():
    assert parse_duration("36500d") == MAX_DURATION


@pytest.mark.parametrize(("at", "code"), [
    (datetime(1, 1, 1, tzinfo=UTC), "time_out_of_range"),
    (datetime(1969, 12, 31, 23, 59, tzinfo=UTC), "time_out_of_range"),
    (datetime(9999, 12, 31, tzinfo=UTC), "time_out_of_range"),
    (datetime(2026, 11, 2, 9, 0), "naive_time")])
def test_times_outside_the_accepted_range_are_refused(at, code):
    with pytest.raises(InvalidInput) as raised:
        check_time(at, name="end")
    assert raised.value.code == code



def test_any_accepted_time_plus_or_minus_any_accepted_duration_is_a_time():
    assert check_time(EARLIEST_TIME, name="end") - MAX_DURATION < EARLIEST_TIME
    latest = LATEST_TIME - timedelta(microseconds=1)
    assert check_time(latest, name="end") + MAX_DURATION > LATEST_TIME

