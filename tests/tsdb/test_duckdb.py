"""The embedded DuckDB telemetry store: the shared behaviour (tests/tsdb_behaviour.py) on a
real DuckDB file, then what only a store with its own rollups and retention shows."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from itertools import pairwise

import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.tsdb import Retention, Sample, Tier, choose_tier, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from tests.tsdb_behaviour import *  # noqa: F403 - the shared behaviour tests run here
from tests.tsdb_behaviour import HOUR, T0, at, only, ticks, values_of


@pytest.fixture
def open_store(tmp_path):
    return lambda: DuckDBTelemetryStore(tmp_path / "telemetry.duckdb", threads=1)


def count(store: DuckDBTelemetryStore, table: str) -> int:
    return store._con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def history(hours: int, *, seed: int = 7) -> list[Sample]:
    """Three GPUs over `hours`, every 10 s, with gaps and counter resets."""
    rng = random.Random(seed)
    samples = []
    counters = {g: 0.0 for g in "abc"}
    for i in range(hours * 360):
        for g in "abc":
            env = "prod" if g != "c" else "dev"
            value = None if rng.random() < 0.05 else round(rng.uniform(0, 100), 1)
            samples.append(Sample(series("gpu.sm_active", f"GPU-{g}", environment=env),
                                  at(i * 10), value))
            counters[g] = 0.0 if rng.random() < 0.002 else counters[g] + rng.randint(0, 3)
            samples.append(Sample(series("gpu.pcie_replays_total", f"GPU-{g}", environment=env),
                                  at(i * 10), counters[g]))
    return samples


@pytest.mark.parametrize("metric", ["gpu.sm_active", "gpu.pcie_replays_total"])
@pytest.mark.parametrize("step", [timedelta(minutes=5), HOUR, timedelta(hours=3)])
def test_rollups_answer_as_raw_samples_do(store, metric, step):
    store.write(history(6))
    end = T0 + 6 * HOUR

    def answer(tier):
        results = store.query_range(metric, T0, end, step, group_by=["environment"], tier=tier)
        return {r.labels["environment"]: r.points for r in results}

    from_raw = answer(Tier.RAW)
    store.rollup(T0 + 4 * HOUR + timedelta(minutes=30))  # hours 0-3 rolled, the rest is tail
    compacted = answer(Tier.RAW)  # compacting the rolled-up hours lost nothing
    assert {env: [t for t, _ in points] for env, points in compacted.items()} == \
        {env: [t for t, _ in points] for env, points in from_raw.items()}
    for env, points in from_raw.items():
        assert [v for _, v in compacted[env]] == pytest.approx([v for _, v in points])
    tiers = [Tier.MINUTE] if step < HOUR else [Tier.MINUTE, Tier.HOUR]
    for tier in tiers:
        rolled = answer(tier)
        assert rolled.keys() == from_raw.keys()
        for env, points in from_raw.items():
            assert [t for t, _ in rolled[env]] == [t for t, _ in points]
            assert [v for _, v in rolled[env]] == pytest.approx([v for _, v in points])


def test_rollup_is_incremental_and_folds_only_closed_buckets(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [50.0] * 720))  # two hours
    store.rollup(T0 + timedelta(minutes=30, seconds=20))
    assert (count(store, "rollup_1m"), count(store, "rollup_1h")) == (30, 0)
    store.rollup(T0 + timedelta(minutes=30, seconds=50))
    assert count(store, "rollup_1m") == 30
    store.rollup(T0 + 2 * HOUR)
    assert (count(store, "rollup_1m"), count(store, "rollup_1h")) == (120, 2)


def test_retention_drops_old_rows_and_rollups_still_answer(tmp_path):
    retention = Retention(raw=timedelta(hours=2), minute=timedelta(hours=4),
                          hour=timedelta(days=1))
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", retention=retention)
    store.write(ticks("gpu.sm_active", "GPU-a", [20.0] * 360 * 6)
                + ticks("gpu.sm_active", "GPU-b", [60.0] * 360 * 6))
    now = T0 + 6 * HOUR
    store.apply_retention(now)  # nothing rolled up yet: raw rows are all kept
    assert count(store, "samples") == 2 * 360 * 6
    store.rollup(now)
    store.apply_retention(now)
    assert count(store, "samples") == 2 * 360 * 2
    assert count(store, "rollup_1m") == 2 * 60 * 4
    assert count(store, "rollup_1h") == 2 * 6
    hourly = only(store.query_range("gpu.sm_active", T0, now, HOUR))
    assert values_of(hourly) == pytest.approx([40.0] * 6)
    raw_gone = store.query_range("gpu.sm_active", T0, T0 + HOUR, timedelta(seconds=10),
                                 tier=Tier.RAW)
    assert raw_gone == []
    store.apply_retention(now + timedelta(days=2))
    assert count(store, "rollup_1h") == 0
    store.close()


@pytest.mark.parametrize(("step", "window", "tier"), [
    (timedelta(seconds=10), HOUR, Tier.RAW),
    (timedelta(seconds=30), timedelta(days=8), Tier.MINUTE),
    (timedelta(minutes=1), timedelta(days=1), Tier.MINUTE),
    (timedelta(minutes=15), timedelta(days=7), Tier.MINUTE),
    (timedelta(minutes=5), timedelta(days=31), Tier.HOUR),
    (HOUR, timedelta(days=1), Tier.HOUR),
])
def test_the_tier_follows_the_step_and_the_window(step, window, tier):
    assert choose_tier(step, T0, T0 + window) is tier


def test_query_picks_the_rollup_tier_for_coarse_steps(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [30.0] * 720))
    store.rollup(T0 + 2 * HOUR)
    # Deleting the raw rows shows which tier answered: only rollups are left.
    store._con.execute("DELETE FROM samples")
    assert values_of(only(store.query_range("gpu.sm_active", T0, T0 + 2 * HOUR, HOUR))) \
        == [30.0, 30.0]
    assert values_of(only(store.query_range("gpu.sm_active", T0, T0 + HOUR,
                                            timedelta(minutes=30)))) == [30.0, 30.0]
    assert store.query_range("gpu.sm_active", T0, T0 + HOUR, timedelta(seconds=30)) == []


def test_a_batch_is_stored_whole_or_not_at_all(store, monkeypatch):
    good = ticks("gpu.sm_active", "GPU-a", [10.0, 20.0])
    naive = Sample(series("gpu.sm_active", "GPU-new"), datetime(2026, 11, 2, 9), 5.0)
    with pytest.raises(InvalidInput):
        store.write([*good, naive])
    real = DuckDBTelemetryStore._store

    def fail_after_inserting(self, con, *args):
        real(self, con, *args)
        raise RuntimeError("disk full")

    monkeypatch.setattr(DuckDBTelemetryStore, "_store", fail_after_inserting)
    with pytest.raises(RuntimeError):
        store.write(good)
    monkeypatch.undo()
    assert store.latest() == []
    assert store.series() == []
    assert count(store, "series") == 0
    assert store.write(good) == 2
    assert [v.value for v in store.latest()] == [20.0]


def test_a_unit_that_moves_keeps_its_series_and_takes_the_new_attributes(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [10.0], environment="dev"))
    store.write([Sample(series("gpu.sm_active", "GPU-a", environment="staging"), at(5), 30.0),
                 Sample(series("gpu.sm_active", "GPU-a", environment="prod"), at(10), 30.0)])
    assert [s.environment for s in store.series("gpu.sm_active")] == ["prod"]
    result = only(store.query_range("gpu.sm_active", T0, at(20), timedelta(minutes=1),
                                    group_by=["environment"]))
    assert (result.labels, values_of(result)) == ({"environment": "prod"}, [pytest.approx(70 / 3)])


def test_compacted_hours_keep_values_exactly_and_percentages_to_four_decimals(store):
    """The raw tier's stored precision (docs/telemetry-store.md, "Storage layout"): large
    counters and every non-percentage value come back bit for bit after compaction; a
    percentage comes back to 1e-4 of a point, and the rollups keep the exact mean."""
    exact = {"gpu.energy_joules_total": [123_456_789_012.345, 123_456_789_999.999],
             "gpu.ecc_uncorrected_errors_total": [9_007_199_254_740_991.0, 3.0],
             "gpu.memory_used_bytes": [85_899_345_920.0, 1.5],
             "gpu.power_usage_watts": [312.123456789, 0.1]}
    ratios = [12.3456789, 87.65432101]
    store.write([s for m, values in exact.items() for s in ticks(m, "GPU-a", values)]
                + ticks("gpu.sm_active", "GPU-a", ratios))

    def raw(metric):
        return [v for _, v in only(store.query_range(
            metric, T0, at(20), timedelta(seconds=1), over_time="last", tier=Tier.RAW)).points]

    assert raw("gpu.sm_active") == ratios  # the open hour: as received
    store.rollup(T0 + HOUR)
    for metric, values in exact.items():
        assert raw(metric) == values
    assert raw("gpu.sm_active") == [12.3457, 87.6543]
    minute = only(store.query_range("gpu.sm_active", T0, at(60), timedelta(minutes=1),
                                    tier=Tier.MINUTE))
    assert values_of(minute) == [sum(ratios) / 2]


def test_compaction_orders_runs_so_no_step_between_rows_exceeds_a_tick(store):
    """What keeps a compacted time to about two bytes: DuckDB bit-packs groups of 2,048 times
    at the width of the largest difference, so consecutive stored rows never jump back by
    an hour from one series' run to the next (each run runs the other way from the one
    before), and series of one metric are stored together."""
    for gpu in "abcd":
        for metric in ("gpu.sm_active", "gpu.power_usage_watts", "gpu.energy_joules_total"):
            store.write(ticks(metric, f"GPU-{gpu}", [float(i) for i in range(360)]))
    store.rollup(T0 + HOUR)
    rows = store._con.execute("SELECT s.metric, ts_ms FROM samples JOIN series s "
                              "USING (series_id) ORDER BY samples.rowid").fetchall()
    assert len(rows) == 12 * 360
    assert max(abs(b[1] - a[1]) for a, b in pairwise(rows)) <= 10_000
    metrics = [m for m, _ in rows]
    assert sum(1 for a, b in pairwise(metrics) if a != b) == 2


def test_compaction_keeps_rows_whose_series_is_not_in_the_dictionary(store):
    store.write(ticks("gpu.sm_active", "GPU-a", [1.0, 2.0]))
    store._con.execute("INSERT INTO samples VALUES (999, $1, 5.5)",
                       [int(at(30).timestamp() * 1000)])
    store.rollup(T0 + HOUR)
    assert count(store, "samples") == 3


def test_a_range_query_through_the_same_bindings_sees_series_learnt_since(store):
    """The store reuses the last query's slots for the same bindings object and question:
    a series written since, or one that moved, must still change the answer."""
    from gpufleet.tsdb import Binding

    bindings = {("GPU-a", None): [Binding(T0 - HOUR, None, "alloc-1", "p1")],
                ("GPU-b", None): [Binding(T0 - HOUR, None, "alloc-2", "p2")]}

    def averages(**kwargs):
        return {tuple(r.labels.values()): values_of(r)
                for r in store.query_range("gpu.sm_active", T0, T0 + HOUR, HOUR,
                                           bindings=bindings, **kwargs)}

    store.write(ticks("gpu.sm_active", "GPU-a", [20.0] * 360, environment="dev"))
    assert averages(group_by=["project"]) == {("p1",): [20.0]}
    store.write(ticks("gpu.sm_active", "GPU-b", [60.0] * 360, environment="dev"))
    assert averages(group_by=["project"]) == {("p1",): [20.0], ("p2",): [60.0]}
    assert averages(group_by=["allocation"]) == {("alloc-1",): [20.0], ("alloc-2",): [60.0]}
    assert averages(group_by=["project"], filters={"project": ["p2"]}) == {("p2",): [60.0]}
    assert averages(group_by=["environment"]) == {("dev",): [40.0]}
    store.write(ticks("gpu.sm_active", "GPU-b", [60.0], environment="prod"))  # it moved
    assert averages(group_by=["environment"]) == {("dev",): [20.0], ("prod",): [60.0]}
