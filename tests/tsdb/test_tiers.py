"""Range queries through bindings read hourly rows for the hours a binding covers whole and
minutes only at its edges (tsdb/duckdb_query.py): the answer must be the minute tier's.

Each history is random: GPUs sampled every 10 s with gaps, counters with resets, several
bindings per GPU starting and ending mid-hour (some back to back, some to the same project,
one still open), and a rollup that stopped mid-way, so the hours not rolled up yet and the
minutes not rolled up yet (read from raw) are in the window too. Every class of metric is
asked with the tier left to the store and with `tier=Tier.MINUTE`, for steps that hold
whole hours, steps that cut hours, and windows starting mid-hour.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from gpufleet.tsdb import Binding, Sample, Tier, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from tests.tsdb_behaviour import HOUR, T0, at

GPUS = [f"GPU-{n}" for n in range(5)]
HOURS = 7
MINUTE = timedelta(minutes=1)
# (metric, over_time, across): each class of docs/design.md, "Telemetry model", and the
# overrides a caller uses.
CLASSES = [
    ("gpu.sm_active", None, None),                    # relative activity: mean, mean
    ("gpu.memory_used_bytes", None, None),            # absolute usage: mean, sum
    ("gpu.temperature_celsius", None, "max"),         # sensor: the peak
    ("gpu.temperature_celsius", None, None),          # sensor: mean
    ("gpu.remapped_rows_pending", None, None),        # state: last, count
    ("gpu.pcie_replays_total", None, None),           # counter: increase, sum
    ("gpu.pcie_replays_total", "last", None),         # counter: total so far
]
WINDOWS = [  # (start offset, end offset, step)
    (timedelta(0), HOURS * HOUR, HOURS * HOUR),                       # one step, aligned
    (timedelta(0), HOURS * HOUR, HOUR),                               # hourly steps
    (timedelta(0), HOURS * HOUR, 2 * HOUR),
    (timedelta(minutes=17), HOURS * HOUR - timedelta(minutes=5), 24 * HOUR),  # mid-hour
    (timedelta(minutes=17), HOURS * HOUR, 2 * HOUR),                  # steps cut every hour
    (timedelta(0), HOURS * HOUR, timedelta(minutes=90)),              # steps cut some hours
    (timedelta(minutes=30, seconds=20), 5 * HOUR + timedelta(seconds=30), 3 * HOUR),
]


def random_history(rng: random.Random) -> list[Sample]:
    samples = []
    for gpu in GPUS:
        counter = rng.uniform(0, 1000)
        pending = 0.0
        for i in range(HOURS * 360):
            when = at(i * 10)
            if rng.random() < 0.03 or (i // 90) % 17 == 3:  # blanks, and a silent stretch
                continue
            counter = 0.0 if rng.random() < 0.003 else counter + rng.choice([0, 0, 1, 5])
            if rng.random() < 0.01:
                pending = 1.0 - pending
            samples += [
                Sample(series("gpu.sm_active", gpu), when, round(rng.uniform(0, 100), 1)),
                Sample(series("gpu.memory_used_bytes", gpu), when, rng.uniform(0, 80e9)),
                Sample(series("gpu.temperature_celsius", gpu), when, rng.uniform(30, 90)),
                Sample(series("gpu.remapped_rows_pending", gpu), when, pending),
                Sample(series("gpu.pcie_replays_total", gpu), when, counter),
            ]
    return samples


def random_bindings(rng: random.Random) -> dict:
    """Per GPU (one left unbound) one to three bindings with edges anywhere in a minute."""
    bindings = {}
    for gpu in GPUS[:-1]:
        edge = T0 - timedelta(minutes=rng.choice([0, 45, 120]))
        held = []
        for n in range(rng.randint(1, 3)):
            end = edge + timedelta(seconds=rng.randint(20 * 60, 4 * 3600))
            last = n == 2 or rng.random() < 0.3
            held.append(Binding(edge, None if last else end, f"alloc-{gpu}-{n}",
                                rng.choice(["p1", "p2", "p3"])))
            if last:
                break
            edge = end + timedelta(seconds=rng.choice([0, 0, 37, 1800]))
        bindings[(gpu, None)] = held
    return bindings


@pytest.fixture(scope="module", params=[1, 2, 3])
def history(request, tmp_path_factory):
    rng = random.Random(request.param)
    store = DuckDBTelemetryStore(tmp_path_factory.mktemp("tiers") / "t.duckdb", threads=1)
    store.write(random_history(rng))
    # Rolled up to mid-way: hours 0-4 in the hour tier, minutes up to 5:43, raw after.
    store.rollup(T0 + 5 * HOUR + timedelta(minutes=43, seconds=12))
    yield store, random_bindings(rng)
    store.close()


def answer(store, metric, over_time, across, window, bindings, *, tier=None,
           group_by=("project",)):
    start, end, step = window
    results = store.query_range(metric, T0 + start, T0 + end, step, group_by=list(group_by),
                                over_time=over_time, across=across, tier=tier,
                                bindings=bindings)
    return {tuple(r.labels.values()): r.points for r in results}


def assert_same(mixed, minutes):
    assert mixed.keys() == minutes.keys()
    for key, points in minutes.items():
        assert [t for t, _ in mixed[key]] == [t for t, _ in points], key
        assert [v for _, v in mixed[key]] == pytest.approx([v for _, v in points],
                                                           rel=1e-9, abs=1e-6), key


@pytest.mark.parametrize("window", WINDOWS, ids=lambda w: f"{w[0]}-{w[1]}-by-{w[2]}")
@pytest.mark.parametrize(("metric", "over_time", "across"), CLASSES,
                         ids=[f"{m}-{o or ''}-{a or ''}" for m, o, a in CLASSES])
def test_mixed_tiers_answer_as_the_minute_tier(history, metric, over_time, across, window):
    store, bindings = history
    for group_by in (("project",), ("allocation",), ()):
        mixed = answer(store, metric, over_time, across, window, bindings, group_by=group_by)
        minutes = answer(store, metric, over_time, across, window, bindings, tier=Tier.MINUTE,
                         group_by=group_by)
        assert minutes  # the comparison is not vacuous
        assert_same(mixed, minutes)


def test_whole_hours_are_read_from_the_hour_tier(tmp_path):
    """Spoiling the minutes of an hour a binding covers whole shows which tier answered."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write([Sample(series("gpu.sm_active", "GPU-a"), at(i * 10), 40.0)
                 for i in range(3 * 360)])
    store.rollup(T0 + 3 * HOUR)
    bindings = {("GPU-a", None): [Binding(T0 + timedelta(minutes=30), None, "a", "p1")]}
    store._con.execute("UPDATE rollup_1m SET v_mean = 99 WHERE bucket_ms >= $1 "
                       "AND bucket_ms < $2", [int((T0 + HOUR).timestamp() * 1000),
                                              int((T0 + 2 * HOUR).timestamp() * 1000)])
    window = (timedelta(0), 3 * HOUR, 3 * HOUR)
    mixed = answer(store, "gpu.sm_active", None, None, window, bindings)
    minutes = answer(store, "gpu.sm_active", None, None, window, bindings, tier=Tier.MINUTE)
    assert mixed == {("p1",): [(T0, pytest.approx(40.0))]}
    assert minutes == {("p1",): [(T0, pytest.approx((30 * 40 + 60 * 99 + 60 * 40) / 150))]}
    store.close()
