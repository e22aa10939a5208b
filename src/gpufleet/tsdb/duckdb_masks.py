"""Per-unit, per-hour minute masks on the DuckDB store: the funnel and idleness in aggregate,
fast at 100,000 GPUs (the `MinuteMasks` of masks.py).

docs/design.md, "Funnel and activity" judges every allocated minute of every unit. Done naively that
reads 1,440 1-minute rollups × units × signals per 24-hour question (432 million rows at 100,000
GPUs). Instead, each hour of each unit is folded once into a few 60-bit masks — bit m set when
minute m of the hour had a value (`*_known`) or reached its threshold (`*_hot`) — and a question
becomes a join of those rows with the bindings, counting bits (`bit_count`) inside each binding's
part of the hour. Activity and effective minutes are exact at minute resolution; the efficiency sum
spreads each hour's sm_active sum evenly over the hour's known minutes (so a binding's part of an
hour gets its share of the hour's mean). A 24-hour funnel reads 24 rows per unit.

Signals have the roles of masks.py (`signal_role`, from the domain's `activity_signal`):
`gr` and `util` give activity, the first one present in each minute wins; for MIG instances
of Ampere (or unknown) models, `pmem` (it reported) and `proc` (any process series) stand in
for activity in minutes without either; `sm` gives effective minutes and the efficiency sum.

Only minutes the store has rolled up count ("activity is judged on 1-minute rollups"): the
last minute or two before the rollup loop folds them are not known yet. Rolled-up minutes
never change in the store, so masks of closed hours are cached for `cache_hours`, in an
in-memory database attached to the store's DuckDB instance (nothing is written to the store's
file); the hour still open is folded incrementally.

Series are taken from the store's `series` table: every id not seen yet (ids need not be
dense — a damaged journal can leave gaps), and every id whose node, environment or model
changed since (the store keeps a series' id when its unit moves; a new model can change its
role). A GPU counts towards the environment it first reported from.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from itertools import repeat

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb.duckdb_columns import FLOAT64, INT32, INT64, registered
from gpufleet.tsdb.masks import (
    GR,
    PMEM,
    PROC,
    SM,
    UTIL,
    SlotSpan,
    SpanColumns,
    Tally,
    TallyRows,
    signal_role,
    steps_fit_hours,
)
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, SeriesLabels

CACHE = "gpufleet_masks"  # the attached in-memory database
_BIT = f"(1::UBIGINT << ((bucket_ms % {HOUR_MS}) // {MINUTE_MS})::UBIGINT)"
_MASK_COLUMNS = ("gr_known", "gr_hot", "util_known", "util_hot", "sm_known", "sm_hot",
                 "pmem_known", "proc_known")
# The activity of each minute of a unit-hour: the first signal present in that minute, in
# `ActivitySignal`'s order (as `unit_activity` judges a minute); process presence only in
# minutes where the instance reported (pmem) and neither engine signal has a value.
_ACT_KNOWN = "(gr_known | util_known | pmem_known)"
_ACT_HOT = ("(gr_hot | (util_hot & ~gr_known) "
            "| (pmem_known & proc_known & ~gr_known & ~util_known))")


def _range_mask(lo: str, hi: str) -> str:
    """SQL: the bits of the minutes of hour `hour_ms` whose start lies in [lo, hi). UBIGINT
    throughout (shift amounts included): `1::UBIGINT << n` with an INTEGER n is a HUGEINT
    in DuckDB, and every `&` and `bit_count` with the masks then widened them too."""
    def minute(edge: str) -> str:
        return (f"least(greatest(({edge} - hour_ms + {MINUTE_MS - 1}) // {MINUTE_MS}, 0), 60)"
                "::UBIGINT")
    return (f"xor((1::UBIGINT << {minute(hi)}) - 1::UBIGINT, "
            f"(1::UBIGINT << {minute(lo)}) - 1::UBIGINT)")


def _highest_minute(mask: str) -> str:
    """SQL: the start (ms) of the last minute set in `mask` of hour `hour_ms`. log2 of the
    mask as a double gives the top bit's place, or one more: the double rounds (2^60 − 1
    becomes 2^60) and so does log2 (log2(2^52 − 1) is 52.0 in IEEE doubles), so a mask
    whose minutes below its top one are (nearly) all set came out a minute late; a check
    against the bit itself takes that one back."""
    top = f"floor(log2(greatest({mask}, 1::UBIGINT)::DOUBLE))::UBIGINT"  # 0: filtered later
    return (f"hour_ms + {MINUTE_MS} * ({top} - CASE WHEN (1::UBIGINT << {top}) > {mask} "
            "THEN 1 ELSE 0 END)")


class DuckDBMinuteMasks:
    """Made by `DuckDBTelemetryStore.minute_masks`: `read(work)` runs `work(cursor)` in a
    read transaction, `cursor()` gives a cursor of the store's instance, `rolled_up(cursor)`
    says until when (ms) the store has folded minutes, `series_version()` (where given)
    changes once the store committed `series` rows (the series table is compared with the
    masks' copy only then: 300,000 rows at 100,000 GPUs)."""

    def __init__(self, read: Callable, cursor: Callable, rolled_up: Callable[..., int],
                 thresholds: Thresholds, *, cache_hours: int = 48,
                 series_version: Callable[[], int] | None = None):
        self._read = read
        self._new_cursor = cursor
        self._rolled_up = rolled_up
        self.thresholds = thresholds
        self.cache_hours = cache_hours
        self._lock = threading.Lock()
        self._ready = False
        self._series_version = series_version
        self._synced_version: int | None = None  # the version the copy reflects
        self._units: dict[tuple[str, str | None], int] = {}
        self._gpus: dict[str, int] = {}
        self._filled_ms = 0  # unit_hour holds every rolled-up minute before this
        self._compacted_ms = 0  # hours before this have one row per unit
        # (grouping, closed hour) → GPU-minutes reporting per group: reporting_minutes
        self._reported: dict[tuple[tuple[str, ...], int], dict[tuple, int]] = {}

    # -- the cache ------------------------------------------------------------------------

    def refresh(self) -> int:
        """Bring the cache up to the store's rolled-up minutes; returns that bound (ms)."""
        with self._lock:
            con = self._new_cursor()
            try:
                if not self._ready:
                    con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {CACHE}")
                    con.execute(f"CREATE TABLE IF NOT EXISTS {CACHE}.seen (series_id INTEGER, "
                                "node VARCHAR, environment VARCHAR, model VARCHAR)")
                    con.execute(f"CREATE TABLE IF NOT EXISTS {CACHE}.sig (sid INTEGER, "
                                "unit_id INTEGER, gpu_id INTEGER, role TINYINT)")
                    con.execute(f"CREATE TABLE IF NOT EXISTS {CACHE}.gpus (gpu_id INTEGER, "
                                "environment VARCHAR, model VARCHAR, node VARCHAR)")
                    masks = ", ".join(f"{c} UBIGINT" for c in _MASK_COLUMNS)
                    con.execute(f"CREATE TABLE IF NOT EXISTS {CACHE}.unit_hour (unit_id INTEGER,"
                                f" gpu_id INTEGER, hour_ms BIGINT, {masks}, sm_sum DOUBLE)")
                    self._ready = True
                # Read before the transaction starts: rows committed later bump it again.
                version = None if self._series_version is None else self._series_version()
                con.begin()
                if version is None or version != self._synced_version:
                    self._sync_signals(con)
                done_ms = self._rolled_up(con)
                oldest_ms = (done_ms // HOUR_MS - self.cache_hours) * HOUR_MS
                start_ms = max(self._filled_ms, oldest_ms)
                if done_ms > start_ms:
                    con.execute(f"INSERT INTO {CACHE}.unit_hour {self._fold(start_ms, done_ms)}")
                # Only hours an earlier fill touched can hold several rows of one unit.
                self._compact(con, max(self._compacted_ms, start_ms // HOUR_MS * HOUR_MS),
                              done_ms // HOUR_MS * HOUR_MS, oldest_ms)
                con.commit()
                self._synced_version = version
                self._filled_ms = max(self._filled_ms, done_ms)
                self._compacted_ms = max(self._compacted_ms, done_ms // HOUR_MS * HOUR_MS)
                return done_ms
            finally:
                con.close()

    def _sync_signals(self, con) -> None:
        """Give each series not seen yet, or whose node / environment / model changed, its
        unit and role (from the store's series table: ids may have gaps and may move)."""
        changed = con.execute(f"""
            SELECT s.series_id, s.metric, s.gpu_uuid, s.mig_uuid, s.node, s.environment,
                   s.model FROM series s LEFT JOIN {CACHE}.seen c USING (series_id)
            WHERE c.series_id IS NULL OR c.node IS DISTINCT FROM s.node
               OR c.environment IS DISTINCT FROM s.environment
               OR c.model IS DISTINCT FROM s.model""").fetchall()
        if not changed:
            return
        rows, gpus = [], []
        for sid, metric, gpu, mig, node, environment, model in changed:
            role = signal_role(metric, mig, model)
            if role is None:
                continue
            if gpu not in self._gpus:
                self._gpus[gpu] = len(self._gpus)
                gpus.append((len(self._gpus) - 1, environment, model, node))
            rows.append((sid, self._units.setdefault((gpu, mig), len(self._units)),
                         self._gpus[gpu], role))
        ids = [[row[0] for row in changed]]
        con.execute(f"DELETE FROM {CACHE}.seen WHERE series_id IN "
                    "(SELECT unnest($1::INTEGER[]))", ids)
        con.execute(f"DELETE FROM {CACHE}.sig WHERE sid IN (SELECT unnest($1::INTEGER[]))", ids)
        con.execute(f"INSERT INTO {CACHE}.seen SELECT unnest($1::INTEGER[]), "
                    "unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), unnest($4::VARCHAR[])",
                    [ids[0], *([list(c) for c in zip(*[r[4:] for r in changed], strict=True)])])
        if gpus:  # where a GPU first reported from; a GPU that moves keeps its first place
            con.execute(f"INSERT INTO {CACHE}.gpus SELECT unnest($1::INTEGER[]), "
                        "unnest($2::VARCHAR[]), unnest($3::VARCHAR[]), unnest($4::VARCHAR[])",
                        [list(c) for c in zip(*gpus, strict=True)])
        if rows:
            con.execute(f"INSERT INTO {CACHE}.sig SELECT unnest($1::INTEGER[]), "
                        "unnest($2::INTEGER[]), unnest($3::INTEGER[]), unnest($4::TINYINT[])",
                        [list(c) for c in zip(*rows, strict=True)])

    def _fold(self, lo_ms: int, hi_ms: int) -> str:
        """SQL: unit-hour mask rows of the rolled-up minutes in [lo, hi)."""
        t = self.thresholds

        def mask(role: int, hot: str | None = None) -> str:
            bit = _BIT if hot is None else f"CASE WHEN {hot} THEN {_BIT} ELSE 0::UBIGINT END"
            return f"coalesce(bit_or({bit}) FILTER (WHERE role = {role}), 0::UBIGINT)"

        return f"""SELECT s.unit_id, s.gpu_id, bucket_ms // {HOUR_MS} * {HOUR_MS} AS hour_ms,
                {mask(GR)}, {mask(GR, f"v_mean >= {float(t.activity_percent)}")},
                {mask(UTIL)}, {mask(UTIL, f"v_mean >= {float(t.activity_percent)}")},
                {mask(SM)}, {mask(SM, f"v_mean >= {float(t.effective_sm_active_percent)}")},
                {mask(PMEM)}, {mask(PROC)},
                coalesce(sum(least(greatest(v_mean, 0), 100)) FILTER (WHERE role = {SM}), 0)
            FROM rollup_1m r JOIN {CACHE}.sig s ON s.sid = r.series_id
            WHERE bucket_ms >= {int(lo_ms)} AND bucket_ms < {int(hi_ms)}
            GROUP BY s.unit_id, s.gpu_id, hour_ms"""

    def _compact(self, con, lo: int, closed_ms: int, oldest_ms: int) -> None:
        """Closed hours in [lo, closed) get one row per unit; hours past the cache go."""
        if closed_ms > lo and self._filled_ms > lo:
            merged = ", ".join(f"bit_or({c})" for c in _MASK_COLUMNS)
            con.execute(f"""CREATE TEMP TABLE merged AS SELECT unit_id, gpu_id, hour_ms,
                {merged}, sum(sm_sum) FROM {CACHE}.unit_hour
                WHERE hour_ms >= {lo} AND hour_ms < {closed_ms}
                GROUP BY unit_id, gpu_id, hour_ms""")
            con.execute(f"DELETE FROM {CACHE}.unit_hour WHERE hour_ms >= {lo} "
                        f"AND hour_ms < {closed_ms}")
            con.execute(f"INSERT INTO {CACHE}.unit_hour SELECT * FROM merged")
            con.execute("DROP TABLE merged")
        con.execute(f"DELETE FROM {CACHE}.unit_hour WHERE hour_ms < {oldest_ms}")

    def _rows(self, lo_ms: int, hi_ms: int) -> str:
        """SQL: one row per unit-hour of [lo, hi): cached where it can, folded otherwise."""
        oldest = (self._filled_ms // HOUR_MS - self.cache_hours) * HOUR_MS
        columns = ", ".join(_MASK_COLUMNS)
        merged = ", ".join(f"bit_or({c}) AS {c}" for c in _MASK_COLUMNS)
        parts = [f"""SELECT unit_id, gpu_id, hour_ms, {columns}, sm_sum FROM {CACHE}.unit_hour
                     WHERE hour_ms >= {lo_ms // HOUR_MS * HOUR_MS}
                       AND hour_ms < {min(hi_ms, self._compacted_ms)}"""]
        if self._compacted_ms < hi_ms:  # the hours not compacted yet (none: not planned)
            parts.append(f"""SELECT unit_id, gpu_id, hour_ms, {merged}, sum(sm_sum) AS sm_sum
                     FROM {CACHE}.unit_hour WHERE hour_ms >= {self._compacted_ms}
                       AND hour_ms < {hi_ms} GROUP BY unit_id, gpu_id, hour_ms""")
        if lo_ms < oldest:
            parts.append(self._fold(lo_ms // HOUR_MS * HOUR_MS, min(oldest, hi_ms)))
        return " UNION ALL ".join(f"({p})" for p in parts)

    # -- questions ------------------------------------------------------------------------

    def tallies(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int, done_ms: int,
                *, last_active: bool = False) -> TallyRows:
        """See masks.MinuteMasks."""
        hi_ms = min(hi_ms, done_ms)
        if not spans or lo_ms >= hi_ms:
            return TallyRows(())
        # Columns as given (`SpanColumns`) or from the named tuples; clipping to the
        # question's window and dropping units the store never heard of happen in the
        # engine (a question at 100,000 GPUs passes 75,000 spans).
        columns = self._span_columns(spans)
        last = (f", (max({_highest_minute('(rm & hot)')}) "
                "FILTER (WHERE (rm & hot) <> 0))::BIGINT" if last_active else ", NULL")
        joined = _spans_joined(
            lo_ms, hi_ms,
            f"""SELECT unit_id, hour_ms, {_ACT_KNOWN} AS known, {_ACT_HOT} AS hot,
                       sm_known, sm_hot, sm_sum FROM ({self._rows(lo_ms, hi_ms)})""",
            "s.grp, s.w, a.hour_ms, a.known, a.hot, a.sm_known, a.sm_hot, a.sm_sum, {rm} AS rm")
        sql = f"""{joined}
            SELECT grp, coalesce(sum(w * bit_count(rm & hot)), 0)::DOUBLE,
                   coalesce(sum(w * bit_count(rm & hot & sm_hot)), 0)::DOUBLE,
                   coalesce(sum(w * bit_count(rm & known)), 0)::DOUBLE,
                   coalesce(sum(w * CASE WHEN sm_known <> 0 THEN sm_sum
                                * bit_count(rm & sm_known) / bit_count(sm_known)
                                ELSE 0 END), 0)::DOUBLE {last}
            FROM j GROUP BY grp"""
        return TallyRows(self._read(lambda cur: _run(cur, sql, columns)))

    def active_known(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int,
                     done_ms: int) -> dict[int, tuple[float, float]]:
        """See masks.MinuteMasks. `tallies` less the sm_active masks and sums."""
        hi_ms = min(hi_ms, done_ms)
        if not spans or lo_ms >= hi_ms:
            return {}
        columns = self._span_columns(spans)
        joined = _spans_joined(
            lo_ms, hi_ms,
            f"""SELECT unit_id, hour_ms, {_ACT_KNOWN} AS known, {_ACT_HOT} AS hot
                FROM ({self._rows(lo_ms, hi_ms)})""",
            "s.grp, s.w, a.known, a.hot, {rm} AS rm")
        sql = f"""{joined}
            SELECT grp, coalesce(sum(w * bit_count(rm & hot)), 0)::DOUBLE,
                   coalesce(sum(w * bit_count(rm & known)), 0)::DOUBLE
            FROM j GROUP BY grp"""
        return {grp: (active, known)
                for grp, active, known in self._read(lambda cur: _run(cur, sql, columns))}

    def last_active_minutes(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int,
                            done_ms: int) -> dict[int, int]:
        """See masks.MinuteMasks. Reads only the activity masks, and drops the unit-hours
        with no active minute before the join (the idle list's candidates have few)."""
        hi_ms = min(hi_ms, done_ms)
        if not spans or lo_ms >= hi_ms:
            return {}
        columns = self._span_columns(spans)
        joined = _spans_joined(
            lo_ms, hi_ms,
            f"""SELECT * FROM (SELECT unit_id, hour_ms, {_ACT_HOT} AS hot
                               FROM ({self._rows(lo_ms, hi_ms)})) WHERE hot <> 0""",
            "s.grp, a.hour_ms, a.hot & {rm} AS m")
        sql = f"""{joined}
            SELECT grp, max({_highest_minute("m")})::BIGINT FROM j WHERE m <> 0 GROUP BY grp"""
        return dict(self._read(lambda cur: _run(cur, sql, columns)))

    def step_tallies(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int, done_ms: int,
                     step_ms: int) -> dict[tuple[int, int], Tally]:
        """`tallies` per group and step, in one query: keyed (group, the step's start), the
        steps aligned to multiples of `step_ms` since the epoch. `step_ms` is whole hours
        or divides an hour (masks.steps_fit_hours), so each step is whole hours or one
        part of an hour's mask. No `last_active`; the sm_active sum is not split."""
        hi_ms = min(hi_ms, done_ms)
        if not spans or lo_ms >= hi_ms:
            return {}
        assert steps_fit_hours(step_ms), step_ms
        columns = self._span_columns(spans)
        parts = max(HOUR_MS // step_ms, 1)  # steps in an hour (1: the hour is in one step)
        minutes = 60 // parts
        start = (f"hour_ms // {step_ms} * {step_ms}" if step_ms >= HOUR_MS
                 else f"hour_ms + k * {step_ms}")
        part = (f"(rm & (((1::UBIGINT << {minutes}::UBIGINT) - 1::UBIGINT) "
                f"<< (k * {minutes})::UBIGINT))")
        rm = _range_mask("s.lo_ms", "s.hi_ms")
        sql = f"""WITH s AS ({_spans_sql("{view}", lo_ms, hi_ms)}),
            a AS (SELECT unit_id, hour_ms, {_ACT_KNOWN} AS known, {_ACT_HOT} AS hot,
                         sm_hot FROM ({self._rows(lo_ms, hi_ms)})),
            j AS (SELECT s.grp, s.w, a.hour_ms, a.known, a.hot, a.sm_hot,
                         {rm.replace("hour_ms", "a.hour_ms")} AS rm
                  FROM s JOIN a ON a.unit_id = s.unit_id
                   AND a.hour_ms > s.lo_ms - {HOUR_MS} AND a.hour_ms < s.hi_ms),
            p AS (SELECT grp, w, hot, sm_hot, known, {start} AS step_ms, {part} AS pm
                  FROM j, range(0, {parts}) AS t(k))
            SELECT grp, step_ms, coalesce(sum(w * bit_count(pm & hot)), 0)::DOUBLE,
                   coalesce(sum(w * bit_count(pm & hot & sm_hot)), 0)::DOUBLE,
                   coalesce(sum(w * bit_count(pm & known)), 0)::DOUBLE
            FROM p WHERE pm <> 0 GROUP BY grp, step_ms"""
        rows = self._read(lambda cur: _run(cur, sql, columns))
        return {(grp, at): Tally(active, effective, known, 0.0, None)
                for grp, at, active, effective, known in rows}

    def _span_columns(self, spans: Sequence[SlotSpan]) -> dict[str, tuple[str, Sequence]]:
        """The spans as columns for `duckdb_columns.registered`: units as the cache's unit
        ids (-1: a unit the store never heard of, dropped in the engine, as is clipping to
        the question's window — a question at 100,000 GPUs passes 75,000 spans)."""
        spans = SpanColumns.of(spans)
        units, los, his, groups, weights = (spans.units, spans.lo_ms, spans.hi_ms,
                                            spans.groups, spans.weights)
        return {"unit_id": (INT32, list(map(self._units.get, units, repeat(-1)))),
                "lo_ms": (INT64, los), "hi_ms": (INT64, his), "grp": (INT64, groups),
                "w": (FLOAT64, weights)}

    def reporting_minutes(self, by: Sequence[str], lo_ms: int, hi_ms: int,
                          done_ms: int) -> dict[tuple, int]:
        """See masks.MinuteMasks. The cached closed hours inside the window are counted once
        per grouping and kept (their masks never change: `_compact`), so a question counts
        only the partial hours at the window's edges and the hour still open."""
        hi_ms = min(hi_ms, done_ms)
        if lo_ms >= hi_ms or not self._gpus:
            return {}
        columns = tuple(c for c in by if c in ("environment", "model", "node"))
        oldest = (self._filled_ms // HOUR_MS - self.cache_hours) * HOUR_MS
        first = max(-(-lo_ms // HOUR_MS) * HOUR_MS, oldest)
        last = min(hi_ms // HOUR_MS * HOUR_MS, self._compacted_ms)
        if first >= last:
            return self._reporting(columns, lo_ms, hi_ms)
        missing = [h for h in range(first, last, HOUR_MS) if (columns, h) not in self._reported]
        if missing:
            per_hour = self._reporting(columns, missing[0], missing[-1] + HOUR_MS,
                                       per_hour=True)
            for h in missing:
                self._reported[(columns, h)] = per_hour.get(h, {})
            for key in [k for k in self._reported if k[1] < oldest]:
                self._reported.pop(key, None)
        totals: dict[tuple, int] = defaultdict(int)
        for part in [self._reported[(columns, h)] for h in range(first, last, HOUR_MS)] + [
                self._reporting(columns, lo_ms, first) if lo_ms < first else {},
                self._reporting(columns, last, hi_ms) if last < hi_ms else {}]:
            for key, minutes in part.items():
                totals[key] += minutes
        return dict(totals)

    def _reporting(self, columns: tuple[str, ...], lo_ms: int, hi_ms: int, *,
                   per_hour: bool = False) -> dict:
        """GPU-minutes with any signal in [lo, hi) per group (`per_hour`: per hour, then
        per group)."""
        keys = ", ".join(f"g.{c}" for c in columns) or "NULL"
        hour = "p.hour_ms, " if per_hour else ""
        grouping = (["p.hour_ms"] if per_hour else []) + [f"g.{c}" for c in columns]
        group = f"GROUP BY {', '.join(grouping)}" if grouping else ""
        rm = _range_mask(str(lo_ms), str(hi_ms))
        sql = f"""WITH per_gpu AS (SELECT gpu_id, hour_ms, bit_or(gr_known | util_known
                                  | sm_known | pmem_known) AS known
                                  FROM ({self._rows(lo_ms, hi_ms)}) GROUP BY gpu_id, hour_ms)
            SELECT {hour}{keys}, sum(bit_count(known & {rm}))::BIGINT
            FROM per_gpu p JOIN {CACHE}.gpus g USING (gpu_id) {group}"""
        rows = self._read(lambda cur: cur.execute(sql).fetchall())
        if not per_hour:
            return {tuple(row[:-1]) if columns else (): int(row[-1] or 0) for row in rows}
        found: dict[int, dict[tuple, int]] = defaultdict(dict)
        for row in rows:
            found[row[0]][tuple(row[1:-1]) if columns else ()] = int(row[-1] or 0)
        return found


def _spans_sql(view: str, lo_ms: int, hi_ms: int) -> str:
    """SQL: the spans of the view `_span_columns` registered, clipped to [lo, hi); units
    the store never heard of left out."""
    return f"""SELECT * FROM (
                   SELECT unit_id, greatest(lo_ms, {int(lo_ms)}) AS lo_ms,
                          least(hi_ms, {int(hi_ms)}) AS hi_ms, grp, w FROM {view})
               WHERE unit_id >= 0 AND lo_ms < hi_ms"""


def _spans_joined(lo_ms: int, hi_ms: int, unit_hours: str, joined: str) -> str:
    """SQL: the CTEs a question over spans selects from — `s` the spans (`_spans_sql`), `a`
    the unit-hours `unit_hours` selects, and `j`: the columns `joined` names, of each span
    with each hour of its unit it overlaps; `{rm}` in `joined` stands for the span's minutes
    of that hour, as a mask."""
    rm = _range_mask("s.lo_ms", "s.hi_ms").replace("hour_ms", "a.hour_ms")
    return f"""WITH s AS ({_spans_sql("{view}", lo_ms, hi_ms)}),
            a AS ({unit_hours}),
            j AS (SELECT {joined.replace("{rm}", rm)}
                  FROM s JOIN a ON a.unit_id = s.unit_id
                   AND a.hour_ms > s.lo_ms - {HOUR_MS} AND a.hour_ms < s.hi_ms)"""


def _run(cur, sql: str, columns: dict[str, tuple[str, Sequence]]) -> list[tuple]:
    """`sql` (naming the view as `{view}`) over `columns` registered on `cur`."""
    with registered(cur, columns) as view:
        return cur.execute(sql.replace("{view}", view)).fetchall()


def series_minutes(read: Callable, ids: dict[int, SeriesLabels], lo_ms: int, hi_ms: int,
                   above: float) -> dict[SeriesLabels, tuple[int, int, int | None]]:
    """See masks.MaskStore.series_minutes; `ids` maps the store's series ids to the series."""
    if not ids:
        return {}
    sql = f"""SELECT series_id, count(*), count_if(v_mean > {float(above)}), min(bucket_ms)
              FROM rollup_1m WHERE series_id IN (SELECT unnest($1::INTEGER[]))
               AND bucket_ms >= {int(lo_ms)} AND bucket_ms < {int(hi_ms)}
              GROUP BY series_id"""
    rows = read(lambda cur: cur.execute(sql, [list(ids)]).fetchall())
    return {ids[sid]: (known, busy, first) for sid, known, busy, first in rows}

