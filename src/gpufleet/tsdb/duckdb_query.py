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

from dataclasses import dataclass
from datetime import datetime, timedelta

from gpufleet.domain.telemetry.vocabulary import AcrossSeries, OverTime
from gpufleet.tsdb.mixed_tiers import MixedTiers, aliased_row
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
        if self.whole_hours:
            tagged = MixedTiers(self.lo_ms, self.hi_ms, self.step_ms, minute_done_ms,
                                hour_done_ms).rows()
        else:
            sources = TierSources(minute_done_ms, hour_done_ms, _IN_SLOTS)
            tagged = f"""SELECT sel.slot AS series_id, {aliased_row('r')}
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
