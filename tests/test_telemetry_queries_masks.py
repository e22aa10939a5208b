"""The funnel's minute masks (tsdb/duckdb_masks.py) on a real DuckDB store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.masks import MaskStore, SlotSpan
from gpufleet.tsdb.protocol import HOUR_MS, to_ms

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
