"""A moving one-step window's edge minutes as per-series prefix sums, held in numpy: how a
"last 24 h" mean through bindings ending mid-hour is answered without folding the edge
minutes of every slot in SQL.

With the whole hours' folds kept (whole_hour_folds.py), a window ending at :37 still read
the minute rows of its partial first (23 minutes) and last (37) hours for every slot and
folded them per slot in one statement: at 10,000 GPUs ~240,000 minute rows and ~7 ms of
DuckDB planning, ~28 ms CPU of a ~40 ms call. Yet for a time-weighted mean (the over-time
`v_mean` of gauges: sm_active, memory used, temperature) a slot's answer needs only two
sums, Σ v_mean·n and Σ n, and both add: over the rows of a slot's part of an hour they are
prefix[b] − prefix[a]. So per edge hour, for the series of the query's slots, the running
sums over the hour's minute rows (series × 61, the minute tier's rows as they are) are
built once — read once, as the hour is closed — and the open hour's are extended by the
minutes rolled up since (a minute row never changes once rolled up: samples before the
minute tier's extent are not folded again). A query then adds, per slot, its kept
whole-hour fold (read once per extent and slots), its two edge differences, and the raw
samples past the minute tier's extent (read per query, as the general statement folds
them into minutes), and groups slots with `numpy.bincount`.

Exact for the mean of the slots' means, their sum, and the count of non-zero means (the
general statement's arithmetic, up to the last bits of floating-point sums). The other
folds (last, increase, peak) and value filters are answered by the general statement.
"""

from __future__ import annotations

import threading

from gpufleet.domain.telemetry.vocabulary import AcrossSeries
from gpufleet.tsdb.duckdb_columns import INT32, registered
from gpufleet.tsdb.edge_pieces import kept_among
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS
from gpufleet.tsdb.raw_writes import RawWrites
from gpufleet.tsdb.sorted_ids import places_in_sorted
from gpufleet.tsdb.whole_hour_folds import kept_rows, whole_hours

_ACROSS = (AcrossSeries.MEAN, AcrossSeries.SUM, AcrossSeries.COUNT)
_MAX_TAIL_MINUTES = 60  # a minute tier further behind: the general statement
_KEPT_HOURS = 4
_KEPT_SETS = 2


class MinutePrefix:
    """Running sums of v_mean·n and n over `minutes` minutes from `origin_ms`, one row per
    series of `sids` (sorted): column k holds the sums of the minutes before minute k. The
    minutes before `filled` are in (the columns past it are not read)."""

    def __init__(self, sids, origin_ms: int, minutes: int):
        import numpy as np  # as duckdb_columns: not at import

        self.sids = sids
        self.origin_ms = origin_ms
        self.filled = 0
        # No NaN or inf among the minutes in: one would spoil every later difference of
        # its series (NaN − NaN), where the rows spoil only the slots holding it.
        self.finite = True
        self.sums = np.zeros((len(sids), minutes + 1))
        self.counts = np.zeros((len(sids), minutes + 1), dtype=np.int32)

    def add(self, upto: int, series_id, bucket_ms, weighted, n) -> tuple:
        """Take the rows of the minutes [filled, upto) (columns of equal length) in;
        returns them as (Σ v·n, n) blocks, a column per minute."""
        import numpy as np

        first = self.filled
        rows = np.searchsorted(self.sids, series_id)
        minute = (bucket_ms - self.origin_ms) // MINUTE_MS - first
        blocks = []
        for total, values in ((self.sums, weighted), (self.counts, n)):
            block = np.zeros((len(self.sids), max(upto - first, 0)), dtype=total.dtype)
            block[rows, minute] = values  # one row per series and minute
            blocks.append(block)
        self.add_blocks(*blocks)
        return tuple(blocks)

    def add_blocks(self, weighted, n) -> None:
        """Take the next minutes in as blocks of sums (a column per minute)."""
        import numpy as np

        first = self.filled
        upto = first + weighted.shape[1]
        for total, block in ((self.sums, weighted), (self.counts, n)):
            total[:, first + 1:upto + 1] = total[:, first:first + 1] + np.cumsum(block, axis=1)
        self.filled = upto
        # One sum of the block: NaN or inf if any minute is (or if it overflows: the
        # general statement answers then too). Not a column of the sums: strided.
        self.finite = self.finite and bool(np.isfinite(weighted.sum()))

    def between(self, rows, lo_ms, hi_ms, upto: int | None = None):
        """Each slot's sums over its rows (`rows`: its series' row) starting in
        [lo, hi) (arrays, ms), clipped to the minutes filled, and to the first `upto`
        (the minutes the caller's snapshot has rolled up: a query that took its snapshot
        before a rollup reads the later minutes from its raw samples, not also from the
        sums another query extended since)."""
        import numpy as np

        last = self.filled if upto is None else min(self.filled, upto)
        start = np.clip(-((self.origin_ms - lo_ms) // MINUTE_MS), 0, last)
        stop = np.clip(-((self.origin_ms - hi_ms) // MINUTE_MS), 0, last)
        stop = np.maximum(stop, start)
        return (self.sums[rows, stop] - self.sums[rows, start],
                self.counts[rows, stop] - self.counts[rows, start])


def series_sql(sids, sids_view: str) -> str:
    """SQL: a filter passing the rows of the series `sids` (sorted; registered as
    `sids_view`) — and, where they fill most of their id range, those of the other series
    in it, which `_of_series` drops. A metric's series ids are handed out in blocks
    (series_ids.py), so a fleet's bound GPUs' series fill most of theirs; a range lets the
    scan skip by the column's min/max instead of probing a hash of 10,000 ids (~3 ms CPU a
    statement, measured on the bench's store)."""
    if len(sids) and int(sids[-1]) - int(sids[0]) + 1 <= 2 * len(sids):
        return f"series_id BETWEEN {int(sids[0])} AND {int(sids[-1])}"
    return f"series_id IN (SELECT sid FROM {sids_view})"


def _of_series(sids, got: dict) -> dict:
    """The rows of `got` whose series is among `sids` (sorted)."""

    _, keep = places_in_sorted(sids, got["series_id"])
    if keep.all():
        return got
    return {name: values[keep] for name, values in got.items()}


def _minute_rows(cur, sids, sids_view: str, lo_ms: int, hi_ms: int) -> dict:
    return _of_series(sids, cur.execute(f"""
        SELECT series_id, bucket_ms, v_mean * n AS w, n FROM rollup_1m
        WHERE bucket_ms >= {lo_ms} AND bucket_ms < {hi_ms}
          AND {series_sql(sids, sids_view)}""").fetchnumpy())


def _raw_minutes(cur, sids, sids_view: str, lo_ms: int, hi_ms: int) -> dict:
    """The raw samples in [lo, hi) as the general statement folds them into minutes."""
    return _of_series(sids, cur.execute(f"""
        SELECT series_id, ts_ms // {MINUTE_MS} * {MINUTE_MS} AS bucket_ms,
               sum(value) AS w, count(*) AS n FROM samples
        WHERE ts_ms >= {lo_ms} AND ts_ms < {hi_ms}
          AND {series_sql(sids, sids_view)}
        GROUP BY ALL""").fetchnumpy())


class _SeriesHours:
    """The kept prefixes of series of one metric (sorted `sids`), by hour, least
    recently used first."""

    def __init__(self, metric: str, sids) -> None:
        self.metric = metric
        self.sids = sids
        self.hours: dict[int, MinutePrefix] = {}
        # Raw minutes past the minute tier read before: minute → (raw_writes' version when
        # read, Σ v per series, n per series), good while no later write reached them.
        self.raw: dict[int, tuple] = {}
        self.holds = None  # the last slots' sid array found among `sids` (kept alive)

    def prefix(self, hour_ms: int) -> MinutePrefix:
        prefix = self.hours.pop(hour_ms, None) or MinutePrefix(self.sids, hour_ms, 60)
        self.hours[hour_ms] = prefix  # now the most recently used
        while len(self.hours) > _KEPT_HOURS:
            del self.hours[next(iter(self.hours))]
        return prefix


class EdgeMinuteSums:
    """The kept prefixes of edge hours and the slots' kept whole-hour sums. Bounded:
    `_KEPT_HOURS` hours (a moving window's two edge hours, twice: two windows asked in
    turn) for each of the last `_KEPT_SETS` metrics asked, at ~12 bytes a series and
    minute (10,000 series: 7.3 MB an hour); the whole hours' sums of the last
    `_KEPT_HOURS` windows and slots asked."""

    def __init__(self) -> None:
        self.raw_writes = RawWrites()  # the store tells it of each write (raw_writes.py)
        self._lock = threading.Lock()  # one caller at a time builds and reads the prefixes
        self._sets: list[_SeriesHours] = []  # most recently used last
        self._kept: list[tuple] = []  # (key, slots, weighted, n), most recently used last

    @staticmethod
    def answers(plan, where, minute_done_ms: int, hour_done_ms: int,
                folds_done_ms: int) -> bool:
        """Whether this path answers the query (else the general statement does): a
        time-weighted mean combined by mean, sum or count, no value filter, the whole
        hours' folds read, and few raw samples past the minute tier."""
        return (where is None and plan.column == "v_mean" and plan.across in _ACROSS
                and plan.reads_folds(hour_done_ms, folds_done_ms)
                and plan.hi_ms - minute_done_ms <= _MAX_TAIL_MINUTES * MINUTE_MS)

    def forget_before(self, minute_cut_ms: int, hour_cut_ms: int) -> None:
        """Drop what read rows retention deleted: minute rows before `minute_cut_ms`,
        hourly rows (so whole-hour folds) before `hour_cut_ms`."""
        with self._lock:
            for kept in self._sets:
                for hour in [h for h in kept.hours if h < minute_cut_ms]:
                    del kept.hours[hour]
            self._kept = [k for k in self._kept if k[0][1] >= hour_cut_ms]

    def answer(self, cur, plan, slots, metric: str, minute_done_ms: int,
               hour_done_ms: int, raw_version: int) -> list[tuple] | None:
        """(group, window start, value) rows, by group, as `RangePlan.sql` answers them,
        for the slots of `metric`; read on `cur` (the query's snapshot, with
        `hour_done_ms` the folds' extent, begun after `raw_writes` counted
        `raw_version`). None where a NaN or inf sample reached the sums read: the
        general statement answers then."""
        import numpy as np

        columns = slots.columns()
        sid, grp = columns["sid"][1], columns["grp"][1]
        froms, tos = columns["from_ms"][1], columns["to_ms"][1]
        first, end = whole_hours(plan.lo_ms, plan.hi_ms, hour_done_ms)
        with self._lock:
            kept = self._series(metric, sid)
            rows = np.searchsorted(kept.sids, sid)
            with registered(cur, {"sid": (INT32, kept.sids)}) as sids_view:
                weighted, n = self._whole(cur, slots, hour_done_ms, first, end)
                weighted, n = weighted.copy(), n.copy()
                for lo, hi in ((plan.lo_ms, first), (end, plan.hi_ms)):
                    if lo >= hi:
                        continue
                    a, b = np.maximum(froms, lo), np.minimum(tos, hi)
                    raw = (self.raw_writes, raw_version)
                    for prefix, upto in _prefixes(cur, kept, sids_view, lo, hi,
                                                  minute_done_ms, raw):
                        if not prefix.finite:
                            return None
                        w, c = prefix.between(rows, a, b, upto)
                        weighted += w
                        n += c
        return _grouped(plan, grp, weighted, n)

    def _series(self, metric: str, sid) -> _SeriesHours:
        """The kept prefixes of the metric's series asked so far, grown (and built anew)
        when a slot's series is not among them: a binding starting or ending changes the
        slots, not the series whose sums are kept."""
        import numpy as np

        found = next((k for k in self._sets if k.metric == metric), None)
        if found is None:
            found = _SeriesHours(metric, np.unique(sid))
        elif found.holds is not sid:  # else the last question's slots (~1 ms saved)
            sids = np.unique(sid)
            if not places_in_sorted(found.sids, sids)[1].all():
                found = _SeriesHours(metric, np.union1d(found.sids, sids))
        self._sets = [*[k for k in self._sets if k.metric != metric], found][-_KEPT_SETS:]
        found.holds = sid
        return found

    def _whole(self, cur, slots, hour_done_ms: int, first: int, end: int):
        """Each slot's Σ v_mean·n and Σ n over the window's whole hours: its kept fold
        (read once per extent, window and slots; when the slots changed, a binding having
        started or ended, only for the slots not among the last ones: ~3 ms CPU of such a
        minute at 10,000 GPUs)."""
        import numpy as np

        key = (hour_done_ms, first, end)
        found = next((k for k in self._kept if k[0] == key and k[1] is slots), None)
        if found is None:
            columns = slots.columns()
            weighted = np.zeros(len(slots.ids))
            n = np.zeros(len(slots.ids), dtype=np.int64)
            before = next((k for k in reversed(self._kept) if k[0] == key), None)
            if before is not None:  # the same whole hours: unchanged slots, same folds
                old = before[1].columns()
                at = kept_among(tuple(columns[c][1] for c in ("sid", "from_ms", "to_ms")),
                                tuple(old[c][1] for c in ("sid", "from_ms", "to_ms")))
                same = at >= 0
                weighted[same], n[same] = before[2][at[same]], before[3][at[same]]
                chosen = np.flatnonzero(~same)
                columns = {name: (kind, np.asarray(values)[chosen])
                           for name, (kind, values) in columns.items()}
            if len(columns["sid"][1]):  # else only slots gone: the rest were read
                with registered(cur, columns) as view:
                    got = cur.execute(f"""WITH sel AS (SELECT * FROM {view})
                        SELECT series_id AS slot, v_mean * n AS w, n
                        FROM ({kept_rows(first, end)})""").fetchnumpy()
                weighted[got["slot"]] = got["w"]
                n[got["slot"]] = got["n"]
            found = (key, slots, weighted, n)
        else:
            self._kept.remove(found)
        self._kept = [*self._kept, found][-_KEPT_HOURS:]
        return found[2], found[3]


def _prefixes(cur, kept: _SeriesHours, sids_view: str, lo: int, hi: int,
              minute_done_ms: int, raw: tuple[RawWrites, int]):
    """The prefixes covering [lo, hi), each with how many of its minutes this snapshot
    reads: one per hour of the minute tier's rows (kept, extended to the tier's extent;
    a newer query may have extended it further), and one of the raw samples past it
    (`_raw_prefix`)."""
    for hour in range(lo // HOUR_MS * HOUR_MS, min(hi, minute_done_ms), HOUR_MS):
        prefix = kept.prefix(hour)
        upto = min(60, (minute_done_ms - hour) // MINUTE_MS)
        if prefix.filled < upto:
            got = _minute_rows(cur, kept.sids, sids_view, hour + prefix.filled * MINUTE_MS,
                               hour + upto * MINUTE_MS)
            prefix.add(upto, got["series_id"], got["bucket_ms"], got["w"], got["n"])
        yield prefix, upto
    tail = max(lo, minute_done_ms)
    if tail < hi:
        yield _raw_prefix(cur, kept, sids_view, tail, hi, raw), None


def _raw_prefix(cur, kept: _SeriesHours, sids_view: str, tail: int, hi: int,
                raw: tuple[RawWrites, int]) -> MinutePrefix:
    """The raw samples in [tail, hi) (tail on a minute: past the minute tier) as a
    prefix. Its whole minutes that were read before and that no write reached since
    (raw_writes.py) are taken as kept; the rest is read on `cur` and its whole minutes
    kept: a caller asking once a minute reads the minute just written, not the rollup
    grace's ~3 minutes of every series (~7 ms CPU at 10,000 GPUs)."""
    import numpy as np

    writes, version = raw
    minutes = -(-(hi - tail) // MINUTE_MS)
    whole = (hi - tail) // MINUTE_MS
    kept.raw = {m: got for m, got in kept.raw.items() if m >= tail}  # rolled up: gone
    prefix = MinutePrefix(kept.sids, tail, minutes)
    ready = []
    for k in range(whole):
        found = kept.raw.get(tail + k * MINUTE_MS)
        if found is None or writes.oldest_since(found[0]) < tail + (k + 1) * MINUTE_MS:
            break
        ready.append(found)
    if ready:
        prefix.add_blocks(np.stack([r[1] for r in ready], axis=1),
                          np.stack([r[2] for r in ready], axis=1))
    if prefix.filled < minutes:
        got = _raw_minutes(cur, kept.sids, sids_view, lo_ms=tail + prefix.filled * MINUTE_MS,
                           hi_ms=hi)
        first = prefix.filled
        weighted, n = prefix.add(minutes, got["series_id"], got["bucket_ms"], got["w"],
                                 got["n"])
        for k in range(first, whole):
            kept.raw[tail + k * MINUTE_MS] = (version, weighted[:, k - first],
                                              n[:, k - first])
    return prefix


def _grouped(plan, grp, weighted, n) -> list[tuple]:
    """The slots' means combined per group as `RangePlan._folded` combines them: a slot
    with no rows counts for nothing; a group with none is not answered."""
    import numpy as np

    has = n > 0
    groups = grp[has]
    mean = weighted[has] / n[has]
    size = int(grp.max()) + 1 if len(grp) else 0
    counted = np.bincount(groups, minlength=size)
    if plan.across is AcrossSeries.MEAN:
        values = np.bincount(groups, weights=mean, minlength=size) / np.maximum(counted, 1)
    elif plan.across is AcrossSeries.SUM:
        values = np.bincount(groups, weights=mean, minlength=size)
    else:
        values = np.bincount(groups, weights=(mean != 0), minlength=size)
    answered = np.flatnonzero(counted)
    return [(int(g), plan.lo_ms, float(values[g])) for g in answered]
