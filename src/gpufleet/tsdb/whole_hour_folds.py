"""Each slot's fold over the window's whole rolled-up hours, kept: what a one-step range
query through bindings reads for all but the window's edge hours (mixed_tiers.py).

A one-step question (a 24-hour project average) folds, for every slot, its rows inside the
window into one value. At 10,000 GPUs that meant scanning ~218,000 hourly rows and joining
~109,000 with 7,251 slots, and planning a statement that unions hourly rows, kept edge
pieces and minutes (~10 ms of DuckDB's planner alone), at every query. Yet most of that
fold is the same at every query in the same hour: rolled-up rows never change (rollups
are folded once; late samples are refused at ingest), so the fold of a series over the
part [lo_ms, hi_ms) of the window's whole rolled-up hours that its binding holds is the
same whenever it is asked. It is computed once by the general statement (hourly rows for
the hours the binding covers whole, the kept edge pieces for the hours it starts or ends
in, minutes where neither is kept) and kept in the in-memory database of the edge pieces
(edge_pieces.py), keyed by series and span, not by binding: a binding made later over the
same span, or a relabelled unit, reads the same fold. It is the fold of rollups.py: first
and last by time, count-weighted mean, min, max, count and the increase inside, steps
between its consecutive rows included; its time is its span's start.

A query then reads one kept row per slot, and the minute tier's rows for what lies outside
the whole hours: the window's first and last partial hours, and the minutes not rolled into
an hour yet. Its own fold credits the steps between those rows and the kept one as it did
between any two rows, so the answer is the one the rows give (to the last bits of the
mean's floating-point sums). Where nothing lies outside (a window on hour boundaries, all
rolled up), each slot's kept row is its answer and the statement only groups them.

A "last 24 h" window's whole hours move when an hour starts or is rolled up, so folds are
kept for one extent of the rolled-up hours (`done_ms`) and dropped at the first fill after
the rollups move on. A query reads them only when its snapshot sees the very extent the
fill kept them for (`RangePlan.sql`): otherwise it reads the rows as before. A span whose
series sent nothing is kept with `n = 0`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpufleet.tsdb.duckdb_columns import registered
from gpufleet.tsdb.edge_pieces import CACHE, any_added, same_fill_key, slots_added
from gpufleet.tsdb.mixed_tiers import MixedTiers
from gpufleet.tsdb.protocol import HOUR_MS
from gpufleet.tsdb.rollups import fold

TABLE = f"{CACHE}.whole_hours"
NOT_KEPT = -1  # `fill`'s answer when no fold may be read
_ROW = "bucket_ms, v_first, v_last, v_mean, v_min, v_max, n, inc"


def whole_hours(lo_ms: int, hi_ms: int, hour_done_ms: int) -> tuple[int, int]:
    """The window's whole rolled-up hours [first, end) (empty: first >= end)."""
    return -(-lo_ms // HOUR_MS) * HOUR_MS, min(hi_ms // HOUR_MS * HOUR_MS, hour_done_ms)


def kept_rows(first_ms: int, end_ms: int) -> str:
    """SQL: the slots' kept folds over the whole hours [first, end) as a query's rows (the
    slot as `series_id`), over the query's `sel`; a span with no rows gives none."""
    return f"""SELECT sel.slot AS series_id, {', '.join(f'f.{c}' for c in _ROW.split(', '))}
               FROM sel JOIN {TABLE} f ON f.sid = sel.sid
                AND f.lo_ms = greatest(sel.from_ms, {first_ms})
                AND f.hi_ms = least(sel.to_ms, {end_ms})
               WHERE f.n > 0"""


class WholeHourFolds:
    """The kept folds. `cursor()` gives a cursor of the store's instance, `state(cur)` how
    far (ms) the minute and hourly rollups reach; `max_rows` bounds what is kept for one
    extent of the rolled-up hours (past it, a query reads its rows)."""

    def __init__(self, cursor: Callable, state: Callable[..., tuple[int, int]], *,
                 max_rows: int = 1_000_000, known: Callable[[], int | None] = lambda: None):
        self._new_cursor = cursor
        self._state = state
        self._known = known  # how far the hourly rollups reached at the store's last one
        self.max_rows = max_rows
        self._lock = threading.Lock()  # one filler at a time: a span is folded once
        self._ready = False
        self._filled: tuple | None = None  # what the last fill kept everything for

    def fill(self, columns: dict, lo_ms: int, hi_ms: int, pieces: tuple[int, int]) -> int:
        """Fold and keep the spans of the slots (`columns`: `Slots.columns()`) in the
        window [lo, hi)'s whole rolled-up hours, reading the edge pieces kept for the hours
        `pieces` (fill_pieces); returns the extent of the rolled-up hours they are kept
        for (NOT_KEPT when the window has no whole rolled-up hour)."""
        with self._lock:
            # The same slots over the same whole hours as the last fill, seen without a
            # cursor, a transaction and the rollup state when the extent of the store's
            # last rollup is known (a query reads the folds only if its snapshot sees
            # the very extent returned: RangePlan.reads_folds).
            known = self._known()
            if known is not None and self._filled is not None:
                first, end = whole_hours(lo_ms, hi_ms, known)
                last = (known, first, end, columns["sid"][1], columns["from_ms"][1],
                        columns["to_ms"][1])
                if first < end and same_fill_key(last, self._filled, 3):
                    return known
                if first < end and not any_added(columns, last, self._filled):
                    # Slots only gone (a binding left the window): the rest are kept.
                    self._filled = last
                    return known
            con = self._new_cursor()
            try:
                self._create(con)
                con.begin()
                minute_done, hour_done = self._state(con)
                first, end = whole_hours(lo_ms, hi_ms, hour_done)
                if first >= end:
                    con.rollback()
                    return NOT_KEPT
                # The same slots over the same whole hours (the next query of a dashboard,
                # or the same one a minute later) need what the last fill kept.
                key = (hour_done, first, end, columns["sid"][1], columns["from_ms"][1],
                       columns["to_ms"][1])
                if self._filled is None or not same_fill_key(key, self._filled, 3):
                    # Folds of an earlier extent go (a query that filled before the
                    # rollups moved on sees that extent, or none of these deletes).
                    if self._filled is None or self._filled[0] != hour_done:
                        # (else the last fill deleted the same; rows are added after)
                        con.execute(f"DELETE FROM {TABLE} WHERE done_ms <> {hour_done}")
                    # Over the same whole hours, the slots the last fill kept
                    # everything for still have it: only the others are looked for.
                    with registered(con, slots_added(columns, key, self._filled)) as view:
                        kept = self._fold_missing(con, view, first, end, minute_done,
                                                  hour_done, pieces)
                    con.commit()
                    if not kept:
                        self._filled = None
                        return NOT_KEPT
                else:
                    con.rollback()
                self._filled = key
                return hour_done
            finally:
                con.close()

    def drop_before(self, cut_ms: int) -> None:
        """Forget the folds holding hours before `cut_ms` (the hour tier's retention
        deleted those rows)."""
        with self._lock:
            if not self._ready:
                return
            con = self._new_cursor()
            try:
                con.execute(f"DELETE FROM {TABLE} WHERE lo_ms < {cut_ms}")
                self._filled = None
            finally:
                con.close()

    def _create(self, con) -> None:
        if self._ready:
            return
        con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {CACHE}")
        con.execute(f"""CREATE TABLE IF NOT EXISTS {TABLE} (
            sid INTEGER, lo_ms BIGINT, hi_ms BIGINT, bucket_ms BIGINT, v_first DOUBLE,
            v_last DOUBLE, v_mean DOUBLE, v_min DOUBLE, v_max DOUBLE, n INTEGER, inc DOUBLE,
            done_ms BIGINT, PRIMARY KEY (sid, lo_ms, hi_ms))""")
        self._ready = True

    def _fold_missing(self, con, view: str, first: int, end: int, minute_done: int,
                      hour_done: int, pieces: tuple[int, int]) -> bool:
        """Fold the slots whose span has no kept fold, as the general statement would
        fold them over a window of the whole hours (one step); whether every span of the
        slots is kept now."""
        lo, hi = f"greatest(v.from_ms, {first})", f"least(v.to_ms, {end})"
        missing = f"""SELECT v.slot, v.sid, v.from_ms, v.to_ms FROM {view} v
            WHERE {lo} < {hi} AND NOT EXISTS (SELECT 1 FROM {TABLE} f
              WHERE f.sid = v.sid AND f.lo_ms = {lo} AND f.hi_ms = {hi})"""
        [(count, kept)] = con.execute(f"""SELECT (SELECT count(*) FROM ({missing})),
                                                 (SELECT count(*) FROM {TABLE})""").fetchall()
        if not count:
            return True
        if count + kept > self.max_rows:
            # Many windows asked in one hour: this one reads its rows. Nothing is deleted
            # here: a query that filled before may be about to read what it kept.
            return False
        rows = MixedTiers(first, end, end - first, minute_done, hour_done, *pieces).rows()
        # A slot's fold is keyed by its series and span: two slots of one unit over the
        # same span (bindings side by side on a shared GPU) fold the same rows.
        con.execute(f"""INSERT OR IGNORE INTO {TABLE}
            SELECT * FROM (
            WITH sel AS MATERIALIZED ({missing}),
            folded AS ({fold(rows, end - first, first, carry=True)})
            SELECT sel.sid, greatest(sel.from_ms, {first}), least(sel.to_ms, {end}),
                   greatest(sel.from_ms, {first}), f.v_first, f.v_last, f.v_mean, f.v_min,
                   f.v_max, coalesce(f.n, 0), coalesce(f.inc, 0), {hour_done}
            FROM sel LEFT JOIN folded f ON f.series_id = sel.slot)""").fetchall()
        return True
