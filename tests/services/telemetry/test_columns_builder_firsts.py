"""`ColumnsBuilder.firsts` answers as `one` called for each sample in turn: the same
columns, series order and drop counts, whether its numpy fast path is taken or not."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.telemetry.catalogue import metric
from gpufleet.services.telemetry.batch_columns import ColumnsBuilder, TimeWindow, range_of
from gpufleet.tsdb import series

METRICS = [metric(name) for name in ("gpu.utilization", "gpu.temperature_celsius",
                                     "gpu.memory_used_bytes")]
GPUS = ["GPU-a", "GPU-b", "GPU-c"]
SAMPLES = st.lists(st.tuples(
    st.sampled_from(METRICS), st.sampled_from(GPUS),
    st.integers(min_value=0, max_value=20),
    st.one_of(st.floats(min_value=-10, max_value=120), st.sampled_from(
        [math.nan, math.inf, -math.inf, 100.0, 0.0, -273.15, 1e300]))),
    max_size=30)
WINDOWS = st.one_of(st.none(), st.just(TimeWindow(0, 20)), st.just(TimeWindow(5, 15)))


def result(builder: ColumnsBuilder):
    columns = builder.result()
    return (list(columns.series), list(columns.series_index), list(columns.times_ms),
            list(columns.values), dict(builder.dropped))


@given(SAMPLES, WINDOWS, st.booleans())
def test_firsts_is_one_for_each_sample(samples, window, seen_before):
    one, together = ColumnsBuilder(), ColumnsBuilder()
    if seen_before:  # a series already in the columns takes the per-sample path
        for builder in (one, together):
            builder.one(series(METRICS[0].name, GPUS[0]), METRICS[0], 7, 1.0, None)
    labels = [series(m.name, gpu) for m, gpu, _, _ in samples]
    for (m, _, t, v), series_labels in zip(samples, labels, strict=True):
        one.one(series_labels, m, t, v, window)
    together.firsts(labels, [range_of(m) for m, _, _, _ in samples],
                    [t for _, _, t, _ in samples], [v for _, _, _, v in samples], window)
    assert result(together) == result(one)
