"""The last active minute of the DuckDB masks (the idle list's "idle since") when every
minute of an hour up to it was active: log2 of such a mask rounds up to the next bit as a
double, which put the last active minute one minute late (found by the masks' property
test, tests/services/telemetry/test_masks_properties.py, only with such histories)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
import pytest

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_masks import _highest_minute
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.masks import SlotSpan
from gpufleet.tsdb.protocol import MINUTE_MS, to_ms

HOUR0 = datetime(2026, 11, 2, tzinfo=UTC)
UNIT = ("GPU-A", None)


@pytest.mark.parametrize("mask", [1, 2**52 - 1, 2**52, 2**53 - 1, 2**59, 2**60 - 1,
                                  2**60 - 2**8, 2**51 + 2**3])
def test_the_highest_minute_is_the_top_bit(mask):
    with duckdb.connect() as con:
        start_ms = con.execute(f"SELECT {_highest_minute('m')} FROM "
                               "(SELECT $1::UBIGINT AS m, 0::BIGINT AS hour_ms)",
                               [mask]).fetchone()[0]
    assert start_ms == (mask.bit_length() - 1) * MINUTE_MS


@pytest.mark.parametrize("active_minutes", [52, 60])
def test_a_unit_active_every_minute_until_it_stopped(active_minutes):
    """Active in minutes 0 … n − 1 of the hour, idle after: its last active minute is n − 1."""
    store = DuckDBTelemetryStore(":memory:", threads=1, apply_interval_s=None)
    try:
        labels = series("gpu.gr_engine_active", UNIT[0], node="n1", environment="e1",
                        model="H100-80GB")
        store.write([Sample(labels, HOUR0 + timedelta(minutes=m, seconds=30),
                            80.0 if m < active_minutes else 0.0) for m in range(90)])
        store.rollup(HOUR0 + timedelta(minutes=90))
        masks = store.minute_masks(Thresholds())
        done = masks.refresh()
        lo = to_ms(HOUR0)
        last = masks.tallies([SlotSpan(UNIT, lo, done, 0, 1.0)], lo, done, done,
                             last_active=True)
        assert last[0].last_active_ms == lo + (active_minutes - 1) * MINUTE_MS
        only = masks.last_active_minutes([SlotSpan(UNIT, lo, done, 0, 1.0)], lo, done, done)
        assert only == {0: lo + (active_minutes - 1) * MINUTE_MS}
    finally:
        store.close()
