"""A one-step range query through bindings reads each slot's whole hours from a kept fold
(tsdb/whole_hour_folds.py): the answer must be the one the hourly rows give, and the
minute tier's, whatever happened between the fold being kept and the question.

The histories are test_tiers.py's (gaps, counter resets, silent stretches); the windows
start and end anywhere in a minute; bindings start and end mid-hour, some arrive late
(with a start in the past, after folds were kept), hours are rolled up after folds were
kept, and a unit is relabelled. Each answer is compared with the same question asked with
the folds turned off (the hourly rows) and with `tier=Tier.MINUTE`, for every class of
metric.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from gpufleet.domain.telemetry.vocabulary import AcrossSeries
from gpufleet.tsdb import Binding, Sample, Tier, series
from gpufleet.tsdb import duckdb_store as duckdb_store_module
from gpufleet.tsdb.duckdb_query import RangePlan
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import HOUR_MS, to_ms
from gpufleet.tsdb.whole_hour_folds import NOT_KEPT, TABLE
from tests.tsdb.test_tiers import (
    CLASSES,
    GPUS,
    HOURS,
    answer,
    assert_same,
    random_bindings,
    random_history,
)
from tests.tsdb_behaviour import HOUR, T0, at


def kept(store) -> list[tuple]:
    return store._con.execute(f"SELECT sid, lo_ms, hi_ms, n, done_ms FROM {TABLE} "
                              "ORDER BY ALL").fetchall()


def without_folds(monkeypatch, store, *args, **kwargs) -> dict:
    """The question answered from the hourly rows: no fold kept or read."""
    with monkeypatch.context() as patch:
        patch.setattr(duckdb_store_module, "fill_folds", lambda *_: NOT_KEPT)
        return answer(store, *args, **kwargs)


def check(monkeypatch, store, window, bindings) -> None:
    """Every class, grouped three ways: folds = hourly rows = minutes."""
    for metric, over_time, across in CLASSES:
        for group_by in (("project",), ("allocation",), ()):
            question = (store, metric, over_time, across, window, bindings)
            folded = answer(*question, group_by=group_by)
            assert folded == answer(*question, group_by=group_by)  # read back from the kept
            hourly = without_folds(monkeypatch, *question, group_by=group_by)
            minutes = answer(*question, group_by=group_by, tier=Tier.MINUTE)
            assert minutes  # the comparison is not vacuous
            assert_same(folded, hourly)
            assert_same(folded, minutes)


def random_window(rng: random.Random, last_hour: int) -> tuple:
    """One step over a window starting and ending anywhere in a second, ≥ 90 minutes (the
    window's start is floored to its minute: a step of the window's length plus a minute
    holds it)."""
    start = timedelta(seconds=rng.randint(0, 2 * 3600))
    end = timedelta(seconds=rng.randint(int(start.total_seconds()) + 5400, last_hour * 3600))
    return (start, end, rng.choice([end - start + timedelta(minutes=1), 24 * HOUR]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_folds_answer_as_the_hourly_rows_and_the_minutes(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write(random_history(rng))
    store.rollup(T0 + 3 * HOUR + timedelta(minutes=21))
    bindings = random_bindings(rng)
    for _ in range(2):
        check(monkeypatch, store, random_window(rng, 4), bindings)
    assert kept(store), "the folds were kept (the test reads them)"
    # A late binding: the unbound GPU, held since before the folds were kept.
    late = {**bindings, (GPUS[-1], None): [
        Binding(T0 + timedelta(minutes=rng.randint(1, 59), seconds=13), None, "late", "p2")]}
    check(monkeypatch, store, random_window(rng, 4), late)
    # Hours rolled up after the folds were kept: the spans grow, the old folds go.
    store.rollup(T0 + (HOURS - 1) * HOUR + timedelta(minutes=7))
    window = random_window(rng, HOURS)
    check(monkeypatch, store, window, late)
    long = (timedelta(seconds=rng.randint(1, 3599)),  # the late binding's hours, all
            HOURS * HOUR - timedelta(seconds=rng.randint(1, 3599)), 24 * HOUR)
    check(monkeypatch, store, long, late)
    assert {done for *_, done in kept(store)} <= {to_ms(T0 + (HOURS - 1) * HOUR)}
    # A relabelled unit (moved to another node): the same series id, the same folds.
    moved = series("gpu.sm_active", GPUS[0], node="node-moved", model="H100-80GB")
    store.write([Sample(moved, at(HOURS * 3600 - 2), 50.0)])
    check(monkeypatch, store, window, late)
    store.close()


def test_the_kept_fold_is_read_in_place_of_the_rows(tmp_path):
    """Spoiling the rows after a first query shows which rows answer."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write([Sample(series("gpu.sm_active", "GPU-a"), at(i * 10), 40.0)
                 for i in range(5 * 360)])
    store.rollup(T0 + 4 * HOUR + timedelta(minutes=10))
    bindings = {("GPU-a", None): [Binding(T0 + timedelta(minutes=30), None, "a", "p1")]}
    window = (timedelta(0), 4 * HOUR, 4 * HOUR)
    first = answer(store, "gpu.sm_active", None, None, window, bindings)
    assert first == {("p1",): [(T0, pytest.approx(40.0))]}
    sid = store._ids[series("gpu.sm_active", "GPU-a")]
    assert [row[:4] for row in kept(store)] == \
        [(sid, to_ms(T0 + timedelta(minutes=30)), to_ms(T0 + 4 * HOUR), 210 * 6)]
    for tier in ("rollup_1h", "rollup_1m"):
        store._con.execute(f"UPDATE {tier} SET v_mean = 99 WHERE bucket_ms < $1",
                           [to_ms(T0 + 4 * HOUR)])
    assert answer(store, "gpu.sm_active", None, None, window, bindings) == first
    # Past the whole hours (4:00 to 4:10) the minutes are read: 10 spoiled minutes.
    later = answer(store, "gpu.sm_active", None, None,
                   (timedelta(0), 4 * HOUR + timedelta(minutes=10), 5 * HOUR), bindings)
    assert later == {("p1",): [(T0, pytest.approx(40.0))]}
    # Those 10 minutes' running sums are kept now (edge_minute_sums.py): a minute row
    # never changes once rolled up, so spoiling them shows the kept sums answer.
    store._con.execute("UPDATE rollup_1m SET v_mean = 99")
    window = (timedelta(0), 4 * HOUR + timedelta(minutes=10), 5 * HOUR)
    assert answer(store, "gpu.sm_active", None, None, window, bindings) == later
    # The minute tier forced (no folds, no kept sums) sees the spoiled rows: all 220.
    assert answer(store, "gpu.sm_active", None, None, window, bindings,
                  tier=Tier.MINUTE) == {("p1",): [(T0, pytest.approx(99.0))]}
    # A store that kept nothing yet reads the spoiled minutes past the whole hours.
    store._edge_sums = type(store._edge_sums)()
    spoiled = answer(store, "gpu.sm_active", None, None, window, bindings)
    assert spoiled == {("p1",): [(T0, pytest.approx((210 * 40 + 10 * 99) / 220))]}
    # A window of hourly steps reads no fold: it sees the spoiled hourly rows.
    assert answer(store, "gpu.sm_active", None, None, (timedelta(0), 4 * HOUR, HOUR),
                  bindings)[("p1",)][1][1] == pytest.approx(99.0)
    store.close()


def test_folds_kept_for_another_extent_are_not_read():
    """A query whose snapshot reads more rolled-up hours than the fill kept folds for
    (a rollup committed in between) reads the rows, as does a window of several steps."""
    lo, hi, done = to_ms(T0), to_ms(T0 + 5 * HOUR), to_ms(T0 + 4 * HOUR)
    one = RangePlan(Tier.MINUTE, lo, hi, hi - lo, "v_mean", AcrossSeries.MEAN, True)
    steps = RangePlan(Tier.MINUTE, lo, hi, HOUR_MS, "v_mean", AcrossSeries.MEAN, True)
    assert one.reads_folds(done, done) and TABLE in one.sql(hi, done, folds_done_ms=done)
    moved = one.sql(hi, done + HOUR_MS, folds_done_ms=done)
    assert not one.reads_folds(done + HOUR_MS, done) and TABLE not in moved
    assert not steps.reads_folds(done, done)
    assert TABLE not in steps.sql(hi, done, folds_done_ms=done)
    assert TABLE not in one.sql(hi, done, folds_done_ms=NOT_KEPT)


def test_past_the_row_bound_a_query_reads_its_rows(tmp_path, monkeypatch):
    """With room for one window's folds, a second window keeps nothing and reads its
    rows; nothing kept is deleted under a query that may be about to read it."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write(random_history(random.Random(4)))
    store.rollup(T0 + 6 * HOUR)
    store._folds.max_rows = 6
    bindings = {(gpu, None): [Binding(T0 - HOUR, None, f"a-{gpu}", "p1")] for gpu in GPUS}
    for start in (timedelta(minutes=10), timedelta(minutes=70)):
        check(monkeypatch, store, (start, 6 * HOUR, 24 * HOUR), bindings)
        assert {lo for _, lo, *_ in kept(store)} == {to_ms(T0 + HOUR)}
    store.close()


def test_bindings_side_by_side_on_a_shared_unit_read_one_fold(tmp_path, monkeypatch):
    """Two fractions of one GPU bound over the same span (and a third from later): one
    fold per series and span is kept, and each binding's slot reads it."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write(random_history(random.Random(5)))
    store.rollup(T0 + 5 * HOUR)
    start = T0 + timedelta(minutes=10, seconds=30)
    bindings = {(GPUS[0], None): [Binding(start, None, "a1", "p1"),
                                  Binding(start, None, "a2", "p2"),
                                  Binding(start + timedelta(minutes=50), None, "a3", "p2")]}
    check(monkeypatch, store, (timedelta(0), 5 * HOUR, 5 * HOUR), bindings)
    sid = store._ids[series("gpu.sm_active", GPUS[0])]
    assert [(lo, hi) for s, lo, hi, *_ in kept(store) if s == sid] == [
        (to_ms(start), to_ms(T0 + 5 * HOUR)),
        (to_ms(start + timedelta(minutes=50)), to_ms(T0 + 5 * HOUR))]
    store.close()


@pytest.mark.parametrize("seed", [6, 7, 8])
def test_a_moving_window_reads_extended_running_sums(tmp_path, monkeypatch, seed):
    """A window moving with the clock while its last hour is rolled up minute by minute
    (the live case): the kept running sums of that open hour are extended by the minutes
    rolled up since, the raw samples past the minute tier are read per query, and the
    answer stays the one the rows give (edge_minute_sums.py)."""
    rng = random.Random(seed)
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write(random_history(rng))
    bindings = random_bindings(rng)
    start = timedelta(minutes=rng.randint(20, 30), seconds=rng.randint(0, 59))
    for minutes in (21, 22, 23, 41):  # at 41 the window has left its first hour
        store.rollup(T0 + 3 * HOUR + timedelta(minutes=minutes))
        moved = timedelta(minutes=minutes, seconds=rng.randint(0, 150))
        check(monkeypatch, store, (start + moved, 3 * HOUR + moved, 24 * HOUR), bindings)
        # Also combined by count (of slots with a non-zero mean), as a caller may ask.
        for group_by in (("project",), ()):
            question = (store, "gpu.sm_active", "mean", "count",
                        (start + moved, 3 * HOUR + moved, 24 * HOUR), bindings)
            assert_same(answer(*question, group_by=group_by),
                        without_folds(monkeypatch, *question, group_by=group_by))
        hour = to_ms(T0 + 3 * HOUR)
        open_hour = [kept.hours[hour] for kept in store._edge_sums._sets]  # per metric
        assert open_hour and all(p.filled == minutes for p in open_hour)  # extended


def test_a_unit_bound_later_joins_the_kept_running_sums(tmp_path):
    """Sums are kept per series of the metric asked so far: a unit whose series was in no
    slot before (bound after a first question) gets its own sums, not a neighbour's."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write([Sample(series("gpu.sm_active", gpu), at(i * 10), value)
                 for gpu, value in (("GPU-a", 40.0), ("GPU-b", 70.0), ("GPU-c", 10.0))
                 for i in range(6 * 360)])
    store.rollup(T0 + 6 * HOUR)
    window = (timedelta(minutes=30), 4 * HOUR + timedelta(minutes=30), 24 * HOUR)
    one = {("GPU-b", None): [Binding(T0, None, "b", "p2")]}
    assert answer(store, "gpu.sm_active", None, None, window, one) == \
        {("p2",): [(T0 + timedelta(minutes=30), pytest.approx(70.0))]}
    for gpu, value in (("GPU-a", 40.0), ("GPU-c", 10.0)):  # ids either side of GPU-b's
        both = {**one, (gpu, None): [Binding(T0, None, gpu, "p1")]}
        assert answer(store, "gpu.sm_active", None, None, window, both) == {
            ("p1",): [(T0 + timedelta(minutes=30), pytest.approx(value))],
            ("p2",): [(T0 + timedelta(minutes=30), pytest.approx(70.0))]}
    store.close()


@pytest.mark.parametrize("seed", [9, 10, 11])
def test_changed_slots_fold_only_the_slots_they_add(tmp_path, monkeypatch, seed):
    """When a binding starts or ends between two questions over the same hours, the fills
    look for the slots it adds or changes only (edge_pieces.slots_added): the answer stays
    the rows' for every kind of change — an end set mid-window, a start moved, a unit bound
    anew, a unit's bindings gone."""
    from gpufleet.tsdb import edge_pieces, whole_hour_folds

    rng = random.Random(seed)
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write(random_history(rng))
    store.rollup(T0 + 3 * HOUR + timedelta(minutes=21))
    bindings = random_bindings(rng)
    window = (timedelta(minutes=rng.randint(1, 50), seconds=rng.randint(0, 59)),
              3 * HOUR + timedelta(minutes=10), 24 * HOUR)
    looked_for: list[int] = []  # slots each fill looked for

    def spy(module):
        real = module.slots_added

        def counted(columns, key, last):
            found = real(columns, key, last)
            looked_for.append(len(found["sid"][1]))
            return found
        monkeypatch.setattr(module, "slots_added", counted)

    spy(edge_pieces)
    spy(whole_hour_folds)
    question = (store, "gpu.sm_active", None, None, window)
    answer(*question, bindings)
    gpu, held = next((g, h) for g, h in bindings.items() if h[-1].end is None)
    last = held[-1]
    ended = T0 + timedelta(hours=rng.randint(1, 2), minutes=rng.randint(1, 59), seconds=7)
    changes = [
        {**bindings, gpu: [*held[:-1], Binding(last.start, max(ended, last.start + HOUR),
                                               last.allocation, last.project)]},
        {**bindings, gpu: [*held[:-1], Binding(last.start + timedelta(minutes=3), None,
                                               last.allocation, last.project)]},
        {**bindings, (GPUS[-1], None): [Binding(T0 + timedelta(minutes=17), None, "new",
                                                "p2")]},
        {k: v for k, v in bindings.items() if k != next(iter(bindings))},
    ]
    slots = sum(len(h) for h in bindings.values())
    for changed in changes:
        answer(*question, bindings)  # the slots before, kept again
        looked_for.clear()
        got = answer(*question, changed)
        assert looked_for and max(looked_for) < slots // 2  # the few it adds, not all
        assert_same(got, without_folds(monkeypatch, *question, changed))
        assert_same(got, answer(*question, changed, tier=Tier.MINUTE))
    store.close()


def test_late_samples_in_the_grace_reach_the_kept_raw_minutes(tmp_path, monkeypatch):
    """The raw minutes past the minute tier are read once and kept (edge_minute_sums.py,
    raw_writes.py), yet samples may arrive late within the rollup grace: one written
    (straight, or through the journal) after a first question changes the next answer as
    it changes the rows', and only its minute and later ones are read again."""
    from gpufleet.tsdb import edge_minute_sums
    from gpufleet.tsdb.protocol import MINUTE_MS, SampleColumns

    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1, apply_interval_s=None)
    store.write(random_history(random.Random(12)))
    store.rollup(T0 + 3 * HOUR + timedelta(minutes=21))
    bindings = {(gpu, None): [Binding(T0 - HOUR, None, f"a-{gpu}", "p1")] for gpu in GPUS}
    window = (timedelta(minutes=25, seconds=31), 3 * HOUR + timedelta(minutes=25), 24 * HOUR)
    reads: list[tuple[int, int]] = []
    real = edge_minute_sums._raw_minutes

    def counted(cur, *series, lo_ms, hi_ms):
        reads.append(((lo_ms - to_ms(T0 + 3 * HOUR)) // MINUTE_MS,
                      (hi_ms - to_ms(T0 + 3 * HOUR)) // MINUTE_MS))
        return real(cur, *series, lo_ms, hi_ms)
    monkeypatch.setattr(edge_minute_sums, "_raw_minutes", counted)
    question = (store, "gpu.sm_active", None, None, window, bindings)

    def checked() -> dict:
        reads.clear()
        got = answer(*question)
        assert_same(got, without_folds(monkeypatch, *question))
        assert_same(got, answer(*question, tier=Tier.MINUTE))
        return got

    first = checked()
    assert reads == [(21, 25)]  # 3:21 to 3:25 (the minutes of the grace), read once
    assert checked() == first and reads == []  # kept: nothing read
    store.write([Sample(series("gpu.sm_active", GPUS[0]), T0 + 3 * HOUR
                        + timedelta(minutes=22, seconds=13), 1000.0)])
    late = checked()
    assert late != first and reads == [(22, 25)]  # 3:21 kept; 3:22 on read again
    at_ms = to_ms(T0 + 3 * HOUR + timedelta(minutes=23, seconds=41))
    store.write_columns([("late:1", SampleColumns([series("gpu.sm_active", GPUS[1])], [0],
                                                  [at_ms], [2000.0]))])
    assert checked() != late and reads == [(23, 25)]
    store.close()


def test_a_repeated_fill_takes_no_cursor_until_the_hours_move(tmp_path, monkeypatch):
    """With the extent of the store's last rollup known, fills whose slots and hours are
    the last ones' take no cursor; a rollup moving the hours makes them fill again, and
    the answer stays the rows'."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write(random_history(random.Random(13)))
    store.rollup(T0 + 3 * HOUR + timedelta(minutes=21))
    bindings = random_bindings(random.Random(13))
    cursors = []
    real = store._new_cursor
    monkeypatch.setattr(store, "_new_cursor", lambda: cursors.append(1) or real())
    store._pieces._new_cursor = store._folds._new_cursor = store._new_cursor
    window = (timedelta(minutes=30), 3 * HOUR + timedelta(minutes=21), 24 * HOUR)
    question = (store, "gpu.sm_active", None, None, window, bindings)
    first = answer(*question)
    assert len(cursors) == 2  # the pieces' fill and the folds'
    cursors.clear()
    assert answer(*question) == first and cursors == []
    store.rollup(T0 + 4 * HOUR + timedelta(minutes=2))  # the hour 3:00 rolled up
    later = (timedelta(minutes=30), 4 * HOUR + timedelta(minutes=2), 24 * HOUR)
    got = answer(store, "gpu.sm_active", None, None, later, bindings)
    assert len(cursors) == 2
    assert_same(got, without_folds(monkeypatch, store, "gpu.sm_active", None, None, later,
                                   bindings))
    store.close()
