"""Each unit's newest raw sample of one metric, kept in memory as samples are stored: the
embedded store's `latest_of_units` (the idle list's memory read) without a DuckDB statement.

Kept by unit (gpu_uuid, mig_uuid), folded as `newest_of_units` folds a unit's series: a
question looks its ~1,500 units up, with no walk of their series. Built the first time a
metric is asked, from the raw tier's rows at or after a horizon (the store's rolled-up
minutes less an hour: a read of the newest row groups, not of the whole tier), then kept by
every transaction that stores samples, and trimmed by retention as the raw tier is. It
answers a question whose `since` is at or after its horizon: a unit with no sample since
then has none since `since` either, so units that stopped reporting drop out as they do in
DuckDB; an older `since` is DuckDB's to answer. Only for metrics whose raw values
compaction keeps as received (`Metric.stored_decimals` None): a rounded one would answer
differently once its hour is compacted.

At the same time the larger value wins, as `newest_of_units` folds units (DuckDB's
`arg_max` picks any of a series' samples at one time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from gpufleet.tsdb.sorted_ids import places_in_sorted

Unit = tuple[str, str | None]  # (gpu_uuid, mig_uuid)


class KeptLatest:
    """(time ms, value) of the newest sample of each unit among one metric's series, at or
    after `horizon_ms`: folded by unit as `newest_of_units` folds, so a question looks its
    units up and never its series. Not thread-safe for writers: the store updates it under
    its lock; readers only look single units up."""

    def __init__(self, horizon_ms: int, rows: Iterable[tuple[int, int, float]],
                 series: Mapping[int, Unit]) -> None:
        self.horizon_ms = horizon_ms
        self._newest: dict[Unit, tuple[int, float]] = {}
        self._series = np.empty(0, dtype=np.int64)
        self._unit_of: Mapping[int, Unit] = {}
        self.track(series)
        self._fold((sid, ms, value) for sid, ms, value in rows if ms >= horizon_ms)

    @property
    def tracked(self) -> int:
        return len(self._series)

    def track(self, series: Mapping[int, Unit]) -> None:
        """The metric's series ids and their units (all of them: other ids are not kept)."""
        self._unit_of = series
        self._series = np.unique(np.fromiter(series, dtype=np.int64, count=len(series)))

    def add(self, ids: np.ndarray, times_ms: np.ndarray, values: np.ndarray) -> None:
        """Samples just stored (any metrics', in any order)."""
        if not len(ids) or not len(self._series):
            return
        _, mine = places_in_sorted(self._series, ids)
        mine &= times_ms >= self.horizon_ms
        if not mine.any():
            return
        ids, times_ms, values = ids[mine], times_ms[mine], values[mine]
        order = np.lexsort((values, times_ms, ids))  # by series, then time, then value
        ids, times_ms, values = ids[order], times_ms[order], values[order]
        last = np.flatnonzero(np.append(ids[1:] != ids[:-1], True))
        self._fold(zip(ids[last].tolist(), times_ms[last].tolist(), values[last].tolist(),
                       strict=True))

    def _fold(self, rows: Iterable[tuple[int, int, float]]) -> None:
        newest, unit_of = self._newest, self._unit_of
        for sid, ms, value in rows:
            unit = unit_of[sid]
            kept = newest.get(unit)
            if kept is None or (ms, value) > kept:
                newest[unit] = (ms, value)

    def drop_before(self, ms: int) -> None:
        """Retention removed the raw rows before `ms`: so does this."""
        if ms > self.horizon_ms:
            self.horizon_ms = ms
            self._newest = {unit: kept for unit, kept in self._newest.items()
                            if kept[0] >= ms}

    def newest_of(self, units: Iterable[Unit], since_ms: int) -> dict[Unit, float]:
        """Each of `units`' newest value at or after `since_ms` (not before the horizon:
        the caller asks DuckDB then)."""
        newest = self._newest
        found = {}
        for unit in units:
            kept = newest.get(unit)
            if kept is not None and kept[0] >= since_ms:
                found[unit] = kept[1]
        return found
