"""Rollup arithmetic as SQL: every tier is read as rows of one shape, and one fold turns
finer rows into coarser ones.

A row is (series_id, bucket_ms, v_first, v_last, v_mean, v_min, v_max, n, inc): a raw sample
is a row with all five values equal, n = 1 and inc = 0. Folding rows into buckets of a width
keeps the first and last by time, the count-weighted mean, min of mins, max of maxes, the sum
of counts, and the increase: the rows' own increases plus each step between consecutive rows
(v_first of a row less v_last of the row before). A step that goes down is a counter reset,
and the increase after it counts from 0 (the value itself). So folding raw → minutes →
hours gives the same numbers as folding raw → hours, and a query can read whichever tier
fits its step.

Within a rollup bucket only the steps inside the bucket count (`carry=False`); a query folds
with `carry=True`, so steps between its buckets are credited to the later bucket and the
increases of all steps add up to the increase of the whole window.

Integers in the SQL are formatted in, never text: only series ids (through a parameter),
times and widths reach it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.domain.telemetry.vocabulary import AcrossSeries
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, Tier
from gpufleet.tsdb.schema import ROLLUP_COLUMNS

_STEP_INCREASE = ("CASE WHEN prev IS NULL THEN 0 WHEN v_first >= prev THEN v_first - prev "
                  "ELSE v_first END")


def fold(source: str, width_ms: int, origin_ms: int = 0, *, carry: bool = False) -> str:
    """SQL: the rows of `source` folded into buckets of `width_ms` aligned on `origin_ms`
    (every source row must be at or after the origin)."""
    bucket = f"({origin_ms} + (bucket_ms - {origin_ms}) // {width_ms} * {width_ms})"
    partition = "series_id" if carry else f"series_id, {bucket}"
    return f"""
        SELECT series_id, b AS bucket_ms, arg_min(v_first, bucket_ms) AS v_first,
               arg_max(v_last, bucket_ms) AS v_last, sum(v_mean * n) / sum(n) AS v_mean,
               min(v_min) AS v_min, max(v_max) AS v_max, sum(n)::INTEGER AS n,
               sum(inc + {_STEP_INCREASE}) AS inc
        FROM (SELECT *, {bucket} AS b,
                     lag(v_last) OVER (PARTITION BY {partition} ORDER BY bucket_ms) AS prev
              FROM ({source}) AS rows_in)
        GROUP BY series_id, b"""


@dataclass(frozen=True)
class TierSources:
    """SQL for the rows of each tier in [lo, hi): rolled-up buckets where the tier has been
    folded, and the finer tier folded on the fly for the tail it has not reached yet.

    `series_filter` is a SQL condition on `series_id` (e.g. a semi-join on a selection).
    """

    minute_done_ms: int
    hour_done_ms: int
    series_filter: str = "TRUE"

    def raw(self, lo: int, hi: int) -> str:
        return f"""SELECT series_id, ts_ms AS bucket_ms, value AS v_first, value AS v_last,
                          value AS v_mean, value AS v_min, value AS v_max, 1 AS n, 0.0 AS inc
                   FROM samples
                   WHERE {self.series_filter} AND ts_ms >= {lo} AND ts_ms < {hi}"""

    def minute(self, lo: int, hi: int) -> str:
        return self._tier("rollup_1m", self.minute_done_ms, MINUTE_MS, self.raw, lo, hi)

    def hour(self, lo: int, hi: int) -> str:
        return self._tier("rollup_1h", self.hour_done_ms, HOUR_MS, self.minute, lo, hi)

    def rows(self, tier: Tier, lo: int, hi: int) -> str:
        return {Tier.RAW: self.raw, Tier.MINUTE: self.minute, Tier.HOUR: self.hour}[tier](lo, hi)

    def _tier(self, table: str, done_ms: int, width_ms: int, finer, lo: int, hi: int) -> str:
        parts = []
        if lo < done_ms:
            parts.append(f"""SELECT {ROLLUP_COLUMNS} FROM {table}
                             WHERE {self.series_filter} AND bucket_ms >= {lo}
                               AND bucket_ms < {min(hi, done_ms)}""")
        tail = max(lo, done_ms)
        if tail < hi:
            parts.append(fold(finer(tail, hi), width_ms))
        if not parts:
            return f"SELECT {ROLLUP_COLUMNS} FROM {table} WHERE FALSE"
        return " UNION ALL ".join(f"({part})" for part in parts)


def combine_across(values: list[float], across: AcrossSeries) -> float:
    """Values of several series at one step, combined as their class says (docs/design.md,
    "Telemetry model"): mean, sum, max, or the count of non-zero values (states and flags)."""
    if across is AcrossSeries.MEAN:
        return sum(values) / len(values)
    if across is AcrossSeries.SUM:
        return float(sum(values))
    if across is AcrossSeries.MAX:
        return max(values)
    return float(sum(1 for v in values if v != 0))
