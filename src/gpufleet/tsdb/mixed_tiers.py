"""The rows of a range query through bindings when hourly rollups stand in for minutes.

A slot (one series over one binding) reads the hourly row of every hour its binding covers
whole, and the minute tier's rows for the rest: the partial hours at the binding's edges,
the hours not rolled up yet, and any hour a step boundary cuts (an hour row must fall in
one step, as all its minutes would). The answer is then the minute tier's: an hour row is
the fold of its minutes (rollups.py), and the query's fold weights means by count, takes
first / last by time and credits the step between consecutive rows wherever they come from.

Which minute rows a slot keeps is decided exactly by one join predicate (`_WHOLE`); the
scan in front of it only narrows what the join sees. A join alone would still read every
minute row of the window (the cost this module exists to avoid), so the rolled-up hours
are scanned an hour (or a few) at a time, each for the series with an edge in it: DuckDB
then skips the row groups of other hours and pushes the series filter into the scan.

Expects the query's `sel` (duckdb_query.Slots) in scope. Integers are formatted in.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.tsdb.protocol import HOUR_MS
from gpufleet.tsdb.rollups import TierSources
from gpufleet.tsdb.schema import ROLLUP_COLUMNS

_ROW = ("bucket_ms", "v_first", "v_last", "v_mean", "v_min", "v_max", "n", "inc")
# At most this many scans of the rolled-up minutes (longer windows scan a few hours each).
_MAX_SCANS = 48


@dataclass(frozen=True)
class MixedTiers:
    """The window [lo_ms, hi_ms) in steps of `step_ms` from lo_ms, and how far the rollups
    have been folded."""

    lo_ms: int
    hi_ms: int
    step_ms: int
    minute_done_ms: int
    hour_done_ms: int

    def rows(self) -> str:
        """SQL: every slot's rows (slot as `series_id`), hourly and minute ones."""
        lo, hi, hour_done = self.lo_ms, self.hi_ms, self.hour_done_ms
        whole = f"{{h}} >= s.hour_from AND {{h}} < s.hour_to AND {self._in_one_step('{h}')}"
        minute_hour = f"(m.bucket_ms // {HOUR_MS} * {HOUR_MS})"
        return f"""
            WITH spans AS MATERIALIZED (
                SELECT slot, sid, greatest(from_ms, {lo}) AS from_ms,
                       least(to_ms, {hi}) AS to_ms,
                       (greatest(from_ms, {lo}) + {HOUR_MS - 1}) // {HOUR_MS} * {HOUR_MS}
                         AS hour_from,
                       least(least(to_ms, {hi}) // {HOUR_MS} * {HOUR_MS}, {hour_done})
                         AS hour_to
                FROM sel),
            edges AS MATERIALIZED ({self._edges()})
            (SELECT s.slot AS series_id, {aliased_row('h')}
             FROM rollup_1h h JOIN spans s
               ON h.series_id = s.sid AND {whole.format(h='h.bucket_ms')})
            UNION ALL
            (SELECT s.slot AS series_id, {aliased_row('m')}
             FROM ({self._minute_candidates()}) m JOIN spans s
               ON m.series_id = s.sid AND m.bucket_ms >= s.from_ms AND m.bucket_ms < s.to_ms
              AND NOT ({whole.format(h=minute_hour)}))"""

    def _edges(self) -> str:
        """SQL: (sid, hour) for the rolled-up hours where a slot has minutes to read
        outside its whole hours: the hour of its start and the hour of its end (a slot
        within one or two hours: those). Hours cut by a step are not listed: every series
        reads them."""
        hour_done = self.hour_done_ms
        lead_end = f"least(hour_from, to_ms, {hour_done})"
        tail_start = "greatest(hour_to, from_ms)"
        return f"""
            SELECT sid, from_ms // {HOUR_MS} * {HOUR_MS} AS hour FROM spans
            WHERE from_ms < {lead_end}
            UNION ALL
            SELECT sid, {tail_start} // {HOUR_MS} * {HOUR_MS} FROM spans
            WHERE {tail_start} < least(to_ms, {hour_done})"""

    def _minute_candidates(self) -> str:
        """SQL: minute rows, a superset of those the slots keep. Rolled-up hours are read in
        scans of a few hours, each for the series with an edge there (all the query's
        series where a step cuts an hour); later minutes, for all of them."""
        first = self.lo_ms // HOUR_MS * HOUR_MS
        rolled = min(self.hi_ms, self.hour_done_ms)
        parts = []
        if first < rolled:
            hours = range(first, rolled, HOUR_MS)
            per_scan = -(-len(hours) // _MAX_SCANS)
            for at in range(0, len(hours), per_scan):
                chunk = hours[at:at + per_scan]
                start, end = chunk[0], chunk[-1] + HOUR_MS
                cut = any(not self._whole_in_one_step(h) for h in chunk if h >= self.lo_ms)
                series = "series_id IN (SELECT sid FROM sel)" if cut else (
                    f"series_id IN (SELECT sid FROM edges WHERE hour >= {start} "
                    f"AND hour < {end})")
                parts.append(f"""SELECT {ROLLUP_COLUMNS} FROM rollup_1m WHERE {series}
                                 AND bucket_ms >= {max(start, self.lo_ms)}
                                 AND bucket_ms < {min(end, rolled)}""")
        later = max(self.lo_ms, rolled)
        if later < self.hi_ms:
            sources = TierSources(self.minute_done_ms, self.hour_done_ms,
                                  "series_id IN (SELECT sid FROM sel)")
            parts.append(sources.minute(later, self.hi_ms))
        if not parts:
            return f"SELECT {ROLLUP_COLUMNS} FROM rollup_1m WHERE FALSE"
        return " UNION ALL ".join(f"({part})" for part in parts)

    def _every_hour_in_one_step(self) -> bool:
        lo, step = self.lo_ms, self.step_ms
        return step >= self.hi_ms - lo or (lo % HOUR_MS == 0 and step % HOUR_MS == 0)

    def _whole_in_one_step(self, hour_ms: int) -> bool:
        """Whether the hour starting at `hour_ms` (at or after lo) lies in one step."""
        lo, step = self.lo_ms, self.step_ms
        return (hour_ms - lo) // step == (hour_ms + HOUR_MS - 1 - lo) // step

    def _in_one_step(self, hour: str) -> str:
        """SQL for `_whole_in_one_step` on a SQL expression; TRUE where every hour is."""
        if self._every_hour_in_one_step():
            return "TRUE"
        lo, step = self.lo_ms, self.step_ms
        return f"(({hour}) - {lo}) // {step} = (({hour}) + {HOUR_MS - 1} - {lo}) // {step}"


def aliased_row(alias: str) -> str:
    """A row's columns after its series id, as `alias.column, …`."""
    return ", ".join(f"{alias}.{name}" for name in _ROW)
