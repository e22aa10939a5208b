"""The funnel's minute masks (tsdb/duckdb_masks.py) on a real DuckDB store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.masks import MaskStore, RecordedInEngine, SlotSpan
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, SampleColumns, to_ms

T0 = datetime(2026, 11, 2, tzinfo=UTC)


@pytest.fixture
def duck():
    store = DuckDBTelemetryStore(":memory:", threads=1, apply_interval_s=None)
    yield store
    store.close()


def minutes_of(store, labels, first: int, count: int, value: float) -> None:
    store.write([Sample(labels, T0 + timedelta(minutes=m, seconds=30), value)
                 for m in range(first, first + count)])


def test_the_duckdb_store_answers_the_mask_questions(duck):
    assert isinstance(duck, MaskStore)
    # its own masks: refreshed each upkeep round, nothing to record in an engine
    assert not isinstance(duck.minute_masks(Thresholds()), RecordedInEngine)


def test_a_series_that_changes_model_is_judged_by_its_new_role(duck):
    """A MIG instance's memory says nothing of a Hopper instance's activity, but stands for
    an Ampere one's: when the store relabels the series (same id, new model), the masks
    take the new role for the minutes after."""
    def memory(model: str):
        return series("gpu.memory_used_bytes", "GPU-1", "MIG-1", node="n", environment="e",
                      model=model)
    masks = duck.minute_masks(Thresholds())
    minutes_of(duck, memory("H100-80GB"), 0, 60, 1.0)
    duck.rollup(T0 + timedelta(hours=1))
    masks.refresh()
    minutes_of(duck, memory("A100-80GB"), 60, 60, 1.0)
    duck.rollup(T0 + timedelta(hours=2))
    done = masks.refresh()
    span = SlotSpan(("GPU-1", "MIG-1"), to_ms(T0), to_ms(T0) + 2 * HOUR_MS, 0, 1.0)
    tally = masks.tallies([span], span.lo_ms, span.hi_ms, done)[0]
    assert tally.known == 60  # the Ampere hour; the Hopper hour stays unknown


def test_a_series_first_seen_between_questions_is_counted_once_its_row_is_applied(duck):
    """The masks re-read the series table only when the store has committed series rows
    since: a GPU whose upload is journalled (known to the store's dictionary, not yet in
    its table) during a question must still be counted once the applier writes it."""
    gr = series("gpu.gr_engine_active", "GPU-1", node="n", environment="e", model="H100-80GB")
    new = series("gpu.gr_engine_active", "GPU-2", node="n", environment="e", model="H100-80GB")
    masks = duck.minute_masks(Thresholds())
    minutes_of(duck, gr, 0, 60, 50.0)
    duck.rollup(T0 + timedelta(hours=1))
    masks.refresh()
    t0 = to_ms(T0) + HOUR_MS
    duck.write_columns([("upload-1", SampleColumns(
        [new], [0] * 60, [t0 + m * MINUTE_MS + 30_000 for m in range(60)], [50.0] * 60))])
    masks.refresh()  # the new series is journalled: in the dictionary, not in the table
    duck.rollup(T0 + timedelta(hours=2))  # applies the journal, then rolls up
    done = masks.refresh()
    spans = [SlotSpan(("GPU-1", None), to_ms(T0), t0 + HOUR_MS, 0, 1.0),
             SlotSpan(("GPU-2", None), t0, t0 + HOUR_MS, 1, 1.0)]
    tallies = masks.tallies(spans, to_ms(T0), t0 + HOUR_MS, done)
    assert (tallies[0].known, tallies[0].active) == (60, 60)
    assert (tallies[1].known, tallies[1].active) == (60, 60)
