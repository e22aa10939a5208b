"""Per-unit, per-hour minute masks on the Prometheus-compatible store: the funnel, idleness
and zombies (the `MinuteMasks` and `series_minutes` of masks.py) answered from a
VictoriaMetrics engine the same way the embedded store answers them.

The masks are computed inside the engine (engine_masks.py): per half hour, one instant
query per signal returns each series' minutes as a base-3 code, decoded here with numpy
into the 60-bit
masks the DuckDB store keeps (activity known / hot, sm_active known / hot, the hour's
sm_active sum; per GPU "any signal" is activity or sm_active known). Each minute
[b, b + 60 s) holds exactly the samples the DuckDB store's minute rollup holds.

**Recorded hours.** The leader replica (`record_closed_hours`, run by the upkeep loop under
the `telemetry-masks` leader lock) writes each closed hour's masks back into the engine as
`gpufleet_masks` series; a replica filling its cache reads the recorded hours with one
export (5 numbers per unit-hour) and computes in the engine only the hours not recorded yet
(first deployment, a gap, an import not searchable yet) and the open hour — past its half,
only the open half, once the leader has recorded the closed first half ("Recorded halves"
in engine_masks.py).

**Rolled up** has no engine-side meaning (the engine keeps no rollup state), so the store's
`rollup(until)` — which the server's upkeep loop calls every minute with now −
`telemetry_rollup_grace_s` — records `until`: minutes that end before it are final and
judged, later ones are not known yet, as on the DuckDB store. The grace (120 s) covers the
engine's `-search.latencyOffset` (30 s by default) and the second or two before a written
sample is searchable. A sample that arrives later than the grace is not counted in hours
already cached or recorded (the DuckDB store does not re-fold late samples either).

Closed minutes are final, so the masks are kept in memory per hour for the last
`cache_hours` hours (numpy columns indexed by unit): a refresh asks only for the minutes
rolled up since the last one, each hour's part merged once fetched whole (a failed fetch
leaves nothing half-counted). Questions about older hours read or compute them on demand,
uncached. The questions are counted with numpy over the spans (no per-binding Python loop).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import numpy as np
import orjson

from gpufleet.domain.telemetry.funnel import MEMORY_USED, Thresholds
from gpufleet.tsdb.engine_masks import (
    HALF_MARKER_NAME,
    HALF_MS,
    HALF_SELECTOR_NAME,
    HOUR_MS,
    MARKER_NAME,
    HourMasks,
    export_selector,
    fold_answer,
    half_queries,
    halves,
    marker_line,
    read_export,
    recorded_lines,
    threshold_labels,
)
from gpufleet.tsdb.masks import SlotSpan, SpanColumns, Tally, TallyRows, UnitKey
from gpufleet.tsdb.prometheus_names import LATEST_AHEAD_MS, series_of_labels
from gpufleet.tsdb.protocol import MINUTE_MS, SeriesLabels

DEFAULT_CACHE_HOURS = 25  # a 24-hour window ending now touches 25 hours
QUIET_AFTER_S = 600  # no question for this long: the upkeep refreshes every...
QUIET_REFRESH_MS = 15 * MINUTE_MS  # ... this many minutes only
# Queries in flight for one hour's masks: one, fetched and parsed while the previous answer
# is folded. More (2 and 4 were tried) cost VictoriaMetrics ~10 % more CPU at 100,000 GPUs
# and saved no wall time on a 2-core machine, where the engine already spreads each query
# over both cores; an engine on more cores than the replica's may want more.
QUERIES_AT_ONCE = 1
_U64 = np.uint64

# fetch(lo_ms, hi_ms, parts): the engine's minutes of [lo, hi) for `parts` (part →
# expression of the window in ms), per answer series: its labels, its part, and its
# (minute's last ms, value) points — each minute [b, b + 60 s) is answered at b + 60 s − 1 ms.
Fetch = Callable[[int, int, Mapping[str, Callable[[int], str]]],
                 Iterable[tuple[dict[str, str], str, list[tuple[int, float]]]]]


class MaskEngine(Protocol):
    """What the masks ask of the store's engine."""

    def instant(self, query: str, at_ms: int) -> list[dict]:
        """The result entries of an instant query (labels as "metric", "value")."""

    def newest_of_units(self, metric: str, at_ms: int, window_ms: int
                        ) -> dict[UnitKey, float]:
        """Each unit's newest value of `metric` in (at − window, at] (a unit answered by
        two series, having moved node: the newer one's)."""

    def import_lines(self, body: bytes) -> None:
        """Store JSON lines (`/api/v1/import`); raise where the engine refused them."""

    def export_lines(self, selector: str, lo_ms: int, hi_ms: int) -> Iterable[bytes]:
        """The JSON lines of `/api/v1/export` for [lo, hi] (ms, both ends in)."""


class PrometheusMinuteMasks:
    """Made by `PrometheusTelemetryStore.minute_masks`: `engine` (`MaskEngine`) answers
    the queries, `rolled_up()` says until when (ms) minutes are judged."""

    def __init__(self, engine: MaskEngine, rolled_up: Callable[[], int],
                 thresholds: Thresholds, *, cache_hours: int = DEFAULT_CACHE_HOURS):
        self._engine = engine
        self._rolled_up = rolled_up
        self.thresholds = thresholds
        self.cache_hours = cache_hours
        self._refresh_lock = threading.Lock()  # one refresher fetches at a time
        self._lock = threading.Lock()  # the cache and the unit registry
        self._units: dict[UnitKey, int] = {}
        # Each unit's label set where it first reported (as of the earliest minute seen:
        # the cold leader folds the open hour beside the older ones), which its recorded
        # hours carry: a replica reading them counts the GPU where the leader does.
        self._unit_labels: list[dict[str, str]] = []
        self._unit_first_ms: list[int] = []
        self._gpu_of_unit: list[int] = []
        self._gpus: dict[str, int] = {}
        self._gpu_attrs: list[dict[str, str]] = []  # where each GPU first reported from
        self._gpu_first_ms: list[int] = []  # ... as of when
        self._first_ms_bound = 0  # no GPU's first report is later than this
        self._hours: dict[int, HourMasks] = {}
        self._cached_from_ms = 0  # hours from here to filled_ms are cached
        self.filled_ms = 0
        self._recorded_until_ms = 0  # record_closed_hours saw every hour before recorded
        # For tests and benchmarks: numbers the engine returned (codes, sums, recorded
        # values), hours read from the recording, hours computed in the engine.
        self.values_fetched = 0
        self.hours_read = 0
        self.hours_computed = 0
        self.halves_read = 0
        self.halves_recorded = 0
        # The upkeep loop's refresh slows down while no question comes (`upkeep_refresh`).
        self.quiet_after_s = QUIET_AFTER_S
        self.quiet_refresh_ms = QUIET_REFRESH_MS
        self._asked_at_s = -math.inf
        # Each unit's latest memory_used as of `_memory_key` (done ms, fresh ms): fetched
        # when the idle list asks, then with each refresh while it keeps asking.
        self._memory: dict[UnitKey, float] = {}
        self._memory_key: tuple[int, int] | None = None
        self._memory_asked: tuple[float, int] | None = None  # (monotonic s, fresh ms)

    # -- the cache ------------------------------------------------------------------------

    def refresh(self) -> int:
        """Fold the minutes rolled up since the last refresh; returns that bound (ms). A
        question's call: it counts as asking (`upkeep_refresh`)."""
        self._asked_at_s = time.monotonic()
        return self._refresh()

    def upkeep_refresh(self) -> int | None:
        """The upkeep loop's refresh, each minute: while questions come (one in the last
        `quiet_after_s`) every minute is folded as it is rolled up, so a question finds
        nothing new to fetch; in a quiet spell only once the cache is `quiet_refresh_ms`
        behind. The engine's cost of a refresh follows the number of series, not the
        minutes (~7 VictoriaMetrics CPU-s at 100,000 GPUs), so a quiet fleet pays it
        once every quiet_refresh_ms, and the first question after a spell pays one
        refresh. None: skipped."""
        quiet = time.monotonic() - self._asked_at_s > self.quiet_after_s
        behind_ms = self._rolled_up() // MINUTE_MS * MINUTE_MS - self.filled_ms
        if quiet and behind_ms < self.quiet_refresh_ms:
            return None
        return self._refresh()

    def _refresh(self) -> int:
        with self._refresh_lock:
            done_ms = self._rolled_up() // MINUTE_MS * MINUTE_MS
            oldest_ms = (done_ms // HOUR_MS - self.cache_hours) * HOUR_MS
            lo_ms = max(self.filled_ms, oldest_ms)
            with self._lock:
                self._hours = {h: m for h, m in self._hours.items() if h >= oldest_ms}
                self._cached_from_ms = oldest_ms if lo_ms == oldest_ms else \
                    max(self._cached_from_ms, oldest_ms)
            asked = self._memory_asked
            keep_memory = asked is not None and lo_ms < done_ms \
                and time.monotonic() - asked[0] <= self.quiet_after_s
            with ThreadPoolExecutor(1, thread_name_prefix="masks-memory") as aside:
                memory = aside.submit(self._fetch_memory, done_ms, asked[1]) \
                    if keep_memory else None
                for hour_ms, _, part_hi, hour in self._hours_between(lo_ms, done_ms):
                    with self._lock:
                        self._hours.setdefault(hour_ms, HourMasks(0)).merge(hour)
                        self.filled_ms = part_hi
                with self._lock:
                    self.filled_ms = max(self.filled_ms, done_ms)
                if memory is not None:
                    memory.result()
            return done_ms

    # -- each unit's memory, beside the masks ---------------------------------------------

    def unit_memory(self, units: Iterable[UnitKey], fresh_ms: int) -> dict[UnitKey, float]:
        """See masks.UnitMemory: as of the last refresh (`filled_ms`), the judged minutes'
        end. Asked of the engine once per refresh, for the whole fleet (no selector holds
        the idle list's ~20,000 candidates at 100,000 GPUs): while the idle list keeps
        asking (within `quiet_after_s`), each refresh fetches it beside the minute's masks,
        so a warm idle list asks the engine nothing."""
        self._memory_asked = (time.monotonic(), fresh_ms)
        with self._lock:
            done_ms = self.filled_ms
            held = self._memory if self._memory_key == (done_ms, fresh_ms) else None
        if held is None:
            held = self._fetch_memory(done_ms, fresh_ms)
        return {unit: held[unit] for unit in units if unit in held}

    def _fetch_memory(self, done_ms: int, fresh_ms: int) -> dict[UnitKey, float]:
        """Each unit's newest memory_used in (done − fresh, done + LATEST_AHEAD_MS]."""
        values = self._engine.newest_of_units(MEMORY_USED, done_ms + LATEST_AHEAD_MS,
                                              fresh_ms + LATEST_AHEAD_MS)
        with self._lock:
            if self._memory_key is None or done_ms >= self._memory_key[0]:
                self._memory, self._memory_key = values, (done_ms, fresh_ms)
        return values

    def _hours_between(self, lo_ms: int, hi_ms: int
                       ) -> Iterable[tuple[int, int, int, HourMasks]]:
        """The masks of [lo, hi) hour by hour: (hour, part's lo, part's hi, masks) — whole
        closed hours from the recording where recorded, the rest computed in the engine.
        The parts no recording can hold (an hour's part: the open hour) are computed in
        another thread while the recorded hours are read: the engine answers their queries
        while the export is parsed here."""
        first_whole = -(-lo_ms // HOUR_MS) * HOUR_MS
        last_whole = hi_ms // HOUR_MS * HOUR_MS
        parts = []
        part_lo = lo_ms
        while part_lo < hi_ms:
            hour_ms = part_lo // HOUR_MS * HOUR_MS
            parts.append((hour_ms, part_lo, min(hour_ms + HOUR_MS, hi_ms)))
            part_lo = parts[-1][2]
        with ThreadPoolExecutor(1, thread_name_prefix="masks-part") as aside:
            # An hour's part from its start past its first half (a cold start's open
            # hour): its second half computed aside, its first read from its recording.
            halved = {part for part in parts
                      if part[1] == part[0] and part[0] + HALF_MS < part[2] < part[0] + HOUR_MS}
            partial = {part: aside.submit(self._compute, part[0] + HALF_MS, part[2])
                       if part in halved else aside.submit(self._compute, part[1], part[2])
                       for part in parts if part[1:] != (part[0], part[0] + HOUR_MS)}
            recorded = self._read_recorded(first_whole, last_whole) \
                if last_whole > first_whole else {}
            first_halves = {part: self._read_half(part[0]) for part in halved}
            for part in parts:
                hour = partial[part].result() if part in partial else recorded.get(part[0])
                if part in halved:
                    first = first_halves[part]
                    if first is None:  # not recorded: computed (an empty one is recorded)
                        first = self._compute(part[0], part[0] + HALF_MS)
                    first.merge(hour)
                    hour = first
                yield (*part, self._compute(part[1], part[2]) if hour is None else hour)

    def _compute(self, lo_ms: int, hi_ms: int) -> HourMasks:
        """The masks of the minutes [lo, hi) of one hour, computed in the engine: the
        queries of the hour's halves asked by another thread (QUERIES_AT_ONCE in flight),
        each half folded once its answers are in."""
        hour = HourMasks(0)
        with ThreadPoolExecutor(QUERIES_AT_ONCE, thread_name_prefix="masks-query") as pool:
            asked = [(half_lo, {part: pool.submit(self._engine.instant, query, half_hi)
                                for part, query in
                                half_queries(half_lo, half_hi, self.thresholds).items()})
                     for half_lo, half_hi in halves(lo_ms, hi_ms)]
            for half_lo, futures in asked:
                answers = {part: future.result() for part, future in futures.items()}
                with self._lock:
                    # Every known GPU first reported before: its unit ids stand as they are.
                    settled = self._units if half_lo >= self._first_ms_bound else None
                    folded = fold_answer(answers, half_lo, self._unit_id,
                                         lambda: len(self._gpu_of_unit), settled)
                    self.values_fetched += sum(map(len, answers.values()))
                hour.merge(folded)
        if hi_ms - lo_ms == HOUR_MS:
            self.hours_computed += 1
        return hour

    def _read_recorded(self, lo_ms: int, hi_ms: int) -> dict[int, HourMasks]:
        """The hours of [lo, hi) recorded whole in the engine."""
        lines = self._engine.export_lines(export_selector(self.thresholds), lo_ms, hi_ms - 1)
        with self._lock:
            hours = read_export(self._counted(lines), self._unit_id,
                                lambda: len(self._gpu_of_unit))
        self.hours_read += len(hours)
        return {h: m for h, m in hours.items() if lo_ms <= h < hi_ms}

    def _read_half(self, hour_ms: int) -> HourMasks | None:
        """The first half (minutes 0–29) of the hour at `hour_ms`, where recorded whole."""
        lines = self._engine.export_lines(export_selector(self.thresholds, HALF_SELECTOR_NAME),
                                          hour_ms, hour_ms + HALF_MS - 1)
        with self._lock:
            halves_found = read_export(self._counted(lines), self._unit_id,
                                       lambda: len(self._gpu_of_unit), half=True)
        half = halves_found.get(hour_ms)
        self.halves_read += half is not None
        return half

    def _counted(self, lines: Iterable[bytes]) -> Iterable[bytes]:
        for line in lines:
            self.values_fetched += line.count(b",") // 2 if line else 0  # ~ values + stamps
            yield line

    def record_closed_hours(self) -> int:
        """Record every closed hour of the cache's window not recorded yet (the leader's
        part: the upkeep loop calls it under the `telemetry-masks` lock), and the open
        hour's first half once closed; returns the hours recorded (`halves_recorded`
        counts the halves). Hours this cache holds whole are recorded from it; others are
        computed in the engine first."""
        done_ms = self._rolled_up() // MINUTE_MS * MINUTE_MS
        last_whole = done_ms // HOUR_MS * HOUR_MS
        last_half = done_ms // HALF_MS * HALF_MS
        first = max((done_ms // HOUR_MS - self.cache_hours) * HOUR_MS, 0)
        if last_half <= max(first, self._recorded_until_ms):
            return 0  # checked (and recorded) since the last half closed: no refresh
        self._refresh()  # not a question: the upkeep's quiet spells stay quiet
        written = 0
        if last_whole > max(first, self._recorded_until_ms):
            marker = export_selector(self.thresholds, MARKER_NAME)
            recorded = set()
            for line in self._engine.export_lines(marker, first, last_whole - 1):
                if line:
                    recorded.update(orjson.loads(line)["timestamps"])
            for hour_ms in range(first, last_whole, HOUR_MS):
                if hour_ms in recorded:
                    continue
                with self._lock:
                    hour = self._hours.get(hour_ms) if hour_ms >= self._cached_from_ms \
                        else None
                if hour is None:
                    hour = self._compute(hour_ms, hour_ms + HOUR_MS)
                with self._lock:
                    body, units = recorded_lines(hour_ms, hour, self._unit_labels,
                                                 self.thresholds)
                self._engine.import_lines(body)  # the masks first, then the marker
                self._engine.import_lines(marker_line(hour_ms, units, self.thresholds))
                written += 1
        if last_half > last_whole:
            self._record_half(last_whole)
        self._recorded_until_ms = last_half
        return written

    def _record_half(self, hour_ms: int) -> None:
        """Record the closed first half of the open hour at `hour_ms`, unless recorded."""
        marker = export_selector(self.thresholds, HALF_MARKER_NAME)
        for line in self._engine.export_lines(marker, hour_ms, hour_ms):
            if line and hour_ms in orjson.loads(line)["timestamps"]:
                return
        with self._lock:
            hour = self._hours.get(hour_ms) if hour_ms >= self._cached_from_ms else None
            held = hour is not None and not np.isnan(hour.sm_sum_lo).any()
        if not held:
            hour = self._compute(hour_ms, hour_ms + HALF_MS)
        with self._lock:
            body, units = recorded_lines(hour_ms, hour, self._unit_labels, self.thresholds,
                                         half=True)
        self._engine.import_lines(body)  # the masks first, then the marker that vouches
        self._engine.import_lines(marker_line(hour_ms, units, self.thresholds,
                                              HALF_MARKER_NAME))
        self.halves_recorded += 1

    def _unit_id(self, labels: Mapping[str, str], at_ms: int) -> int:
        unit = (labels["gpu_uuid"], labels.get("mig_uuid") or None)
        uid = self._units.get(unit)
        attrs = None
        if uid is None:
            gid = self._gpus.get(unit[0])
            attrs = {name: labels.get(name, "") for name in ("node", "environment", "model")}
            if gid is None:
                gid = self._gpus[unit[0]] = len(self._gpu_attrs)
                self._gpu_attrs.append(attrs)
                self._gpu_first_ms.append(at_ms)
            uid = self._units[unit] = len(self._gpu_of_unit)
            self._gpu_of_unit.append(gid)
            self._unit_labels.append(_unit_label_set(labels))
            self._unit_first_ms.append(at_ms)
            self._first_ms_bound = max(self._first_ms_bound, at_ms)  # no unit first later
        elif at_ms < self._unit_first_ms[uid]:
            self._unit_first_ms[uid] = at_ms
            self._unit_labels[uid] = _unit_label_set(labels)
        gid = self._gpu_of_unit[uid]
        if at_ms < self._gpu_first_ms[gid]:  # a GPU counts towards where it first reported
            self._gpu_first_ms[gid] = at_ms
            self._gpu_attrs[gid] = attrs or {name: labels.get(name, "")
                                             for name in ("node", "environment", "model")}
        return uid

    def _hours_of(self, lo_ms: int, hi_ms: int) -> Callable[[int], HourMasks | None]:
        """The masks of each hour of [lo, hi): cached, or read / computed now (hours the
        cache does not keep)."""
        older: dict[int, HourMasks] = {}
        below = min(hi_ms, self._cached_from_ms)
        if lo_ms < below:
            for hour_ms, _, _, hour in self._hours_between(lo_ms // HOUR_MS * HOUR_MS, below):
                older.setdefault(hour_ms, HourMasks(0)).merge(hour)
        return lambda hour_ms: older.get(hour_ms) if hour_ms < self._cached_from_ms \
            else self._hours.get(hour_ms)

    def _clipped(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int) -> tuple[np.ndarray, ...]:
        """The spans as arrays (unit id, lo, hi, group, weight), clipped to [lo, hi), without
        those empty after clipping or of units the cache never saw. Call holding the lock."""
        spans = SpanColumns.of(spans)
        uid = np.array([self._units.get(u, -1) for u in spans.units], np.int64)
        lo = np.maximum(np.array(spans.lo_ms, np.int64), lo_ms)
        hi = np.minimum(np.array(spans.hi_ms, np.int64), hi_ms)
        keep = (uid >= 0) & (lo < hi)
        return (uid[keep], lo[keep], hi[keep], np.array(spans.groups, np.int64)[keep],
                np.array(spans.weights, np.float64)[keep])

    # -- questions ------------------------------------------------------------------------

    def tallies(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int, done_ms: int,
                *, last_active: bool = False) -> Mapping[int, Tally]:
        """See masks.MinuteMasks. Counted with numpy, hour by hour over all the spans."""
        hi_ms = min(hi_ms, done_ms)
        if not len(spans) or lo_ms >= hi_ms:
            return TallyRows(())
        hour_of = self._hours_of(lo_ms, hi_ms)
        with self._lock:
            uid, lo, hi, groups, weight = self._clipped(spans, lo_ms, hi_ms)
            if not len(uid):
                return TallyRows(())
            group_ids, group = np.unique(groups, return_inverse=True)
            n = len(group_ids)
            sums = np.zeros((4, n))
            last = np.full(n, -1, np.int64)
            for hour_ms, hour, at, rm in _hours_of_spans(hour_of, uid, lo, hi):
                u, g, w = uid[at], group[at], weight[at]
                active = rm & hour.act_hot[u]
                sums[0] += np.bincount(g, w * np.bitwise_count(active), n)
                sums[1] += np.bincount(g, w * np.bitwise_count(active & hour.sm_hot[u]), n)
                sums[2] += np.bincount(g, w * np.bitwise_count(rm & hour.act_known[u]), n)
                sm_known = hour.sm_known[u]
                of_hour = np.bitwise_count(sm_known).astype(np.float64)
                share = np.divide(np.bitwise_count(rm & sm_known), of_hour,
                                  out=np.zeros(len(u)), where=of_hour > 0)
                sums[3] += np.bincount(g, w * hour.sm_sum[u] * share, n)
                if last_active:
                    busy = active != 0
                    ends = hour_ms + (_bit_length(active[busy]) - 1) * MINUTE_MS
                    np.maximum.at(last, g[busy], ends)
        return TallyRows([(int(group_ids[i]), float(sums[0][i]), float(sums[1][i]),
                           float(sums[2][i]), float(sums[3][i]),
                           int(last[i]) if last_active and last[i] >= 0 else None)
                          for i in range(n)])

    def active_known(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int,
                     done_ms: int) -> dict[int, tuple[float, float]]:
        """See masks.MinuteMasks. `tallies` less the sm_active masks and sums."""
        hi_ms = min(hi_ms, done_ms)
        if not len(spans) or lo_ms >= hi_ms:
            return {}
        hour_of = self._hours_of(lo_ms, hi_ms)
        with self._lock:
            uid, lo, hi, groups, weight = self._clipped(spans, lo_ms, hi_ms)
            if not len(uid):
                return {}
            group_ids, group = np.unique(groups, return_inverse=True)
            n = len(group_ids)
            sums = np.zeros((2, n))
            for _, hour, at, rm in _hours_of_spans(hour_of, uid, lo, hi):
                u, g, w = uid[at], group[at], weight[at]
                sums[0] += np.bincount(g, w * np.bitwise_count(rm & hour.act_hot[u]), n)
                sums[1] += np.bincount(g, w * np.bitwise_count(rm & hour.act_known[u]), n)
        return {int(group_ids[i]): (float(sums[0][i]), float(sums[1][i])) for i in range(n)}

    def last_active_minutes(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int,
                            done_ms: int) -> dict[int, int]:
        """See masks.MinuteMasks. Hour by hour from the newest, with numpy over the spans
        of groups not answered yet: a group's last active minute lies in the newest hour
        where it has one, so its spans drop out there."""
        hi_ms = min(hi_ms, done_ms)
        if not len(spans) or lo_ms >= hi_ms:
            return {}
        hour_of = self._hours_of(lo_ms, hi_ms)
        found: dict[int, int] = {}
        with self._lock:
            uid, lo, hi, group, _ = self._clipped(spans, lo_ms, hi_ms)
            if not len(uid):
                return {}
            first_hour_ms = int(lo.min()) // HOUR_MS * HOUR_MS
            for hour_ms in range(int(hi.max() - 1) // HOUR_MS * HOUR_MS, first_hour_ms - 1,
                                 -HOUR_MS):
                hour = hour_of(hour_ms)
                if hour is None:
                    continue
                at = _spans_in(hour_ms, hour, uid, lo, hi)
                if not len(at):
                    continue
                active = _range_masks(hour_ms, lo[at], hi[at]) & hour.act_hot[uid[at]]
                busy = active != 0
                if not busy.any():
                    continue
                ends = hour_ms + (_bit_length(active[busy]) - 1) * MINUTE_MS
                answered = group[at][busy]
                for g, end in zip(answered.tolist(), ends.tolist(), strict=True):
                    if end > found.get(g, -1):
                        found[g] = end
                keep = ~np.isin(group, answered)
                uid, lo, hi, group = uid[keep], lo[keep], hi[keep], group[keep]
                if not len(uid):
                    break
        return found

    def reporting_minutes(self, by: Sequence[str], lo_ms: int, hi_ms: int,
                          done_ms: int) -> dict[tuple, int]:
        """See masks.MinuteMasks."""
        hi_ms = min(hi_ms, done_ms)
        if lo_ms >= hi_ms:
            return {}
        hour_of = self._hours_of(lo_ms, hi_ms)
        columns = [c for c in by if c in ("environment", "model", "node")]
        with self._lock:
            key_index: dict[tuple, int] = {}
            key_of_gpu = np.array([key_index.setdefault(tuple(attrs[c] for c in columns),
                                                        len(key_index))
                                   for attrs in self._gpu_attrs], np.int64)
            gpu_of_unit = np.array(self._gpu_of_unit, np.int64)
            totals = np.zeros(len(key_index), np.int64)
            for hour_ms in range(lo_ms // HOUR_MS * HOUR_MS, hi_ms, HOUR_MS):
                hour = hour_of(hour_ms)
                if hour is None or not len(hour):
                    continue
                reported = np.zeros(len(key_of_gpu), _U64)
                np.bitwise_or.at(reported, gpu_of_unit[:len(hour)],
                                 hour.act_known | hour.sm_known)
                rm = _range_masks(hour_ms, np.array([lo_ms]), np.array([hi_ms]))[0]
                totals += np.bincount(key_of_gpu, np.bitwise_count(reported & rm),
                                      len(key_index)).astype(np.int64)
        keys = list(key_index)
        return {keys[i]: int(totals[i]) for i in np.flatnonzero(totals)}


def _unit_label_set(labels: Mapping[str, str]) -> dict[str, str]:
    return {name: labels[name] for name in ("gpu_uuid", "mig_uuid", "node", "environment",
                                            "model") if labels.get(name)}


def _range_masks(hour_ms: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per span: the bits of the minutes of the hour whose start lies in [lo, hi)."""
    def minute(edge: np.ndarray) -> np.ndarray:
        return np.clip(-(-(edge - hour_ms) // MINUTE_MS), 0, 60).astype(_U64)
    one = _U64(1)
    return ((one << minute(hi)) - one) ^ ((one << minute(lo)) - one)


def _hours_of_spans(hour_of: Callable, uid: np.ndarray, lo: np.ndarray, hi: np.ndarray
                    ) -> Iterator[tuple[int, HourMasks, np.ndarray, np.ndarray]]:
    """Each hour the clipped spans touch, oldest first, that the cache holds and some span
    lies in: (hour_ms, the hour's masks, the indices of its spans, their minutes in it as
    masks) — the walk `tallies` and `active_known` share."""
    for hour_ms in range(int(lo.min()) // HOUR_MS * HOUR_MS, int(hi.max()), HOUR_MS):
        hour = hour_of(hour_ms)
        if hour is None:
            continue
        at = _spans_in(hour_ms, hour, uid, lo, hi)
        if len(at):
            yield hour_ms, hour, at, _range_masks(hour_ms, lo[at], hi[at])


def _spans_in(hour_ms: int, hour: HourMasks, uid: np.ndarray, lo: np.ndarray,
              hi: np.ndarray) -> np.ndarray:
    """The indexes of the spans that overlap the hour starting at `hour_ms`, of units it
    holds."""
    return np.flatnonzero((lo < hour_ms + HOUR_MS) & (hi > hour_ms) & (uid < len(hour)))


def _bit_length(masks: np.ndarray) -> np.ndarray:
    """The bit length of each (non-zero, < 2^60) mask, exactly: frexp of each 30-bit half
    (exact in a float64)."""
    high = (masks >> _U64(30)).astype(np.float64)
    low = (masks & _U64((1 << 30) - 1)).astype(np.float64)
    return np.where(high > 0, 30 + np.frexp(high)[1], np.frexp(low)[1]).astype(np.int64)


__all__ = ["DEFAULT_CACHE_HOURS", "Fetch", "MaskEngine", "PrometheusMinuteMasks",
           "series_minutes", "threshold_labels"]


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
