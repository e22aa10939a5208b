"""The DuckDB store's kept newest samples (tsdb/kept_latest.py): `latest_of_units` answered
from memory agrees with the general `latest` read from DuckDB, through direct writes,
journalled uploads, late and duplicate samples, units that stop reporting, new series,
rollups with compaction, retention and a reopen."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from gpufleet.tsdb import Retention, Sample, SampleColumns, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import newest_of_units, to_ms
from tests.tsdb_behaviour import T0, at

MEMORY = "gpu.memory_used_bytes"
MINUTE = timedelta(minutes=1)


def general(store: DuckDBTelemetryStore, metric: str, units, since):
    """The answer from DuckDB's rows: `latest` (a LatestValue per series), folded by unit."""
    return newest_of_units((((v.series.gpu_uuid, v.series.mig_uuid), to_ms(v.at), v.value)
                            for v in store.latest(metric=metric, since=since)), units)


def unit_series(gpu: int, mig: int | None, node: str):
    return series(MEMORY, f"GPU-{gpu}", mig_uuid=None if mig is None else f"MIG-{mig}",
                  node=node)


@pytest.mark.parametrize("seed", range(6))
def test_kept_latest_answers_as_duckdb_does(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "telemetry.duckdb"

    def opened():
        return DuckDBTelemetryStore(path, threads=1, apply_interval_s=None,
                                    retention=Retention(raw=timedelta(hours=1)))

    store = opened()
    units = [(g, m) for g in range(6) for m in (None, 1) if rng.random() < 0.8]
    asked = [(f"GPU-{g}", None if m is None else f"MIG-{m}") for g, m in units]
    asked.append(("GPU-never", None))
    now = T0
    sent: dict = {}
    try:
        for step in range(60):
            now += timedelta(seconds=rng.choice([10, 30, 60, 600]))
            batch = []
            for g, m in units:
                if rng.random() < 0.3 or ((g, m) == units[0] and step >= 5):
                    continue  # a unit that stopped reporting for a while, or for good
                node = rng.choice(["node-1", "node-1", "node-2"])  # moved: another series
                late = rng.choice([0, 0, 0, 5, 120])  # a late sample, or one at `now`
                # Equal values of several units; a unit's sample sent again at the same time
                # keeps its value, whatever its node (one series: DuckDB's `latest` would
                # pick either of two values).
                when = now - timedelta(seconds=late)
                value = sent.setdefault((g, m, when), float(rng.randrange(0, 4)) * 1e9)
                batch.append(Sample(unit_series(g, m, node), when, value))
            if rng.random() < 0.5:
                store.write(batch)
            else:
                labels = list(dict.fromkeys(s.series for s in batch))
                index = {s: n for n, s in enumerate(labels)}
                store.write_columns([(f"b{step}", SampleColumns(
                    labels, [index[s.series] for s in batch],
                    [to_ms(s.at) for s in batch], [s.value for s in batch]))])
            # sm_active is rounded by compaction: it is always read from DuckDB
            store.write([Sample(series("gpu.sm_active", "GPU-0"), now, rng.uniform(0, 100))])
            if rng.random() < 0.2:
                store.rollup(now)
            if rng.random() < 0.1:
                store.apply_retention(now)
            if rng.random() < 0.1:
                store.close()
                store = opened()
            for since in (now - timedelta(seconds=30), now - 5 * MINUTE,
                          now - timedelta(hours=3), T0):
                for metric in (MEMORY, "gpu.sm_active"):
                    assert store.latest_of_units(metric, asked, since=since) == \
                        general(store, metric, asked, since), (step, since, metric)
        assert store._kept  # the kept path was taken
    finally:
        store.close()


def test_a_unit_silent_since_before_the_horizon_has_no_fresh_value(tmp_path):
    store = DuckDBTelemetryStore(tmp_path / "telemetry.duckdb", threads=1,
                                 apply_interval_s=None)
    try:
        store.write([Sample(unit_series(0, None, "n"), at(0), 1e9),
                     Sample(unit_series(1, None, "n"), at(0), 2e9)])
        store.write([Sample(unit_series(1, None, "n"), at(3 * 3600), 3e9)])
        store.rollup(at(3 * 3600 + 60))  # the horizon: an hour before the rolled minutes
        asked = [("GPU-0", None), ("GPU-1", None)]
        assert store.latest_of_units(MEMORY, asked, since=at(3 * 3600 - 300)) == \
            {("GPU-1", None): 3e9}
        assert store._kept[MEMORY].horizon_ms > to_ms(at(0))
        # an older question than the horizon is DuckDB's: GPU-0's old sample is found
        assert store.latest_of_units(MEMORY, asked, since=at(0)) == \
            {("GPU-0", None): 1e9, ("GPU-1", None): 3e9}
    finally:
        store.close()
