"""Range queries on the DuckDB store: which tier's rows each slot reads, and the SQL that
folds them into steps.

A query's selection is a list of slots (`Slots`): one series over one binding interval, or
over all time when the query has no bindings. Ownership is attributed per row by the row's
start, so a query through bindings is answered as the 1-minute tier answers it. Reading
minutes for the whole window is the cost of that (a 24-hour project average at 100,000
GPUs folds 144 M minute rows), so when the caller lets the store choose, a slot reads the
hourly rollup for every hour its binding covers whole and minutes only for the partial
hours at its edges (and for the hours not rolled up yet, and for any hour a step boundary
cuts). The answer is the same as the minute tier's: an hour row is the fold of its minutes
(rollups.py), and the query's fold weights means by count, takes first / last by time,
and credits the step between consecutive rows wherever they come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.domain.telemetry.vocabulary import AcrossSeries, OverTime
from gpufleet.tsdb.protocol import (
    HOUR_MS,
    MINUTE_MS,
    Binding,
    Retention,
    Tier,
    aggregation_of,
    choose_tier,
    to_ms,
)
from gpufleet.tsdb.rollups import TierSources, fold

_SLOTS = ("WITH sel AS (SELECT unnest($slots::INTEGER[]) AS slot, unnest($ids::INTEGER[]) AS sid,"
          " unnest($groups::INTEGER[]) AS grp, unnest($froms::BIGINT[]) AS from_ms,"
          " unnest($tos::BIGINT[]) AS to_ms)")
_IN_SLOTS = "series_id IN (SELECT sid FROM sel)"
_FOREVER_MS = 2**62
_OVER_TIME = {OverTime.MEAN: "v_mean", OverTime.LAST: "v_last", OverTime.INCREASE: "inc"}
_ACROSS = {AcrossSeries.MEAN: "avg(v)", AcrossSeries.SUM: "sum(v)",
           AcrossSeries.MAX: "max(v)", AcrossSeries.COUNT: "count_if(v <> 0)"}
_TIER_WIDTH_MS = {Tier.RAW: 1, Tier.MINUTE: MINUTE_MS, Tier.HOUR: HOUR_MS}
_ROW = "bucket_ms, v_first, v_last, v_mean, v_min, v_max, n, inc"


class Slots:
    """The query's selection: series, each over one binding interval or all time."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.groups: list[int] = []
        self.froms: list[int] = []
        self.tos: list[int] = []

    def add(self, sid: int, group: int, binding: Binding | None) -> None:
        self.ids.append(sid)
        self.groups.append(group)
        self.froms.append(-_FOREVER_MS if binding is None else to_ms(binding.start))
        self.tos.append(_FOREVER_MS if binding is None or binding.end is None
                        else to_ms(binding.end))

    def parameters(self) -> dict[str, list[int]]:
        return {"slots": list(range(len(self.ids))), "ids": self.ids, "groups": self.groups,
                "froms": self.froms, "tos": self.tos}


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

    def sql(self, minute_done_ms: int, hour_done_ms: int) -> str:
        """The statement (parameters: `Slots.parameters()`) answering (group, step start,
        value) rows, given how far the rollups have been folded."""
        sources = TierSources(minute_done_ms, hour_done_ms, _IN_SLOTS)
        if self.whole_hours:
            tagged = self._mixed_rows(sources, hour_done_ms)
        else:
            tagged = f"""SELECT sel.slot AS series_id, {_columns('r')}
                         FROM ({sources.rows(self.tier, self.lo_ms, self.hi_ms)}) r
                         JOIN sel ON r.series_id = sel.sid
                          AND r.bucket_ms >= sel.from_ms AND r.bucket_ms < sel.to_ms"""
        # Each slot's rows are folded into steps on their own (carry: the step between two
        # rows of a slot goes to the later row's step), then combined per group.
        return f"""{_SLOTS},
            per_slot AS (SELECT series_id AS slot, bucket_ms, {self.column} AS v
                         FROM ({fold(tagged, self.step_ms, self.lo_ms, carry=True)}))
            SELECT grp, bucket_ms, {_ACROSS[self.across]} FROM per_slot JOIN sel USING (slot)
            GROUP BY grp, bucket_ms ORDER BY grp, bucket_ms"""

    def _mixed_rows(self, sources: TierSources, hour_done_ms: int) -> str:
        """Each slot's rows: hourly rows for its whole hours, minute rows for the rest.

        A slot's whole hours are [hour_from, hour_to): hours inside both its binding and
        the window, already rolled up, and not cut by a step boundary (an hour row must fall
        in one step, as all its minutes would). Every minute row of the slot outside them
        is read as the minute tier would read it."""
        lo, hi = self.lo_ms, self.hi_ms
        spans = f"""SELECT slot, sid, greatest(from_ms, {lo}) AS from_ms,
                           least(to_ms, {hi}) AS to_ms,
                           (greatest(from_ms, {lo}) + {HOUR_MS - 1}) // {HOUR_MS} * {HOUR_MS}
                             AS hour_from,
                           least(least(to_ms, {hi}) // {HOUR_MS} * {HOUR_MS}, {hour_done_ms})
                             AS hour_to
                    FROM sel"""
        whole = ("{h} >= s.hour_from AND {h} < s.hour_to AND "
                 + self._in_one_step("{h}"))
        hour_rows = f"""SELECT s.slot AS series_id, {_columns('h')}
                        FROM rollup_1h h JOIN spans s ON h.series_id = s.sid
                         AND {whole.format(h='h.bucket_ms')}"""
        minute_rows = f"""SELECT s.slot AS series_id, {_columns('m')}
                          FROM ({sources.minute(lo, hi)}) m JOIN spans s
                            ON m.series_id = s.sid
                           AND m.bucket_ms >= s.from_ms AND m.bucket_ms < s.to_ms
                           AND NOT ({whole.format(h=f'(m.bucket_ms // {HOUR_MS} * {HOUR_MS})')})"""
        return f"""WITH spans AS ({spans})
                   ({hour_rows}) UNION ALL ({minute_rows})"""

    def _in_one_step(self, hour: str) -> str:
        """SQL: the hour starting at `hour` (a SQL expression, at or after lo) lies in one
        step. Constant TRUE where every hour of the window does."""
        lo, step = self.lo_ms, self.step_ms
        if step >= self.hi_ms - lo or (lo % HOUR_MS == 0 and step % HOUR_MS == 0):
            return "TRUE"
        return f"(({hour}) - {lo}) // {step} = (({hour}) + {HOUR_MS - 1} - {lo}) // {step}"


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


def _columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name}" for name in _ROW.split(", "))
