"""Per-unit, per-hour minute masks on the Prometheus-compatible store: the funnel, idleness
and zombies (the `MinuteMasks` and `series_minutes` of masks.py) answered from a
VictoriaMetrics engine the same way the embedded store answers them.

The embedded store folds its 1-minute rollups into 60-bit masks in SQL (duckdb_masks.py);
here the engine gives the same 1-minute means and the fold is Python. For each minute bucket
[b, b + 60 s) the store's range machinery asks `avg_over_time(x[60s])` at b + 60 s − 1 ms
(range windows are left-open), so a minute's mean is the mean of exactly the samples the
DuckDB store's minute rollup holds. One range query per hour asks for every signal at once
(a union of parts): the activity signals' and sm_active's means, and the presence of a MIG
instance's memory and processes (`count_over_time`, the processes counted per unit in the
engine). Each series plays its role (`masks.signal_role`), and each unit-minute is judged
as the DuckDB masks judge it: the first activity signal present wins, process presence
stands in only where the instance reported and neither engine signal did.

**Rolled up** has no engine-side meaning (the engine keeps no rollup state), so the store's
`rollup(until)` — which the server's upkeep loop calls every minute with now −
`telemetry_rollup_grace_s` — records `until`: minutes that end before it are final and
judged, later ones are not known yet, as on the DuckDB store. The grace (120 s) covers the
engine's `-search.latencyOffset` (30 s by default: a range query leaves out newer points)
and the second or two before a written sample is searchable. A sample that arrives later
than the grace is not counted in hours already cached (the DuckDB store does not re-fold
late samples either).

Closed minutes are final, so the masks are kept in memory per hour for the last
`cache_hours` hours (one array per column, indexed by unit): a refresh fetches only the
minutes rolled up since the last one, in hour chunks, each merged once it has been fetched
whole (a failed fetch leaves nothing half-counted). Questions about older hours fetch and
fold them on demand, uncached.

Where the engine holds one unit under two label sets in one minute (a unit that moved node
mid-minute starts a new series there), a signal is known or hot if either series says so,
and the sm_active sum takes the first series' mean.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.domain.telemetry.funnel import (
    GR_ENGINE_ACTIVE,
    MEMORY_USED,
    PROCESS_MEMORY,
    SM_ACTIVE,
    UTILIZATION,
    Thresholds,
)
from gpufleet.tsdb.masks import GR, PMEM, PROC, SM, UTIL, SlotSpan, Tally, UnitKey, signal_role
from gpufleet.tsdb.prometheus_names import exposition_name, series_of_labels
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, SeriesLabels

# One hour's columns, per unit: activity known / hot, sm_active known / hot; per GPU: any
# signal known (reporting).
ACT_KNOWN, ACT_HOT, SM_KNOWN, SM_HOT = range(4)
DEFAULT_CACHE_HOURS = 25  # a 24-hour window ending now touches 25 hours
# Points one fetch asks for at most: the answer's JSON (~25 bytes a point) stays ~25 MB.
MAX_POINTS_PER_FETCH = 1_000_000
UNIT_AXES = ("gpu_uuid", "mig_uuid", "node", "environment", "model")


@dataclass(frozen=True)
class Signal:
    """One part of the hourly query: a metric, how its minute is read (`avg_over_time` for
    a value, `count_over_time` for presence) and which units' series can matter."""

    metric: str
    over_time: str
    matcher: str = ""  # extra selector matchers
    per_unit: bool = False  # several series per unit (processes): counted in the engine


SIGNALS = {"gr": Signal(GR_ENGINE_ACTIVE, "avg_over_time"),
           "util": Signal(UTILIZATION, "avg_over_time", 'mig_uuid=""'),  # whole GPUs only
           "sm": Signal(SM_ACTIVE, "avg_over_time"),
           "pmem": Signal(MEMORY_USED, "count_over_time", 'mig_uuid!=""'),
           "proc": Signal(PROCESS_MEMORY, "count_over_time", 'mig_uuid!=""', per_unit=True)}

# fetch(lo_ms, hi_ms, parts): the engine's minutes of [lo, hi) for `parts` (part →
# expression of the window in ms), per answer series: its labels, its part, and its
# (minute's last ms, value) points — each minute [b, b + 60 s) is answered at b + 60 s − 1 ms.
Fetch = Callable[[int, int, Mapping[str, Callable[[int], str]]],
                 Iterable[tuple[dict[str, str], str, list[tuple[int, float]]]]]


class _Hour:
    """One hour's masks: columns indexed by unit id, the reporting column by GPU id."""

    __slots__ = ("columns", "reported", "sm_sum")

    def __init__(self) -> None:
        self.columns = [array("Q") for _ in range(4)]
        self.sm_sum = array("d")
        self.reported = array("Q")

    def add(self, uid: int, gid: int, bits: Sequence[int], sm_sum: float, reported: int
            ) -> None:
        for column in (*self.columns, self.sm_sum):
            if len(column) <= uid:
                column.extend([0] * (uid + 1 - len(column)))
        for column, value in zip(self.columns, bits, strict=True):
            column[uid] |= value
        self.sm_sum[uid] += sm_sum
        self.add_reported(gid, reported)

    def add_reported(self, gid: int, bits: int) -> None:
        if len(self.reported) <= gid:
            self.reported.extend([0] * (gid + 1 - len(self.reported)))
        self.reported[gid] |= bits

    def merge(self, other: _Hour, units: Sequence[int]) -> None:
        """Add another fold of the same hour (other minutes, or other units)."""
        for uid in range(len(other.sm_sum)):
            self.add(uid, units[uid], [c[uid] for c in other.columns], other.sm_sum[uid], 0)
        for gid, bits in enumerate(other.reported):
            self.add_reported(gid, bits)


def range_mask(hour_ms: int, lo_ms: int, hi_ms: int) -> int:
    """The bits of the minutes of the hour whose start lies in [lo, hi)."""
    def minute(edge: int) -> int:
        return min(max(-(-(edge - hour_ms) // MINUTE_MS), 0), 60)
    return ((1 << minute(hi_ms)) - 1) ^ ((1 << minute(lo_ms)) - 1)


class PrometheusMinuteMasks:
    """Made by `PrometheusTelemetryStore.minute_masks`: `fetch` asks the engine for minutes
    (`Fetch`), `rolled_up()` says until when (ms) minutes are judged."""

    def __init__(self, fetch: Fetch, rolled_up: Callable[[], int], thresholds: Thresholds, *,
                 cache_hours: int = DEFAULT_CACHE_HOURS):
        self._fetch = fetch
        self._rolled_up = rolled_up
        self.thresholds = thresholds
        self.cache_hours = cache_hours
        self._refresh_lock = threading.Lock()  # one refresher fetches at a time
        self._lock = threading.Lock()  # the cache and the unit registry
        self._units: dict[UnitKey, int] = {}
        self._gpu_of_unit: list[int] = []
        self._gpus: dict[str, int] = {}
        self._gpu_attrs: list[dict[str, str]] = []  # where each GPU first reported from
        self._hours: dict[int, _Hour] = {}
        self._cached_from_ms = 0  # hours from here to _filled_ms are cached
        self._filled_ms = 0
        self.points_fetched = 0  # minute points the engine returned (for benchmarks)
        self._points_per_minute = 0.0  # what the last fetch returned: sizes the next one

    def _chunk_minutes(self) -> int:
        """Minutes one fetch may span: an hour, or fewer where the fleet answers so many
        points a minute that an hour would pass MAX_POINTS_PER_FETCH; 10 before anything is
        known (a 100,000-GPU fleet's first fetch stays ~3 million points)."""
        if not self._points_per_minute:
            return 10
        return max(1, min(60, int(MAX_POINTS_PER_FETCH // self._points_per_minute)))

    # -- the cache ------------------------------------------------------------------------

    def refresh(self) -> int:
        """Fold the minutes rolled up since the last refresh; returns that bound (ms)."""
        with self._refresh_lock:
            done_ms = self._rolled_up() // MINUTE_MS * MINUTE_MS
            oldest_ms = (done_ms // HOUR_MS - self.cache_hours) * HOUR_MS
            lo_ms = max(self._filled_ms, oldest_ms)
            with self._lock:
                self._hours = {h: m for h, m in self._hours.items() if h >= oldest_ms}
                self._cached_from_ms = oldest_ms if lo_ms == oldest_ms else \
                    max(self._cached_from_ms, oldest_ms)
            for chunk_lo, chunk_hi in _chunks(lo_ms, done_ms, self._chunk_minutes):
                folded = self._fold(chunk_lo, chunk_hi)  # fetched whole, then merged
                with self._lock:
                    for hour_ms, hour in folded.items():
                        self._hours.setdefault(hour_ms, _Hour()).merge(hour, self._gpu_of_unit)
                    self._filled_ms = chunk_hi
            with self._lock:
                self._filled_ms = max(self._filled_ms, done_ms)
            return done_ms

    def _fold(self, lo_ms: int, hi_ms: int) -> dict[int, _Hour]:
        """The masks of the minutes in [lo, hi) (within one hour), as the engine has them."""
        answer = self._fetch(lo_ms, hi_ms, {part: _expression(signal)
                                            for part, signal in SIGNALS.items()})
        hour_ms = lo_ms // HOUR_MS * HOUR_MS
        first_end_ms = hour_ms + MINUTE_MS - 1  # the end (its last ms) of the hour's minute 0
        # unit id → known masks by role, hot masks by role, sm_active sum
        acc: dict[int, list] = {}
        points = 0
        t = self.thresholds
        hot_at = {GR: t.activity_percent, UTIL: t.activity_percent,
                  SM: t.effective_sm_active_percent}
        with self._lock:
            for labels, part, ends in answer:
                if "gpu_uuid" not in labels:
                    continue
                role = signal_role(SIGNALS[part].metric, labels.get("mig_uuid") or None,
                                   labels.get("model", ""))
                if role is None:
                    continue
                uid = self._unit_id(labels)
                masks = acc.get(uid)
                if masks is None:
                    masks = acc[uid] = [0] * 10 + [0.0]
                points += len(ends)
                hot_from = hot_at.get(role, math.inf)
                known = hot = 0
                for end_ms, value in ends:  # the loop every point goes through: kept bare
                    bit = 1 << (end_ms - first_end_ms) // MINUTE_MS
                    if role == SM and not (masks[SM] | known) & bit:
                        masks[10] += min(max(value, 0.0), 100.0)
                    known |= bit
                    if value >= hot_from:
                        hot |= bit
                masks[role] |= known
                masks[5 + role] |= hot
            self.points_fetched += points
            self._points_per_minute = points / ((hi_ms - lo_ms) / MINUTE_MS)
            hour = _Hour()
            for uid, m in acc.items():
                gr, util, sm, pmem, proc = m[GR], m[UTIL], m[SM], m[PMEM], m[PROC]
                # A minute's activity is its first signal present (`unit_activity`).
                active = m[5 + GR] | (m[5 + UTIL] & ~gr) | (pmem & proc & ~gr & ~util)
                hour.add(uid, self._gpu_of_unit[uid], (gr | util | pmem, active, sm, m[5 + SM]),
                         m[10], gr | util | sm | pmem)
        return {hour_ms: hour} if acc else {}

    def _unit_id(self, labels: Mapping[str, str]) -> int:
        unit = (labels["gpu_uuid"], labels.get("mig_uuid") or None)
        uid = self._units.get(unit)
        if uid is None:
            gid = self._gpus.get(unit[0])
            if gid is None:  # a GPU counts towards where it first reported from
                gid = self._gpus[unit[0]] = len(self._gpu_attrs)
                self._gpu_attrs.append({name: labels.get(name, "")
                                        for name in ("node", "environment", "model")})
            uid = self._units[unit] = len(self._gpu_of_unit)
            self._gpu_of_unit.append(gid)
        return uid

    def _hours_of(self, lo_ms: int, hi_ms: int) -> Callable[[int], _Hour | None]:
        """The masks of each hour of [lo, hi): cached, or fetched now (hours the cache does
        not keep)."""
        older: dict[int, _Hour] = {}
        for chunk_lo, chunk_hi in _chunks(lo_ms // HOUR_MS * HOUR_MS,
                                          min(hi_ms, self._cached_from_ms), self._chunk_minutes):
            for hour_ms, hour in self._fold(chunk_lo, chunk_hi).items():
                older.setdefault(hour_ms, _Hour()).merge(hour, self._gpu_of_unit)
        return lambda hour_ms: older.get(hour_ms) if hour_ms < self._cached_from_ms \
            else self._hours.get(hour_ms)

    # -- questions ------------------------------------------------------------------------

    def tallies(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int, done_ms: int,
                *, last_active: bool = False) -> dict[int, Tally]:
        """See masks.MinuteMasks."""
        hi_ms = min(hi_ms, done_ms)
        if lo_ms >= hi_ms:
            return {}
        hour_of = self._hours_of(lo_ms, hi_ms)
        sums: dict[int, list] = {}
        with self._lock:
            for span in spans:
                uid = self._units.get(span.unit)
                lo, hi = max(span.lo_ms, lo_ms), min(span.hi_ms, hi_ms)
                if uid is None or lo >= hi:
                    continue
                total = sums.setdefault(span.group, [0, 0, 0, 0.0, None])
                for hour_ms in range(lo // HOUR_MS * HOUR_MS, hi, HOUR_MS):
                    hour = hour_of(hour_ms)
                    if hour is None or uid >= len(hour.sm_sum):
                        continue
                    _add_hour(total, hour, uid, range_mask(hour_ms, lo, hi), span.weight,
                              hour_ms if last_active else None)
        return {group: Tally(float(a), float(e), float(k), s, last)
                for group, (a, e, k, s, last) in sums.items()}

    def reporting_minutes(self, by: Sequence[str], lo_ms: int, hi_ms: int,
                          done_ms: int) -> dict[tuple, int]:
        """See masks.MinuteMasks."""
        hi_ms = min(hi_ms, done_ms)
        if lo_ms >= hi_ms:
            return {}
        hour_of = self._hours_of(lo_ms, hi_ms)
        columns = [c for c in by if c in ("environment", "model", "node")]
        counts: dict[tuple, int] = {}
        with self._lock:
            keys = [tuple(attrs[c] for c in columns) for attrs in self._gpu_attrs]
            for hour_ms in range(lo_ms // HOUR_MS * HOUR_MS, hi_ms, HOUR_MS):
                hour = hour_of(hour_ms)
                if hour is None:
                    continue
                rm = range_mask(hour_ms, lo_ms, hi_ms)
                for gid, bits in enumerate(hour.reported):
                    counts[keys[gid]] = counts.get(keys[gid], 0) + (bits & rm).bit_count()
        return counts


def _add_hour(total: list, hour: _Hour, uid: int, rm: int, weight: float,
              hour_ms: int | None) -> None:
    """Add one unit-hour's minutes in `rm` to a group's running tally
    [active, effective, known, sm sum, last active ms]."""
    known, hot, sm_known, sm_hot = (c[uid] for c in hour.columns)
    active = rm & hot
    total[0] += weight * active.bit_count()
    total[1] += weight * (active & sm_hot).bit_count()
    total[2] += weight * (rm & known).bit_count()
    if sm_known:  # the hour's sum spread over its known minutes
        total[3] += weight * hour.sm_sum[uid] * (rm & sm_known).bit_count() \
            / sm_known.bit_count()
    if hour_ms is not None and active:
        last = hour_ms + (active.bit_length() - 1) * MINUTE_MS
        total[4] = last if total[4] is None else max(total[4], last)


def _chunks(lo_ms: int, hi_ms: int, minutes: Callable[[], int]) -> Iterator[tuple[int, int]]:
    """[lo, hi) cut at hour boundaries and into `minutes()` minutes at most (asked again
    for each chunk: it follows what the last fetch returned)."""
    while lo_ms < hi_ms:
        end = min((lo_ms // HOUR_MS + 1) * HOUR_MS, lo_ms + minutes() * MINUTE_MS, hi_ms)
        yield lo_ms, end
        lo_ms = end


def _expression(signal: Signal) -> Callable[[int], str]:
    matchers = ", ".join(filter(None, [f'__name__="{exposition_name(signal.metric)}"',
                                       signal.matcher]))

    def expression(window_ms: int) -> str:
        inner = f"{signal.over_time}({{{matchers}}}[{window_ms}ms])"
        return f"count by ({', '.join(UNIT_AXES)}) ({inner})" if signal.per_unit else inner
    return expression


def series_minutes(fetch: Fetch, selection: Callable, chosen: Sequence[SeriesLabels],
                   lo_ms: int, hi_ms: int, above: float
                   ) -> dict[SeriesLabels, tuple[int, int, int | None]]:
    """See masks.MaskStore.series_minutes: per series, the minutes starting in [lo, hi)
    with a mean, those whose mean is above `above`, and the first minute with a mean.
    `selection(metric, filters)` is the store's selector for the series' GPUs."""
    lo_ms, hi_ms = -(-lo_ms // MINUTE_MS) * MINUTE_MS, -(-hi_ms // MINUTE_MS) * MINUTE_MS
    by_metric: dict[str, set[SeriesLabels]] = {}
    for labels in chosen:
        by_metric.setdefault(labels.metric, set()).add(labels)
    found: dict[SeriesLabels, tuple[int, int, int | None]] = {}
    for metric, wanted in by_metric.items():
        selector = selection(metric, {"gpu_uuid": sorted({s.gpu_uuid for s in wanted})})
        if selector is None or lo_ms >= hi_ms:
            continue
        means: dict[SeriesLabels, dict[int, float]] = {}
        for labels, _, ends in fetch(lo_ms, hi_ms, {
                "v": lambda w, s=selector: f"avg_over_time({s}[{w}ms])"}):
            described = series_of_labels(labels, metric)
            if described in wanted:
                means.setdefault(described, {}).update(ends)
        for described, by_end in means.items():
            if by_end:
                found[described] = (len(by_end), sum(v > above for v in by_end.values()),
                                     min(by_end) - (MINUTE_MS - 1))
    return found
