"""Range queries on the DuckDB store: the plan (tier, window, step, aggregation) and the SQL
that folds each slot's rows into steps and combines the slots per group.

A query's selection is a list of slots (`Slots`): one series over one binding interval, or
over all time when the query has no bindings. Ownership is attributed per row by the row's
start, so a query through bindings is answered as the 1-minute tier answers it. Reading
minutes for the whole window is the cost of that (a 24-hour project average at 100,000
GPUs folds 144 M minute rows), so when the caller lets the store choose, hourly rows stand
in for the minutes of the hours a binding covers whole (mixed_tiers.py), with the same
answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.domain.telemetry.vocabulary import AcrossSeries, OverTime
from gpufleet.tsdb.duckdb_columns import INT32, INT64
from gpufleet.tsdb.edge_pieces import EdgePieces
from gpufleet.tsdb.mixed_tiers import MixedTiers, aliased_row
from gpufleet.tsdb.protocol import (
    HOUR_MS,
    MINUTE_MS,
    OWNER_LABELS,
    Binding,
    Bindings,
    Retention,
    SeriesLabels,
    Tier,
    ValueFilter,
    aggregation_of,
    choose_tier,
    to_ms,
)
from gpufleet.tsdb.rollups import TierSources, fold
from gpufleet.tsdb.whole_hour_folds import NOT_KEPT, WholeHourFolds, kept_rows, whole_hours


def slots_table(view: str) -> str:
    """SQL: the query's selection as a temporary table of its read cursor, from the view
    `Slots.columns()` registered as (duckdb_columns.py): as a CTE over parameter lists,
    every reference to it copied the lists into the plan (at 10,000 GPUs the planner spent
    more time on that than the query ran), and the lists cost ~1 µs a value to pass."""
    return f"CREATE TEMP TABLE sel AS SELECT slot, sid, grp, from_ms, to_ms FROM {view}"

_IN_SLOTS = "series_id IN (SELECT sid FROM sel)"
_FOREVER_MS = 2**62
_OVER_TIME = {OverTime.MEAN: "v_mean", OverTime.LAST: "v_last", OverTime.INCREASE: "inc"}
_ACROSS = {AcrossSeries.MEAN: "avg(v)", AcrossSeries.SUM: "sum(v)",
           AcrossSeries.MAX: "max(v)", AcrossSeries.COUNT: "count_if(v <> 0)"}
_TIER_WIDTH_MS = {Tier.RAW: 1, Tier.MINUTE: MINUTE_MS, Tier.HOUR: HOUR_MS}


class Slots:
    """The query's selection: series, each over one binding interval or all time, and the
    group each slot counts towards (`groups`: group key → its number)."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.groups: list[int] = []
        self.froms: list[int] = []
        self.tos: list[int] = []
        self.keys: dict[tuple, int] = {}
        self._arrays: dict | None = None

    def add(self, sid: int, group: int, binding: Binding | None) -> None:
        self.ids.append(sid)
        self.groups.append(group)
        self.froms.append(-_FOREVER_MS if binding is None else binding.start_ms)
        self.tos.append(_FOREVER_MS if binding is None or binding.end_ms is None
                        else binding.end_ms)

    @classmethod
    def of_columns(cls, keys: dict[tuple, int], sid, grp, from_ms, to_ms) -> Slots:
        """Slots made from numpy columns (slot_updates.py): lists and arrays both set."""
        import numpy as np  # as duckdb_columns: not at import

        slots = cls()
        slots.keys = keys
        slots.ids, slots.groups = sid.tolist(), grp.tolist()
        slots.froms, slots.tos = from_ms.tolist(), to_ms.tolist()
        slots._arrays = {"slot": (INT32, np.arange(len(slots.ids), dtype=INT32)),
                         "sid": (INT32, np.asarray(sid, dtype=INT32)),
                         "grp": (INT32, np.asarray(grp, dtype=INT32)),
                         "from_ms": (INT64, np.asarray(from_ms, dtype=INT64)),
                         "to_ms": (INT64, np.asarray(to_ms, dtype=INT64))}
        return slots

    def columns(self) -> dict[str, tuple[str, Sequence[int]]]:
        """The selection as columns for `duckdb_columns.registered` (`slots_table`): made
        numpy arrays once, on the first call after the selection is complete (the store
        may ask the same slots again: DuckDBTelemetryStore._slots_of)."""
        if self._arrays is None:
            import numpy as np  # as duckdb_columns: not at import

            self._arrays = {
                "slot": (INT32, np.arange(len(self.ids), dtype=INT32)),
                "sid": (INT32, np.asarray(self.ids, dtype=INT32)),
                "grp": (INT32, np.asarray(self.groups, dtype=INT32)),
                "from_ms": (INT64, np.asarray(self.froms, dtype=INT64)),
                "to_ms": (INT64, np.asarray(self.tos, dtype=INT64))}
        return self._arrays


def select_slots(selected: Iterable[tuple[int, SeriesLabels]], group_by: Sequence[str],
                 bindings: Bindings | None,
                 owner_filters: Mapping[str, set[str]]) -> Slots:
    """The slots of the selected series: one per series (no bindings), else one per binding
    of the series' unit that passes the owner filters, grouped by `group_by` (owner labels
    from the binding, the others from the series). One pass; at 100,000 GPUs a project
    average walks 75,000 bindings, so the loop does no more than it must."""
    slots = Slots()
    keys = slots.keys
    if bindings is None:
        for sid, labels in selected:
            key = tuple(labels.label(name) for name in group_by)
            slots.add(sid, keys.setdefault(key, len(keys)), None)
        return slots
    # Where each part of the key comes from: 0 / 1 the binding's allocation / project
    # (OWNER_LABELS' order), -1 the series.
    owner_at = [OWNER_LABELS.index(n) if n in OWNER_LABELS else -1 for n in group_by]
    allowed = [(OWNER_LABELS.index(k), v) for k, v in owner_filters.items()]
    ids, groups, froms, tos = slots.ids, slots.groups, slots.froms, slots.tos
    # Grouped by owner labels alone (by project: the common question), a binding's group
    # is one look-up by its owner pair; by one owner label, by that label's value (an
    # allocation often holds one GPU: its pair would be new nearly every binding).
    by_owner: dict[tuple[str, str], int] | None = \
        {} if all(at >= 0 for at in owner_at) else None
    single = owner_at[0] if len(owner_at) == 1 and owner_at[0] >= 0 else None
    by_value: dict[str, int] = {}
    for sid, labels in selected:
        held = bindings.get((labels.gpu_uuid, labels.mig_uuid))
        if not held:
            continue
        parts = None if by_owner is not None else \
            [(at, None if at >= 0 else labels.label(name))
             for at, name in zip(owner_at, group_by, strict=True)]
        for binding in held:
            owner = binding.owner
            if allowed and not all(owner[at] in values for at, values in allowed):
                continue
            if single is not None:
                value = owner[single]
                group = by_value.get(value)
                if group is None:
                    group = by_value[value] = keys.setdefault((value,), len(keys))
            elif by_owner is not None:
                group = by_owner.get(owner)
                if group is None:
                    key = tuple([owner[at] for at in owner_at])
                    group = by_owner[owner] = keys.setdefault(key, len(keys))
            else:
                key = tuple([owner[at] if at >= 0 else value for at, value in parts])
                group = keys.setdefault(key, len(keys))
            ids.append(sid)
            groups.append(group)
            froms.append(binding.start_ms)
            tos.append(_FOREVER_MS if binding.end_ms is None else binding.end_ms)
    return slots


@dataclass(frozen=True)
class RangePlan:
    """How one `query_range` reads: the tier, the window [lo_ms, hi_ms) (lo floored to the
    tier's width, the first step's start), the step, the rollup column the over-time
    aggregation takes, the across-series aggregate, and whether slots read hourly rows for
    the hours their binding covers whole (`whole_hours`; the tier is then the minute)."""

    tier: Tier
    lo_ms: int
    hi_ms: int
    step_ms: int
    column: str
    across: AcrossSeries
    whole_hours: bool = False

    def sql(self, minute_done_ms: int, hour_done_ms: int,
            pieces: tuple[int, int] = (0, 0), where: ValueFilter | None = None,
            folds_done_ms: int = NOT_KEPT) -> str:
        """The statement (over the table `slots_table` makes of `Slots.columns()`)
        answering (group, step start, value) rows, given how far the rollups have been
        folded, the hours [from, to) whose edge pieces are kept for this query's slots
        (`fill_pieces`) and the extent of the rolled-up hours their whole-hour folds are
        kept for (`fill_folds`); with `where`, the rows whose value passes it."""
        if self.reads_folds(hour_done_ms, folds_done_ms):
            return self._from_folds(minute_done_ms, hour_done_ms, where)
        if self.whole_hours:
            tagged = MixedTiers(self.lo_ms, self.hi_ms, self.step_ms, minute_done_ms,
                                hour_done_ms, *pieces).rows()
        else:
            sources = TierSources(minute_done_ms, hour_done_ms, _IN_SLOTS)
            tagged = f"""SELECT sel.slot AS series_id, {aliased_row('r')}
                         FROM ({sources.rows(self.tier, self.lo_ms, self.hi_ms)}) r
                         JOIN sel ON r.series_id = sel.sid
                          AND r.bucket_ms >= sel.from_ms AND r.bucket_ms < sel.to_ms"""
        return self._folded(tagged, where)

    def one_step(self) -> bool:
        """Whether the whole window is one step."""
        return self.step_ms >= self.hi_ms - self.lo_ms

    def reads_folds(self, hour_done_ms: int, folds_done_ms: int) -> bool:
        """Whether the slots' whole hours are read from the kept folds: kept for the very
        extent of the rolled-up hours this query's snapshot reads, the window one step."""
        return self.whole_hours and self.one_step() and folds_done_ms == hour_done_ms

    def _from_folds(self, minute_done_ms: int, hour_done_ms: int,
                    where: ValueFilter | None) -> str:
        """The statement reading each slot's kept fold of the window's whole hours
        (whole_hour_folds.py) and the minute tier's rows outside them."""
        first, end = whole_hours(self.lo_ms, self.hi_ms, hour_done_ms)
        kept = kept_rows(first, end)
        outside = [(lo, hi) for lo, hi in ((self.lo_ms, first), (end, self.hi_ms)) if lo < hi]
        if not outside:  # a slot's kept fold is its answer: one row a slot, one step
            having = '' if where is None else 'HAVING ' + where.sql(_ACROSS[self.across])
            return f"""SELECT grp, {self.lo_ms} AS bucket_ms, {_ACROSS[self.across]}
                FROM (SELECT sel.grp, k.{self.column} AS v FROM ({kept}) k
                      JOIN sel ON sel.slot = k.series_id)
                GROUP BY grp {having} ORDER BY grp"""
        sources = TierSources(minute_done_ms, hour_done_ms, _IN_SLOTS)
        parts = [f"({kept})"] + [f"""(SELECT sel.slot AS series_id, {aliased_row('r')}
                         FROM ({sources.minute(lo, hi)}) r
                         JOIN sel ON r.series_id = sel.sid
                          AND r.bucket_ms >= sel.from_ms AND r.bucket_ms < sel.to_ms)"""
                                 for lo, hi in outside]
        return self._folded(" UNION ALL ".join(parts), where)

    def _folded(self, tagged: str, where: ValueFilter | None) -> str:
        """The statement folding each slot's rows (`tagged`, the slot as `series_id`)
        into steps, then combining the slots per group."""
        # Each slot's rows are folded into steps on their own (carry: the step between two
        # rows of a slot goes to the later row's step), then combined per group.
        return f"""WITH per_slot AS (SELECT series_id AS slot, bucket_ms, {self.column} AS v
                         FROM ({fold(tagged, self.step_ms, self.lo_ms, carry=True)}))
            SELECT grp, bucket_ms, {_ACROSS[self.across]} FROM per_slot JOIN sel USING (slot)
            GROUP BY grp, bucket_ms
            {'' if where is None else 'HAVING ' + where.sql(_ACROSS[self.across])}
            ORDER BY grp, bucket_ms"""


def fill_pieces(plan: RangePlan, pieces: EdgePieces, slots: Slots) -> tuple[int, int]:
    """Keep the edge pieces this query's slots need (edge_pieces.py); returns the hours
    [from, to) the query may read them for ((0, 0): none; the plan reads minutes)."""
    if not plan.whole_hours:
        return (0, 0)
    tiers = MixedTiers(plan.lo_ms, plan.hi_ms, plan.step_ms, 0, _FOREVER_MS)
    return pieces.fill(tiers.spans(), slots.columns(), plan.lo_ms,
                       plan.hi_ms, tiers.in_one_step)


def fill_folds(plan: RangePlan, folds: WholeHourFolds, slots: Slots,
               pieces: tuple[int, int]) -> int:
    """Keep the folds of this query's slots over the window's whole hours
    (whole_hour_folds.py) when its window is one step, reading the edge pieces kept for
    the hours `pieces` (`fill_pieces`); returns the extent of the rolled-up hours they are
    kept for (NOT_KEPT: none; the plan reads the rows)."""
    if not plan.whole_hours or not plan.one_step():
        return NOT_KEPT
    return folds.fill(slots.columns(), plan.lo_ms, plan.hi_ms, pieces)


def plan_range(metric: str, start: datetime, end: datetime, step: timedelta, *,
               over_time: OverTime | None, across: AcrossSeries | None, tier: Tier | None,
               with_bindings: bool, retention: Retention) -> RangePlan:
    """The plan of a range query (refuses what `aggregation_of` refuses).

    Without bindings the tier follows the step (`choose_tier`). With bindings ownership is
    attributed per row by its start, so the minute tier answers wherever minutes are kept
    (raw for a step under a minute); unless the caller forced a tier, hourly rows stand in
    for the minutes of the hours a binding covers whole, when the step holds whole hours."""
    over_time, across = aggregation_of(metric, start, end, step, over_time, across)
    column = "v_max" if across is AcrossSeries.MAX and over_time is OverTime.MEAN \
        else _OVER_TIME[over_time]
    step_ms = max(int(step.total_seconds() * 1000), 1)
    whole_hours = False
    if tier is None:
        by_step = min(step, timedelta(minutes=1)) if with_bindings else step
        tier = choose_tier(by_step, start, end, retention)
        whole_hours = with_bindings and tier is Tier.MINUTE and step_ms >= HOUR_MS
    tier = Tier(tier)
    width = _TIER_WIDTH_MS[tier]
    return RangePlan(tier, to_ms(start) // width * width, to_ms(end), step_ms, column, across,
                     whole_hours)
