"""Series ids handed out metric by metric (tsdb/series_ids.py): id order is the raw tier's
storage order, so it must put one metric's series together and keep each unit's ids in
arrival order, never reuse an id, and leave stores written before the scheme as they are."""

from __future__ import annotations

import pytest

from gpufleet.tsdb import series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.series_ids import BLOCK_BITS, SeriesIds, SeriesIdsExhausted
from tests.tsdb_behaviour import T0, at, only, ticks, values_of

BLOCK = 1 << BLOCK_BITS


def handed_out(ids: SeriesIds, metrics: list[str]) -> list[int]:
    fresh: dict[str, int] = {}
    out = [ids.allocate(m, fresh) for m in metrics]
    for metric, sid in zip(metrics, out, strict=True):
        ids.known(sid, metric)
    return out


def test_each_metric_takes_a_block_and_its_series_follow_arrival():
    ids = SeriesIds()
    got = handed_out(ids, ["gpu.sm_active", "gpu.energy_joules_total"] * 3)
    assert got == [BLOCK, 2 * BLOCK, BLOCK + 1, 2 * BLOCK + 1, BLOCK + 2, 2 * BLOCK + 2]
    assert handed_out(ids, ["gpu.sm_active", "gpu.dram_active"]) == [BLOCK + 3, 3 * BLOCK]


def test_a_full_block_is_followed_by_a_new_one_and_ids_run_out_with_a_clear_error():
    ids = SeriesIds()
    ids.known(2 * BLOCK - 1, "gpu.sm_active")  # the last id of block 1
    assert handed_out(ids, ["gpu.sm_active"]) == [2 * BLOCK]
    ids.known(127 * BLOCK, "gpu.dram_active")
    with pytest.raises(SeriesIdsExhausted):
        handed_out(ids, ["gpu.tensor_active"])


def test_a_block_shared_by_metrics_or_holding_a_lost_definition_is_left_alone():
    """Such a block's free ids may sit below an id in use: new series go to new blocks."""
    ids = SeriesIds()
    ids.known(BLOCK + 4, "gpu.sm_active")
    ids.known(BLOCK + 9, None)  # in sm_active's block, its definition lost
    ids.known(5 * BLOCK + 2, None)  # a block whose metric is unknown
    ids.known(2 * BLOCK + 3, "gpu.dram_active")  # a store written before, past 2^24 series:
    ids.known(2 * BLOCK + 2, "gpu.tensor_active")  # arrival order, metrics mixed
    assert handed_out(ids, ["gpu.sm_active", "gpu.dram_active", "gpu.tensor_active",
                            "gpu.sm_active"]) == [6 * BLOCK, 7 * BLOCK, 8 * BLOCK, 6 * BLOCK + 1]


def test_a_store_written_before_keeps_its_ids_and_new_series_get_blocks(tmp_path):
    """A telemetry.duckdb whose ids were handed out in arrival order (0, 1, 2, … every metric
    mixed) opens as it is: its series keep their ids and answer, new series of the same
    metrics get blocks, and compaction keeps every row."""
    path = tmp_path / "telemetry.duckdb"
    store = DuckDBTelemetryStore(path, threads=1)
    for sid, (metric, gpu) in enumerate([("gpu.sm_active", "GPU-a"),
                                         ("gpu.energy_joules_total", "GPU-a"),
                                         ("gpu.sm_active", "GPU-b")]):
        store._con.execute("INSERT INTO series VALUES ($1, $2, $3, NULL, '', 'n', 'e', 'm')",
                           [sid, metric, gpu])
        store._con.execute("INSERT INTO samples VALUES ($1, $2, 10.0)",
                           [sid, int(at(0).timestamp() * 1000)])
    store.close()
    store = DuckDBTelemetryStore(path, threads=1)
    store.write(ticks("gpu.sm_active", "GPU-a", [None, 30.0]) +
                ticks("gpu.sm_active", "GPU-c", [None, 50.0]))
    ids = dict(store._con.execute("SELECT gpu_uuid || ' ' || metric, series_id FROM series "
                                  "ORDER BY series_id").fetchall())
    assert ids == {"GPU-a gpu.sm_active": 0, "GPU-a gpu.energy_joules_total": 1,
                   "GPU-b gpu.sm_active": 2, "GPU-c gpu.sm_active": BLOCK}
    store.rollup(at(3600))
    assert store._con.execute("SELECT count(*) FROM samples").fetchone() == (5,)
    result = only(store.query_range("gpu.sm_active", T0, at(20), at(10) - at(0)))
    assert values_of(result) == [10.0, 40.0]
    store.close()


def test_the_same_series_keeps_its_id_across_a_reopen(tmp_path):
    path = tmp_path / "telemetry.duckdb"
    store = DuckDBTelemetryStore(path, threads=1)
    store.write(ticks("gpu.sm_active", "GPU-a", [1.0]))
    store.close()
    store = DuckDBTelemetryStore(path, threads=1)
    store.write(ticks("gpu.sm_active", "GPU-a", [1.0]) + ticks("gpu.sm_active", "GPU-b", [2.0]))
    assert sorted(store._ids[s] for s in [series("gpu.sm_active", "GPU-a"),
                                          series("gpu.sm_active", "GPU-b")]) == [BLOCK, BLOCK + 1]
    store.close()
