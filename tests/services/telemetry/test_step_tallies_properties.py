"""The embedded store's `step_tallies` (the funnel's trend, docs/telemetry-queries.md):
each step's counts equal `tallies` asked over that step alone, on the random minute
histories and bindings of test_masks_properties."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.tsdb.masks import SpanColumns, steps_fit_hours
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, to_ms
from tests.services.telemetry.test_masks_properties import (  # noqa: F401 (a fixture)
    HOUR0,
    PHASES,
    T,
    fresh_store,
    histories,
    spans,
    write,
)

STEPS_MIN = (1, 5, 15, 30, 60, 120, 180)


def test_steps_that_fit_the_hours():
    assert all(steps_fit_hours(m * MINUTE_MS) for m in STEPS_MIN)
    assert not any(steps_fit_hours(m * MINUTE_MS) for m in (7, 45, 90))
    assert not steps_fit_hours(HOUR_MS + 1)


@settings(max_examples=30, derandomize=True, deadline=None, phases=PHASES,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_each_step_counts_what_tallies_over_it_count(fresh_store, data):  # noqa: F811
    history = data.draw(histories(), label="history")
    store = fresh_store()
    write(store, history)
    masks = store.minute_masks(T)
    first, end = history.start_minute, history.start_minute + history.length
    store.rollup(HOUR0 + timedelta(minutes=end + 1, seconds=5))
    done = masks.refresh()
    chosen = SpanColumns.of(data.draw(spans(history), label="bindings"))
    edge = st.integers((first - 5) * 60_000, (end + 5) * 60_000).map(lambda x: to_ms(HOUR0) + x)
    lo, hi = sorted(data.draw(st.lists(edge, min_size=2, max_size=2), label="window"))
    step_ms = data.draw(st.sampled_from(STEPS_MIN), label="step minutes") * MINUTE_MS

    got = masks.step_tallies(chosen, lo, hi, done, step_ms)
    at = lo // step_ms * step_ms
    while at < hi:
        alone = masks.tallies(chosen, max(lo, at), min(hi, at + step_ms), done)
        for group in {g for g, _ in got} | set(alone):
            mine, want = got.get((group, at)), alone.get(group)
            for field in ("active", "effective", "known"):
                assert (getattr(mine, field) if mine else 0.0) == \
                    pytest.approx(getattr(want, field) if want else 0.0), (at, group, field)
        at += step_ms
    assert all(lo // step_ms * step_ms <= a < hi for _, a in got)
