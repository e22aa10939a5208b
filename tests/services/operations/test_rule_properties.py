"""Property: a threshold or increase rule observes a series iff its condition holds at
now, on the store's own data (docs/operations.md, "Alert rules").

Each example writes random minute histories of a few GPUs into a real embedded (DuckDB)
store — at most one sample a minute, some minutes missing, some series silent in the
window — rolls some of it up or none, and evaluates a random rule at a minute boundary.
The expected observations are the definition applied to the same samples in Python:
`last` is the newest sample in [now − over, now), `mean` the mean of those samples,
`increase` the rise of the counter over the window's samples.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.clock import ManualClock
from gpufleet.domain.operations.rules import Op, rule_from_mapping
from gpufleet.services.operations.rule_evaluation import evaluate
from gpufleet.services.telemetry.queries import TelemetryQueries
from gpufleet.services.telemetry.store import open_telemetry_store
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import Sample, series

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
HISTORY_MIN = 12
GPUS = 3
OPS = [Op.GT, Op.GE, Op.LT, Op.LE]


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    store = StateStore(f"sqlite:///{tmp_path_factory.mktemp('state') / 'state.db'}")
    store.migrate()
    yield store
    store.dispose()


# One GPU's history: per minute back from now, a value or None (no sample that minute).
histories = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 20)),
                              min_size=HISTORY_MIN, max_size=HISTORY_MIN),
                     min_size=GPUS, max_size=GPUS)


def _write(store, metric: str, values: list[list[int | None]], seconds: list[int]) -> None:
    store.write([Sample(series(metric, f"GPU-{g}", node="n1", environment="e1",
                               model="H100-80GB"),
                        NOW - timedelta(minutes=HISTORY_MIN - m) + timedelta(seconds=s), v)
                 for g, history in enumerate(values)
                 for m, (v, s) in enumerate(zip(history, seconds, strict=True))
                 if v is not None])


def _in_window(history: list[int | None], over_min: int) -> list[int]:
    return [v for v in history[HISTORY_MIN - over_min:] if v is not None]


def _queries(state, store) -> TelemetryQueries:
    return TelemetryQueries(state, lambda: store, Settings(data_dir="/nonexistent"),
                            ManualClock(NOW))


def _observed(state, store, rule) -> dict[str, float]:
    result = evaluate(_queries(state, store), [rule], NOW)
    assert result.evaluated == [rule.name], result.unavailable
    return {o.labels["gpu"]: o.value for o in result.observations}


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=histories, over_min=st.integers(1, 6), op=st.sampled_from(OPS),
       threshold=st.integers(0, 20), over_time=st.sampled_from(["last", "mean"]),
       rolled=st.integers(0, HISTORY_MIN),
       seconds=st.lists(st.integers(0, 59), min_size=HISTORY_MIN, max_size=HISTORY_MIN))
def test_threshold_observes_iff_the_condition_holds(state, values, over_min, op, threshold,
                                                    over_time, rolled, seconds):
    # Thresholds between integers, off every mean of ≤ 6 integers: no ties to argue over.
    limit = threshold + 1 / 7
    store = open_telemetry_store(Settings(data_dir="/nonexistent"), in_memory=True)
    try:
        _write(store, "gpu.temperature_celsius", values, seconds)
        store.rollup(NOW - timedelta(minutes=rolled))  # some minutes rolled up, or none
        rule = rule_from_mapping({"name": "r", "kind": "threshold", "op": op.value,
                                  "metric": "gpu.temperature_celsius", "value": limit,
                                  "over": f"{over_min}m", "over_time": over_time})
        expected = {}
        for g, history in enumerate(values):
            seen = _in_window(history, over_min)
            if not seen:
                continue
            value = seen[-1] if over_time == "last" else sum(seen) / len(seen)
            if op.holds(value, limit):
                expected[f"GPU-{g}"] = pytest.approx(value)
        assert _observed(state, store, rule) == expected
    finally:
        store.close()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=histories, over_min=st.integers(2, 6), at_least=st.integers(1, 5),
       rolled=st.integers(0, HISTORY_MIN),
       seconds=st.lists(st.integers(0, 59), min_size=HISTORY_MIN, max_size=HISTORY_MIN))
def test_increase_observes_iff_the_counter_rose_enough(state, steps, over_min, at_least,
                                                       rolled, seconds):
    # A counter per GPU: each present minute adds its step (0–20) to the running total.
    counters = []
    for history in steps:
        total, counter = 0, []
        for step in history:
            if step is not None:
                total += step % 3  # small steps: rises near the threshold are common
            counter.append(None if step is None else total)
        counters.append(counter)
    store = open_telemetry_store(Settings(data_dir="/nonexistent"), in_memory=True)
    try:
        _write(store, "gpu.ecc_uncorrected_errors_total", counters, seconds)
        store.rollup(NOW - timedelta(minutes=rolled))
        rule = rule_from_mapping({"name": "r", "kind": "increase", "value": at_least,
                                  "metric": "gpu.ecc_uncorrected_errors_total",
                                  "over": f"{over_min}m"})
        expected = {}
        for g, counter in enumerate(counters):
            seen = _in_window(counter, over_min)
            if seen and seen[-1] - seen[0] >= at_least:
                expected[f"GPU-{g}"] = pytest.approx(seen[-1] - seen[0])
        assert _observed(state, store, rule) == expected
    finally:
        store.close()
