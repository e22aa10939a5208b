"""The partial hours of bindings (edge pieces) are folded once and kept (tsdb/edge_pieces.py):
a later query reads them from the cache, with the minute tier's answer; new bindings and
newly rolled-up hours get theirs; the hours at the window's edges are not kept."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.tsdb import Binding, Sample, Tier, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.edge_pieces import CACHE
from gpufleet.tsdb.protocol import Retention, to_ms
from tests.tsdb.test_tiers import answer, assert_same
from tests.tsdb_behaviour import HOUR, T0, at


@pytest.fixture
def store(tmp_path):
    """GPU-a at 40 % and GPU-b at 70 % for four hours (GPU-b silent in hour 2), sampled
    every 10 s, rolled up to the end of hour 3."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1)
    store.write([Sample(series("gpu.sm_active", gpu), at(i * 10), value)
                 for i in range(4 * 360) for gpu, value in (("GPU-a", 40.0), ("GPU-b", 70.0))
                 if not (gpu == "GPU-b" and 720 <= i < 1080)])
    store.rollup(T0 + 3 * HOUR)
    yield store
    store.close()


def spoil(store, lo, hi) -> None:
    """Overwrite the minutes in [lo, hi): a query that reads them shows it."""
    store._con.execute("UPDATE rollup_1m SET v_mean = 99 WHERE bucket_ms >= $1 "
                       "AND bucket_ms < $2", [to_ms(lo), to_ms(hi)])


def kept(store) -> list[tuple]:
    return store._con.execute(f"SELECT sid, lo_ms, hi_ms, n FROM {CACHE}.piece "
                              "ORDER BY ALL").fetchall()


WINDOW = (timedelta(0), 3 * HOUR, 3 * HOUR)


def test_a_piece_is_folded_once_and_read_from_the_cache(store):
    bindings = {("GPU-a", None): [Binding(T0 + timedelta(minutes=30), None, "a", "p1")]}
    first = answer(store, "gpu.sm_active", None, None, WINDOW, bindings)
    assert first == {("p1",): [(T0, pytest.approx(40.0))]}
    assert [(lo, hi, n) for _, lo, hi, n in kept(store)] == \
        [(to_ms(T0 + timedelta(minutes=30)), to_ms(T0 + HOUR), 30 * 6)]
    spoil(store, T0 + timedelta(minutes=30), T0 + HOUR)
    minutes = answer(store, "gpu.sm_active", None, None, WINDOW, bindings, tier=Tier.MINUTE)
    assert minutes == {("p1",): [(T0, pytest.approx((30 * 99 + 120 * 40) / 150))]}
    # The kept piece answers, not the (spoiled) minutes: proof the cache is read.
    assert answer(store, "gpu.sm_active", None, None, WINDOW, bindings) == first


def test_new_bindings_and_hours_get_their_pieces(store):
    one = {("GPU-a", None): [Binding(T0 + timedelta(minutes=30), None, "a", "p1")]}
    answer(store, "gpu.sm_active", None, None, WINDOW, one)
    more = {**one, ("GPU-b", None): [
        Binding(T0 + timedelta(minutes=10), T0 + timedelta(minutes=50), "b1", "p2"),
        Binding(T0 + timedelta(minutes=50), T0 + 2 * HOUR + timedelta(minutes=20), "b2",
                "p2")]}
    for group_by in (("project",), ("allocation",), ()):
        mixed = answer(store, "gpu.sm_active", None, None, WINDOW, more, group_by=group_by)
        minutes = answer(store, "gpu.sm_active", None, None, WINDOW, more, tier=Tier.MINUTE,
                         group_by=group_by)
        assert_same(mixed, minutes)
    # b1 lies inside hour 0; b2 starts in hour 0 and ends in hour 2, when GPU-b was
    # silent: that piece is kept empty, so it is not looked for again.
    assert [(lo, hi, n) for _, lo, hi, n in kept(store)][1:] == [
        (to_ms(T0 + timedelta(minutes=10)), to_ms(T0 + timedelta(minutes=50)), 40 * 6),
        (to_ms(T0 + timedelta(minutes=50)), to_ms(T0 + HOUR), 10 * 6),
        (to_ms(T0 + 2 * HOUR), to_ms(T0 + 2 * HOUR + timedelta(minutes=20)), 0)]
    store.rollup(T0 + 4 * HOUR)
    window = (timedelta(0), 4 * HOUR, 4 * HOUR)
    ending = {("GPU-a", None): [Binding(T0 + timedelta(minutes=30),
                                        T0 + 3 * HOUR + timedelta(minutes=15), "a", "p1")]}
    mixed = answer(store, "gpu.sm_active", None, None, window, ending)
    assert mixed == answer(store, "gpu.sm_active", None, None, window, ending,
                           tier=Tier.MINUTE)
    assert (to_ms(T0 + 3 * HOUR), to_ms(T0 + 3 * HOUR + timedelta(minutes=15)), 15 * 6) in \
        [(lo, hi, n) for _, lo, hi, n in kept(store)]


def test_the_hours_at_the_window_edges_are_not_kept(store):
    """A window from 0:20 to 2:40 moves with every query: its edge hours are read as
    minutes each time, and nothing is kept for them."""
    bindings = {("GPU-a", None): [Binding(T0 - HOUR, None, "a", "p1")]}
    window = (timedelta(minutes=20), 2 * HOUR + timedelta(minutes=40), 3 * HOUR)
    mixed = answer(store, "gpu.sm_active", None, None, window, bindings)
    assert_same(mixed, answer(store, "gpu.sm_active", None, None, window, bindings,
                              tier=Tier.MINUTE))
    assert kept(store) == []


def test_pieces_are_not_kept_longer_than_the_minutes_they_fold(tmp_path):
    """With a minute retention of 2 h, only the last 2 rolled-up hours keep pieces."""
    store = DuckDBTelemetryStore(tmp_path / "t.duckdb", threads=1,
                                 retention=Retention(minute=2 * HOUR))
    store.write([Sample(series("gpu.sm_active", "GPU-a"), at(i * 10), 40.0)
                 for i in range(4 * 360)])
    store.rollup(T0 + 3 * HOUR)
    bindings = {("GPU-a", None): [Binding(T0 + timedelta(minutes=30),
                                          T0 + HOUR + timedelta(minutes=10), "a", "p1")]}
    window = (timedelta(0), 2 * HOUR, 2 * HOUR)  # within the minute retention: minutes
    mixed = answer(store, "gpu.sm_active", None, None, window, bindings)
    assert_same(mixed, answer(store, "gpu.sm_active", None, None, window, bindings,
                              tier=Tier.MINUTE))
    # Hour 0 is more than 2 h behind the rolled-up hours: read as minutes, not kept.
    assert [(lo, hi) for _, lo, hi, _ in kept(store)] == \
        [(to_ms(T0 + HOUR), to_ms(T0 + HOUR + timedelta(minutes=10)))]
    store.close()
