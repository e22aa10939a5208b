"""A range query's slots brought up to date when only some units' bindings changed: how a
"last 24 h" question asked once a minute pays for the bindings that started, ended or left
the window since the last minute, not for every series again.

`select_slots` walks every selected series (10,000 at 10,000 GPUs) into its slots (7,251):
~11-24 ms CPU (load-dependent), paid whenever the caller's `Bindings` object is a new one —
on a moving window about a third of the minutes, each time a binding starts or ends or an
ended one leaves the window. Yet a series' slots depend only on its own unit's bindings
(and on the group keys, the owner filters and the selection, which are the same while the
question is). So the units whose bindings differ between the last question's mapping and
this one are found (`changed_units`: one dict look-up a unit, the same binding tuples
passed over by identity, the few others compared by value), their series' slots are made anew by
`select_slots` itself, and spliced into the last slots where those series stand in the
selection's order. The groups are then numbered again by first appearance, as
`select_slots` numbers them, so the result is the very `Slots` the full walk would give:
same slots in the same order, same group numbers.

Anything else that changed — metric, filters, grouping, the series dictionary — gives a new
key and the full walk (duckdb_store.py `_slots_of`); so does a change touching more than a
tenth of the units (a different binding set: the splice would cost as much as the walk), and
so do bindings mostly in new objects — the slot cache read the binding table again, as it
does when a binding starts or ends in the state store: compared by value they cost more
than the walk. The moving window's own changes (bindings entering or leaving it) keep
the cache's objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpufleet.tsdb.duckdb_query import Slots, select_slots
from gpufleet.tsdb.protocol import Bindings, SeriesLabels
from gpufleet.tsdb.sorted_ids import places_in_sorted

_MAX_CHANGED_FRACTION = 0.1


def changed_units(old: Bindings, new: Bindings) -> list | None:
    """The units whose bindings differ between `old` and `new` (added, gone or changed),
    or None when more than a tenth of the units did, or when most of `new`'s binding
    tuples are not `old`'s objects."""
    limit = max(int(_MAX_CHANGED_FRACTION * max(len(old), len(new))), 1)
    get = old.get
    # The same binding tuples (a unit held once: the slot's own) are passed over by
    # identity in one comprehension; a unit held more than once gets a new tuple per
    # question, compared item by item (the same binding objects: by identity first).
    differ = [unit for unit, held in new.items() if get(unit) is not held]
    if len(differ) > max(len(new) // 2, limit):
        # Most tuples are new objects (the binding table was read again): comparing them
        # by value costs more than the walk (10.5 ms against 9.2 at 7,500 units).
        return None
    changed = [unit for unit in differ if get(unit) != new[unit]]
    if len(changed) > limit:
        return None
    added = sum(1 for unit in changed if unit not in old)
    if len(old) + added != len(new):  # some of the old units are gone
        changed.extend(old.keys() - new.keys())
        if len(changed) > limit:
            return None
    return changed


class SelectionPlaces:
    """Each series id's place in a query's selection (the series `select_slots` walked, in
    its order): sorted ids beside their places, built once per selection (a walk of it,
    ~1 ms at 10,000 series) and kept with the slots while the question's key stands.
    Nothing per series is kept as a Python object (10,000 tuples kept alive across
    questions set off full garbage collections), and ids are not indexed densely: they
    are allocated in blocks per metric across the whole INTEGER range (series_ids.py)."""

    def __init__(self, selected: Iterable[tuple[int, SeriesLabels]]):
        import numpy as np  # as duckdb_columns: not at import

        ids = np.fromiter((sid for sid, _ in selected), dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        self._ids = ids[order]
        self._places = order

    def of(self, sids):
        """The places of the ids (array), -1 for an id not in the selection."""
        import numpy as np

        sids = np.asarray(sids, dtype=np.int64)
        if not len(self._ids):
            return np.full(len(sids), -1, dtype=np.int64)
        at, found = places_in_sorted(self._ids, sids)
        return np.where(found, self._places[at], -1)


def updated_slots(last: Slots, places: SelectionPlaces, series: Iterable[tuple[int, SeriesLabels]],
                  group_by: Sequence[str], bindings: Bindings,
                  owner_filters: Mapping[str, set[str]]) -> Slots:
    """`select_slots` of the selection for `bindings`, given the slots `last` it gave for
    bindings that differ only for the units of `series` (the series of those units, any
    order; those not in the selection, per `places`, are left out)."""
    import numpy as np

    series = list(series)
    at = places.of([sid for sid, _ in series]).tolist()
    chosen = sorted((place, sid, labels) for place, (sid, labels) in zip(at, series,
                                                                         strict=True)
                    if place >= 0)
    if not chosen:
        return last
    changed = [at for at, _, _ in chosen]
    fresh = select_slots([(sid, labels) for _, sid, labels in chosen], group_by, bindings,
                         owner_filters)
    old = last.columns()
    # Each old slot's series' place in the selection: non-decreasing along the slots.
    old_at = places.of(old["sid"][1])
    new_at = places.of(fresh.ids)
    # Group numbers: the last ones for keys seen before, the next free ones for new keys.
    all_keys = list(last.keys)
    numbers = []
    for key in fresh.keys:  # in fresh's group order
        number = last.keys.get(key)
        if number is None:
            number = len(all_keys)
            all_keys.append(key)
        numbers.append(number)
    fresh_groups = np.asarray(numbers, dtype=np.int64)[
        np.asarray(fresh.groups, dtype=np.int64)] if fresh.ids else np.zeros(0, np.int64)
    columns = {"sid": (old["sid"][1], fresh.ids), "grp": (old["grp"][1], fresh_groups),
               "from_ms": (old["from_ms"][1], fresh.froms),
               "to_ms": (old["to_ms"][1], fresh.tos)}
    # The old slots of the changed series go; the fresh ones go where those series stand.
    dropped = np.isin(old_at, changed)
    kept = np.flatnonzero(~dropped)
    # Merged by place in the selection (no place holds both old and fresh slots: a
    # changed series keeps none of its old ones); stable, so a series' fresh slots keep
    # the order of its bindings.
    order = np.argsort(np.concatenate([old_at[kept], new_at]), kind="stable")
    merged = {name: np.concatenate([np.asarray(before)[kept],
                                    np.asarray(after, dtype=np.asarray(before).dtype)])[order]
              for name, (before, after) in columns.items()}
    return _numbered(merged, all_keys)


def _numbered(columns: dict, all_keys: list) -> Slots:
    """Slots of the merged columns, their groups numbered by first appearance (as
    `select_slots` numbers them; a group no slot holds any more is dropped)."""
    import numpy as np

    grp = columns["grp"]
    present, first = np.unique(grp, return_index=True)
    order = present[np.argsort(first)]  # old numbers, in order of first appearance
    if not np.array_equal(order, np.arange(len(all_keys))):
        renumber = np.full(len(all_keys), -1, dtype=np.int64)
        renumber[order] = np.arange(len(order))
        grp = renumber[grp]
    return Slots.of_columns({all_keys[g]: n for n, g in enumerate(order.tolist())},
                            columns["sid"], grp, columns["from_ms"], columns["to_ms"])
