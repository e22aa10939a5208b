"""The minutes of a binding's partial hours, folded once and kept: the edge pieces of range
queries through bindings (mixed_tiers.py).

A query through bindings reads an hourly row for every hour a binding covers whole and the
minute rows of the hours it covers in part: the hour it started in and the hour it ended in.
Finding those few minute rows means scanning the whole hour's minutes (rows are laid out by
series within an hour, and the edges of 7,500 bindings touch every part of it), so at
10,000 GPUs a 24-hour project average scanned 43 M minute rows to keep 165 k. Yet the
answer for an edge is the same at every query: a binding's start and end do not move, and
the store never changes a minute once the hour holding it is rolled up (rollups are folded
once; late samples are refused at ingest). So each edge piece — one series over the part
of one rolled-up hour a binding holds, [lo_ms, hi_ms) — is folded once into one row (the
fold of rollups.py: first, last, count-weighted mean, min, max, count, increase inside),
kept in an in-memory database attached to the store's DuckDB instance (nothing is written
to the store's file), and read back as a row of the query like an hourly row is. The
query's fold then gives the minute tier's answer: it weights means by count, takes first
and last by time and credits the step between consecutive rows wherever they come from.

Only pieces inside the query window and inside one step are kept (the hours at the window's
edges move with every query; an hour cut by a step is read minute by minute), and only for
the last `horizon_hours` of rolled-up hours (older pieces go at the next fill). A piece
whose series sent nothing then is kept with `n = 0`, so it is not looked for again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpufleet.tsdb.duckdb_columns import registered
from gpufleet.tsdb.protocol import HOUR_MS

CACHE = "gpufleet_pieces"  # the attached in-memory database
_STEP_INCREASE = ("CASE WHEN prev IS NULL THEN 0 WHEN v_first >= prev THEN v_first - prev "
                  "ELSE v_first END")


def need_sql(lo_hour_ms: int, hi_hour_ms: int, in_one_step: Callable[[str], str]) -> str:
    """SQL over `spans` (slot, sid, from_ms, to_ms, hour_from, hour_to; mixed_tiers.py):
    (slot, sid, plo, phi), each slot's pieces in the hours [lo_hour, hi_hour) that lie in
    one step: the part of its first and of its last hour that it does not cover whole."""
    hour = f"{{edge}} // {HOUR_MS} * {HOUR_MS}"
    first, last = hour.format(edge="from_ms"), hour.format(edge="(to_ms - 1)")
    return f"""
        SELECT slot, sid, greatest(from_ms, h) AS plo, least(to_ms, h + {HOUR_MS}) AS phi
        FROM (SELECT slot, sid, from_ms, to_ms, hour_from, hour_to, {first} AS h FROM spans
              WHERE from_ms < to_ms
              UNION
              SELECT slot, sid, from_ms, to_ms, hour_from, hour_to, {last} FROM spans
              WHERE from_ms < to_ms)
        WHERE h >= {lo_hour_ms} AND h < {hi_hour_ms} AND {in_one_step('h')}
          AND NOT (h >= hour_from AND h < hour_to)"""


def pieces_sql(need: str) -> str:
    """SQL: the kept rows of the pieces `need` (slot, sid, plo, phi) names, as a query's
    rows (the slot as `series_id`); a piece with no minutes gives none."""
    return f"""SELECT n.slot AS series_id, p.bucket_ms, p.v_first, p.v_last, p.v_mean,
                      p.v_min, p.v_max, p.n, p.inc
               FROM ({need}) n JOIN {CACHE}.piece p
                 ON p.sid = n.sid AND p.lo_ms = n.plo AND p.hi_ms = n.phi
               WHERE p.n > 0"""


class EdgePieces:
    """The kept pieces. `cursor()` gives a cursor of the store's instance, `rolled_up(cur)`
    how far (ms) the hourly rollups reach, `known()` how far they reached at the store's
    last rollup (None: unknown)."""

    def __init__(self, cursor: Callable, rolled_up: Callable[..., int], *,
                 horizon_hours: int = 48, known: Callable[[], int | None] = lambda: None):
        self._new_cursor = cursor
        self._rolled_up = rolled_up
        self._known = known
        self.horizon_hours = horizon_hours
        self._lock = threading.Lock()  # one filler at a time: a piece is folded once
        self._ready = False
        self._filled: tuple | None = None  # what the last fill kept everything for

    def fill(self, spans: str, columns: dict, lo_ms: int, hi_ms: int,
             in_one_step: Callable[[str], str]) -> tuple[int, int]:
        """Fold and keep the pieces the slots (`columns`: `Slots.columns()`; `spans`: SQL
        over them as `sel`) need in the rolled-up hours inside [lo, hi); returns the hours
        [from, to) whose pieces are now all kept (empty when none can be)."""
        with self._lock:
            # The same slots over the same hours (the next query of a dashboard, or the
            # same one a minute later) need what the last fill kept: nothing has gone
            # since (pieces go only when the rolled-up hours move on). With the extent
            # of the store's last rollup known, that is seen without a cursor, a
            # transaction and the rollup state (~1.5 ms CPU a query).
            known = self._known()
            if known is not None and self._filled is not None:
                hours, key, _ = self._plan(known, columns, lo_ms, hi_ms, in_one_step)
                if key is None or same_fill_key(key, self._filled, 2):
                    return hours
                if not any_added(columns, key, self._filled):
                    # Slots only gone (a binding left the window): the rest are kept.
                    self._filled = key
                    return hours
            con = self._new_cursor()
            try:
                self._create(con)
                con.begin()
                hours, key, need = self._plan(self._rolled_up(con), columns, lo_ms, hi_ms,
                                              in_one_step)
                if key is None:
                    con.rollback()
                    return hours
                oldest = key[0]
                if not same_fill_key(key, self._filled, 2):
                    if self._filled is None or self._filled[0] != oldest:
                        # (else the last fill deleted the same; pieces are added after)
                        con.execute(f"DELETE FROM {CACHE}.piece WHERE lo_ms < {oldest}")
                    # Over the same hours, the slots the last fill kept everything for
                    # still have it: only the slots not among them are looked for.
                    self._fold_missing(con, spans, slots_added(columns, key, self._filled),
                                       need)
                con.commit()
                self._filled = key
                return hours
            finally:
                con.close()

    def _plan(self, hour_done: int, columns: dict, lo_ms: int, hi_ms: int,
              in_one_step: Callable[[str], str]) -> tuple[tuple[int, int], tuple | None, str]:
        """The hours [from, to) a fill keeps pieces for, given how far the hourly rollups
        reach, its key and the SQL of the pieces needed (key None: no hour)."""
        oldest = hour_done - self.horizon_hours * HOUR_MS
        lo_hour = max(-(-lo_ms // HOUR_MS) * HOUR_MS, oldest)
        hi_hour = min(hi_ms // HOUR_MS * HOUR_MS, hour_done)
        if lo_hour >= hi_hour:
            return (0, 0), None, ""
        need = need_sql(lo_hour, hi_hour, in_one_step)
        key = (oldest, need, columns["sid"][1], columns["from_ms"][1], columns["to_ms"][1])
        return (lo_hour, hi_hour), key, need

    def _create(self, con) -> None:
        if self._ready:
            return
        con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {CACHE}")
        con.execute(f"""CREATE TABLE IF NOT EXISTS {CACHE}.piece (
            sid INTEGER, lo_ms BIGINT, hi_ms BIGINT, bucket_ms BIGINT, v_first DOUBLE,
            v_last DOUBLE, v_mean DOUBLE, v_min DOUBLE, v_max DOUBLE, n INTEGER, inc DOUBLE,
            PRIMARY KEY (sid, lo_ms, hi_ms))""")
        self._ready = True

    def _fold_missing(self, con, spans: str, columns: dict, need: str) -> None:
        # The slots as registered arrays, not list parameters: passing 7,500 slots'
        # columns as lists cost ~15 ms CPU whenever the slots changed (a binding started).
        with registered(con, columns) as view:
            missing = con.execute(f"""WITH sel AS (SELECT * FROM {view}), {spans}
                SELECT DISTINCT n.sid, n.plo, n.phi FROM ({need}) n
                ANTI JOIN {CACHE}.piece p ON p.sid = n.sid AND p.lo_ms = n.plo
                 AND p.hi_ms = n.phi""").fetchall()
        if not missing:
            return
        sids, los, his = (list(c) for c in zip(*missing, strict=True))
        hours = sorted({lo // HOUR_MS * HOUR_MS for lo in los})
        # One scan per hour, for the series with a piece there: DuckDB then skips the
        # other hours' row groups and pushes the series filter into the scan.
        scans = " UNION ALL ".join(
            f"""(SELECT series_id, bucket_ms, v_first, v_last, v_mean, v_min, v_max, n, inc
                 FROM rollup_1m WHERE bucket_ms >= {h} AND bucket_ms < {h + HOUR_MS}
                  AND series_id IN (SELECT sid FROM miss WHERE h = {h}))"""
            for h in hours)
        con.execute(f"""INSERT INTO {CACHE}.piece
            SELECT * FROM (
            WITH miss AS (SELECT unnest($1::INTEGER[]) AS sid, unnest($2::BIGINT[]) AS plo,
                                 unnest($3::BIGINT[]) AS phi,
                                 unnest($2::BIGINT[]) // {HOUR_MS} * {HOUR_MS} AS h),
            rows AS (SELECT miss.sid, miss.plo, miss.phi, m.*,
                            lag(m.v_last) OVER (PARTITION BY miss.sid, miss.plo, miss.phi
                                                ORDER BY m.bucket_ms) AS prev
                     FROM miss LEFT JOIN ({scans}) m ON m.series_id = miss.sid
                      AND m.bucket_ms >= miss.plo AND m.bucket_ms < miss.phi)
            SELECT sid, plo, phi, coalesce(min(bucket_ms), plo),
                   arg_min(v_first, bucket_ms), arg_max(v_last, bucket_ms),
                   sum(v_mean * n) / sum(n), min(v_min), max(v_max),
                   coalesce(sum(n), 0)::INTEGER,
                   coalesce(sum(inc + {_STEP_INCREASE}), 0)
            FROM rows GROUP BY sid, plo, phi)""", [sids, los, his])


def slots_added(columns: dict, key: tuple, last: tuple | None) -> dict:
    """`columns` (`Slots.columns()`), less the slots the last fill kept everything for when
    it did so for the same hours (`key[:-3]` and `last[:-3]` equal; a fill's key ends with
    the slots' sid, from_ms and to_ms): when a binding starts or ends, the few slots it
    adds or changes, not the 7,500 others, are looked for again (the anti-joins of every
    slot cost ~15 ms CPU on such a minute at 10,000 GPUs)."""
    if last is None or key[:-3] != last[:-3]:
        return columns
    import numpy as np  # as duckdb_columns: not at import

    added = np.flatnonzero(kept_among(key[-3:], last[-3:]) < 0)
    return {name: (kind, np.asarray(values)[added]) for name, (kind, values) in columns.items()}


def any_added(columns: dict, key: tuple, last: tuple | None) -> bool:
    """Whether `slots_added` is not empty."""
    return len(slots_added(columns, key, last)["sid"][1]) > 0


def kept_among(new: tuple, old: tuple):
    """For each slot of `new` ((sid, from_ms, to_ms) arrays) the index of a slot of `old`
    with the same three values, else -1."""
    import numpy as np

    if not len(old[0]):
        return np.full(len(new[0]), -1)
    hashed_old = _hashed(old)
    order = np.argsort(hashed_old)
    hashed_new = _hashed(new)
    at = order[np.minimum(np.searchsorted(hashed_old[order], hashed_new), len(order) - 1)]
    # A slot counts as found only where its three values equal the old slot's: hashes
    # that collide among the old slots only make a slot not found.
    same = hashed_old[at] == hashed_new
    for values, before in zip(new, old, strict=True):
        same &= values == before[at]
    return np.where(same, at, -1)


def _hashed(slots: tuple):
    """One int64 per slot of its (sid, from_ms, to_ms) arrays, wrapping on overflow."""
    sid, from_ms, to_ms = slots
    return (sid.astype("int64") * 0x9E3779B1 + from_ms) * 0x85EBCA77 + to_ms


def same_fill_key(key: tuple, last: tuple | None, scalars: int) -> bool:
    """Whether two fill keys match: their first `scalars` items (numbers, SQL) compared,
    then the slots' columns (numpy arrays, the same objects when the store reused the
    query's slots). Shared with whole_hour_folds.py."""
    if last is None or key[:scalars] != last[:scalars]:
        return False
    import numpy as np  # as duckdb_columns: not at import

    return all(new is old or np.array_equal(new, old)
               for new, old in zip(key[scalars:], last[scalars:], strict=True))
