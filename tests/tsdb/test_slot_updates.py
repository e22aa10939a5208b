"""The slots updated for the units whose bindings changed (slot_updates.py) are the very
slots `select_slots` gives for the new bindings: same slots, order and group numbers."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from gpufleet.tsdb.duckdb_query import select_slots
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import Binding, SeriesLabels, Tier
from gpufleet.tsdb.slot_updates import SelectionPlaces, changed_units, updated_slots

T0 = datetime(2026, 3, 1, tzinfo=UTC)
METRIC = "gpu.sm_active"
PROJECTS = [f"p{k}" for k in range(7)]
GROUPINGS = [("project",), ("allocation",), ("project", "allocation"),
             ("gpu_uuid", "project"), ("node", "allocation"), ("model",)]


def _selection(units: int) -> list[tuple[int, SeriesLabels]]:
    """Series in dictionary order: one per unit, a second (another label) for some,
    MIG instances beside whole GPUs; ids not in selection order."""
    pairs = []
    for u in range(units):
        gpu, mig = f"GPU-{u // 2}", (None if u % 2 == 0 else f"MIG-{u}")
        pairs.append((1000 - u, SeriesLabels(METRIC, gpu, mig, node=f"n{u % 5}",
                                             model=f"k{u % 3}")))
        if u % 7 == 0:
            pairs.append((2000 + u, SeriesLabels(METRIC, gpu, mig, (("x", "1"),),
                                                 node=f"n{u % 5}")))
    return pairs


def _binding(rng: random.Random) -> Binding:
    start = T0 + timedelta(minutes=rng.randrange(0, 1440))
    end = None if rng.random() < 0.5 else start + timedelta(minutes=rng.randrange(1, 600))
    project = rng.choice(PROJECTS)
    return Binding(start, end, f"a-{project}-{rng.randrange(3)}", project)


def _units(pairs) -> list[tuple[str, str | None]]:
    return sorted({(s.gpu_uuid, s.mig_uuid) for _, s in pairs}, key=str)


def _changed(rng: random.Random, bindings: dict, units: list) -> dict:
    """A few units' bindings changed: one added, ended, gone (out of the window), a unit
    no longer held, a unit newly held, a binding relabelled — as a new mapping."""
    new = dict(bindings)
    for _ in range(rng.randint(1, 3)):
        unit = rng.choice(units)
        held = list(new.get(unit, ()))
        move = rng.randrange(6)
        if move == 0 or not held:
            held.append(_binding(rng))
        elif move == 1:
            k = rng.randrange(len(held))
            b = held[k]
            held[k] = Binding(b.start, b.start + timedelta(minutes=5), b.allocation,
                              b.project)
        elif move == 2:
            del held[rng.randrange(len(held))]
        elif move == 3:
            held = []
        elif move == 4:
            k = rng.randrange(len(held))
            b = held[k]
            held[k] = Binding(b.start, b.end, b.allocation, rng.choice(PROJECTS))
        else:
            rng.shuffle(held)
        if held:
            new[unit] = tuple(held)
        else:
            new.pop(unit, None)
    return new


def _series_of(pairs, units) -> list:
    """The units' series, in an order of their own (as the store's GPU index gives them),
    and one series that is not in the selection."""
    wanted = set(units)
    found = [(sid, s) for sid, s in reversed(pairs) if (s.gpu_uuid, s.mig_uuid) in wanted]
    return [*found, (99_999, SeriesLabels(METRIC, "GPU-elsewhere"))]


def _same(got, want) -> None:
    assert got.keys == want.keys and list(got.keys) == list(want.keys)
    for name in ("slot", "sid", "grp", "from_ms", "to_ms"):
        np.testing.assert_array_equal(got.columns()[name][1], want.columns()[name][1])
    assert (got.ids, got.groups, got.froms, got.tos) == \
        (want.ids, want.groups, want.froms, want.tos)


@pytest.mark.parametrize("group_by", GROUPINGS)
@pytest.mark.parametrize("owner_filters", [{}, {"project": {"p1", "p2", "p3"}}])
def test_updated_slots_equal_a_fresh_walk(group_by, owner_filters) -> None:
    rng = random.Random(hash((group_by, len(owner_filters))) & 0xFFFF)
    pairs = _selection(300)
    units = _units(pairs)
    bindings = {u: (_binding(rng),) for u in units if rng.random() < 0.7}
    slots = select_slots(pairs, group_by, bindings, owner_filters)
    places = SelectionPlaces(pairs)
    updates = 0
    for _ in range(60):
        new = _changed(rng, bindings, units)
        changed = changed_units(bindings, new)
        if changed is None:
            slots = select_slots(pairs, group_by, new, owner_filters)
        else:
            assert set(changed) == {u for u in set(bindings) | set(new)
                                    if bindings.get(u) != new.get(u)}
            slots = updated_slots(slots, places, _series_of(pairs, changed), group_by, new,
                                  owner_filters)
            updates += 1
        _same(slots, select_slots(pairs, group_by, new, owner_filters))
        bindings = new
    assert updates > 40  # the update path, not the fallback, is what was compared


def test_a_group_appearing_first_renumbers_the_groups() -> None:
    """A new project on the first unit takes group 0, as the walk would number it."""
    pairs = _selection(10)
    units = _units(pairs)
    bindings = {u: (Binding(T0, None, "a", "p1"),) for u in units}
    slots = select_slots(pairs, ("project",), bindings, {})
    first = (pairs[0][1].gpu_uuid, pairs[0][1].mig_uuid)
    new = {**bindings, first: (Binding(T0, None, "b", "p9"),)}
    got = updated_slots(slots, SelectionPlaces(pairs),
                        _series_of(pairs, changed_units(bindings, new)), ("project",), new, {})
    _same(got, select_slots(pairs, ("project",), new, {}))
    assert list(got.keys) == [("p9",), ("p1",)]


def test_changed_units_gives_up_on_a_large_change() -> None:
    rng = random.Random(5)
    pairs = _selection(100)
    units = _units(pairs)
    old = {u: (_binding(rng),) for u in units}
    assert changed_units(old, dict(old)) == []
    # Equal bindings in new objects for some units: compared by value, none changed.
    copied = {u: tuple(Binding(b.start, b.end, b.allocation, b.project) for b in held)
              if k % 4 == 0 else held for k, (u, held) in enumerate(old.items())}
    assert changed_units(old, copied) == []
    one = units[4]
    copied[one] = (*copied[one], _binding(rng))
    assert changed_units(old, copied) == [one]
    # All in new objects (the binding table read again): the walk is cheaper.
    renewed = {u: tuple(Binding(b.start, b.end, b.allocation, b.project) for b in held)
               for u, held in old.items()}
    assert changed_units(old, renewed) is None
    assert changed_units(old, {u: (_binding(rng),) for u in units}) is None
    assert changed_units(old, {}) is None


def _store_with_series(units: int) -> tuple[DuckDBTelemetryStore, list]:
    from gpufleet.tsdb.protocol import Sample

    store = DuckDBTelemetryStore(":memory:", apply_interval_s=None)
    pairs = _selection(units)
    samples = [Sample(labels, T0 + timedelta(minutes=m, seconds=10 * (sid % 6)),
                      float((sid * 7 + m * 3) % 100))
               for sid, labels in pairs for m in range(0, 1440, 37)]
    store.write(samples)
    store.rollup(T0 + timedelta(hours=25))
    return store, pairs


def test_store_answers_as_a_fresh_selection_while_bindings_change(monkeypatch) -> None:
    """Through the store: a question asked again with a few units' bindings changed, and
    with its filters or grouping changed in between, answers as a store that walked the
    series anew (its last slots forgotten before each question)."""
    from gpufleet.tsdb import duckdb_store

    updates = []

    def counted(*args, **kwargs):
        updates.append(1)
        return updated_slots(*args, **kwargs)

    monkeypatch.setattr(duckdb_store, "updated_slots", counted)
    rng = random.Random(11)
    store, pairs = _store_with_series(120)
    units = _units(pairs)
    bindings = {u: (_binding(rng),) for u in units if rng.random() < 0.8}
    start, end = T0, T0 + timedelta(hours=24)
    questions = [dict(group_by=("project",)), dict(group_by=("allocation",)),
                 dict(group_by=("project",), filters={"project": ["p1", "p4"]}),
                 dict(group_by=("node", "project"), filters={"node": ["n1", "n2", "n3"]})]
    try:
        for step in range(40):
            question = questions[step // 10] if step % 3 else questions[0]
            bindings = _changed(rng, bindings, units)

            def ask(q=question, b=bindings, step=timedelta(hours=1 if step % 2 else 24)):
                return store.query_range(METRIC, start, end, step, bindings=b, **q)

            got = ask()
            kept = store._last_slots
            store._last_slots = None
            assert got == ask()
            store._last_slots = kept
            # No kept folds, pieces or sums: the minute tier's rows, read by the
            # general statement (equal to the last bits of floating-point sums).
            minutes = ask(q={**question, "tier": Tier.MINUTE})
            assert [(r.labels, [t for t, _ in r.points]) for r in got] == \
                [(r.labels, [t for t, _ in r.points]) for r in minutes]
            assert [v for r in got for _, v in r.points] == \
                pytest.approx([v for r in minutes for _, v in r.points], rel=1e-9)
    finally:
        store.close()
    assert len(updates) >= 15  # the update path answered, not only the walk



def test_edge_sums_leave_out_the_unbound_series_their_id_range_holds() -> None:
    """Half the units never bound: their series lie among the bound ones' ids, which the
    edge sums read as one range (edge_minute_sums.series_sql), so their rows must be
    dropped — the answer is the minute tier's."""
    store, pairs = _store_with_series(80)
    units = _units(pairs)
    bindings = {u: (Binding(T0 + timedelta(minutes=7 * k), None, "a", f"p{k % 3}"),)
                for k, u in enumerate(units) if k % 2 == 0}
    start, end = T0 + timedelta(minutes=23), T0 + timedelta(hours=24, minutes=23)
    try:
        def ask(**kw):
            return store.query_range(METRIC, start, end, timedelta(hours=24),
                                     bindings=bindings, group_by=("project",), **kw)

        got, minutes = ask(), ask(tier=Tier.MINUTE)
        assert [r.labels for r in got] == [r.labels for r in minutes]
        assert [v for r in got for _, v in r.points] == \
            pytest.approx([v for r in minutes for _, v in r.points], rel=1e-9)
    finally:
        store.close()


def test_rows_of_other_series_in_the_range_are_dropped() -> None:
    from gpufleet.tsdb.edge_minute_sums import _of_series, series_sql

    sids = np.array([10, 11, 13, 14], dtype=np.int32)
    assert series_sql(sids, "v") == "series_id BETWEEN 10 AND 14"
    assert series_sql(np.array([10, 99], dtype=np.int32), "v") == \
        "series_id IN (SELECT sid FROM v)"
    got = _of_series(sids, {"series_id": np.array([14, 12, 10, 15, 9], dtype=np.int32),
                            "w": np.array([1.0, 2.0, 3.0, 4.0, 5.0])})
    assert got["series_id"].tolist() == [14, 10] and got["w"].tolist() == [1.0, 3.0]
