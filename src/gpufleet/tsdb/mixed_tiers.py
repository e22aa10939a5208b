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

from gpufleet.tsdb.edge_pieces import need_sql, pieces_sql
from gpufleet.tsdb.protocol import HOUR_MS
from gpufleet.tsdb.rollups import TierSources
from gpufleet.tsdb.schema import ROLLUP_COLUMNS

_ROW = ("bucket_ms", "v_first", "v_last", "v_mean", "v_min", "v_max", "n", "inc")
# At most this many scans of the rolled-up minutes (longer windows scan a few hours each).
_MAX_SCANS = 48


@dataclass(frozen=True)
class MixedTiers:
    """The window [lo_ms, hi_ms) in steps of `step_ms` from lo_ms, and how far the rollups
    have been folded. The hours in [pieces_from_ms, pieces_to_ms) that lie in one step
    read the pieces of their partial hours from the kept edge pieces (edge_pieces.py),
    which the caller has filled for this query's slots; empty: none do."""

    lo_ms: int
    hi_ms: int
    step_ms: int
    minute_done_ms: int
    hour_done_ms: int
    pieces_from_ms: int = 0
    pieces_to_ms: int = 0

    def spans(self) -> str:
        """SQL: the `spans` CTE (each slot clipped to the window, and the hours it covers
        whole), over the query's `sel`."""
        lo, hi, hour_done = self.lo_ms, self.hi_ms, self.hour_done_ms
        return f"""spans AS MATERIALIZED (
                SELECT slot, sid, greatest(from_ms, {lo}) AS from_ms,
                       least(to_ms, {hi}) AS to_ms,
                       (greatest(from_ms, {lo}) + {HOUR_MS - 1}) // {HOUR_MS} * {HOUR_MS}
                         AS hour_from,
                       least(least(to_ms, {hi}) // {HOUR_MS} * {HOUR_MS}, {hour_done})
                         AS hour_to
                FROM sel)"""

    def rows(self) -> str:
        """SQL: every slot's rows (slot as `series_id`): hourly, minute and kept pieces."""
        whole = f"{{h}} >= s.hour_from AND {{h}} < s.hour_to AND {self.in_one_step('{h}')}"
        minute_hour = f"(m.bucket_ms // {HOUR_MS} * {HOUR_MS})"
        parts = [f"""(SELECT s.slot AS series_id, {aliased_row('h')}
             FROM rollup_1h h JOIN spans s
               ON h.series_id = s.sid AND {whole.format(h='h.bucket_ms')})"""]
        candidates = self._minute_candidates()
        if candidates is not None:
            parts.append(f"""(SELECT s.slot AS series_id, {aliased_row('m')}
             FROM ({candidates}) m JOIN spans s
               ON m.series_id = s.sid AND m.bucket_ms >= s.from_ms AND m.bucket_ms < s.to_ms
              AND NOT ({whole.format(h=minute_hour)})
              AND NOT {self._from_pieces(minute_hour)})""")
        if self.pieces_from_ms < self.pieces_to_ms:
            need = need_sql(self.pieces_from_ms, self.pieces_to_ms, self.in_one_step)
            parts.append(f"({pieces_sql(need)})")
        # The edges are only asked for by the minute scans (none where pieces stand in
        # for every partial hour): an unused CTE still costs the planner.
        edges = f",\n            edges AS MATERIALIZED ({self._edges()})" \
            if candidates is not None and "FROM edges" in candidates else ""
        union = "\n            UNION ALL\n            ".join(parts)
        return f"""
            WITH {self.spans()}{edges}
            {union}"""

    def _from_pieces(self, hour: str) -> str:
        """SQL: whether the hour `hour` reads its partial hours from the kept pieces."""
        if self.pieces_from_ms >= self.pieces_to_ms:
            return "FALSE"
        return (f"(({hour}) >= {self.pieces_from_ms} AND ({hour}) < {self.pieces_to_ms} "
                f"AND {self.in_one_step(hour)})")

    def _piece_hour(self, hour_ms: int) -> bool:
        return self.pieces_from_ms <= hour_ms < self.pieces_to_ms and \
            self._whole_in_one_step(hour_ms)

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

    def _minute_candidates(self) -> str | None:
        """SQL: minute rows, a superset of those the slots keep (None: no minute is read).
        Rolled-up hours are read in scans of a few hours, each for the series with an edge
        there (all the query's series where a step cuts an hour); later minutes, for all of
        them."""
        first = self.lo_ms // HOUR_MS * HOUR_MS
        rolled = min(self.hi_ms, self.hour_done_ms)
        parts = []
        # Hours whose partial hours come from the kept pieces are not scanned.
        hours = [h for h in range(first, rolled, HOUR_MS) if not self._piece_hour(h)]
        per_scan = -(-len(hours) // _MAX_SCANS)
        runs: list[list[int]] = []
        for h in hours:
            if runs and runs[-1][-1] + HOUR_MS == h and len(runs[-1]) < per_scan:
                runs[-1].append(h)
            else:
                runs.append([h])
        for chunk in runs:
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
            return None
        return " UNION ALL ".join(f"({part})" for part in parts)

    def _every_hour_in_one_step(self) -> bool:
        lo, step = self.lo_ms, self.step_ms
        return step >= self.hi_ms - lo or (lo % HOUR_MS == 0 and step % HOUR_MS == 0)

    def _whole_in_one_step(self, hour_ms: int) -> bool:
        """Whether the hour starting at `hour_ms` (at or after lo) lies in one step."""
        lo, step = self.lo_ms, self.step_ms
        return (hour_ms - lo) // step == (hour_ms + HOUR_MS - 1 - lo) // step

    def in_one_step(self, hour: str) -> str:
        """SQL for `_whole_in_one_step` on a SQL expression; TRUE where every hour is."""
        if self._every_hour_in_one_step():
            return "TRUE"
        lo, step = self.lo_ms, self.step_ms
        return f"(({hour}) - {lo}) // {step} = (({hour}) + {HOUR_MS - 1} - {lo}) // {step}"


def aliased_row(alias: str) -> str:
    """A row's columns after its series id, as `alias.column, …`."""
    return ", ".join(f"{alias}.{name}" for name in _ROW)
