"""Questions asked of the fleet's telemetry (docs/design.md, "Funnel and activity" and "Telemetry
model"): range queries, the latest snapshot per GPU, the fleet funnel, idle / idle-held / zombie /
unattributed lists, and the fleet view behind `gpufleet top`.

Ownership comes from the state store's binding intervals, read once per call in one read
transaction and joined at query time (`telemetry_ownership`). Members see only their own
projects' allocations. The funnel and idleness are counted from per-unit minute masks
(the store's `minute_masks`, tsdb/masks.py); range queries are the store's `query_range`.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from operator import attrgetter

from gpufleet.clock import Clock
from gpufleet.domain.access import Action
from gpufleet.domain.errors import InvalidInput, Unavailable
from gpufleet.domain.telemetry.catalogue import COUNTED_FROM_READER_START
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.durations import check_time, parse_duration
from gpufleet.domain.telemetry.funnel import (
    IDLE_MIN_KNOWN_SHARE,
    MINUTES_PER_HOUR,
    Funnel,
    Thresholds,
)
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, Scope
from gpufleet.services.access.principal import SYSTEM, Principal
from gpufleet.services.paging import decode_cursor, mismatched_cursor, split_page
from gpufleet.services.telemetry import live
from gpufleet.services.telemetry.first_values import count_first_values, series_names
from gpufleet.services.telemetry.ownership import (
    INVENTORY_LABELS,
    Slot,
    SlotCache,
    inventory_gpu_seconds,
    mig_profiles,
    read_slots,
    telemetry_bindings,
)
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import SeriesResult, TelemetryStore
from gpufleet.tsdb.masks import (
    MaskStore,
    MinuteMasks,
    SpanColumns,
    UnitMemory,
    steps_fit_hours,
)
from gpufleet.tsdb.protocol import (
    MINUTE_MS,
    OWNER_LABELS,
    UNIT_LABELS,
    Bindings,
    from_ms,
    to_ms,
)
from gpufleet.tsdb.rollups import combine_across
from gpufleet.wire import telemetry_queries as wt

MAX_POINTS_PER_SERIES = 11_000  # Prometheus' own cap on a range query's resolution
DEFAULT_POINTS = 240
MAX_WINDOW = timedelta(days=30)  # the 1-minute tier's default retention
PROCESS_LABELS = ("pid", "process_name", "container", "pod", "namespace", "slurm_job",
                  "claimed_allocation")
FUNNEL_LABELS = (*INVENTORY_LABELS, "project", "allocation")
IDLE_LOOKBACK = timedelta(hours=24)  # how far back "idle since" looks for the last activity
METRICS_CACHE_S = 60.0  # /metrics funnel gauges: recomputed at most once a minute
# Dashboard funnels (`recent_funnel`): an answer is reused while its window ended at most
# this long ago; the upkeep loop recomputes the fleet-wide ones each round (every 60 s by
# default), so they stay warm. Longer than a round, so a page never waits on a miss
# between two rounds.
RECENT_FUNNEL_S = 90.0
RECENT_FUNNELS_KEPT = 256
# The upkeep round warms the dashboard's funnels only while someone uses the dashboard: a
# page asked for a recent funnel within this long (or the server just started). At
# 100,000 GPUs a round's warming costs ~4 s of CPU (BENCHMARKS.md, "Dashboard pages").
WARM_WHILE_USED_S = 15 * 60.0
# The questions the dashboard asks of the whole fleet at its default window (the Fleet
# page: its funnel, trend and matrix; the Environments and Projects lists), warmed by the
# upkeep loop. tests/web/test_recent_funnel.py checks the pages ask exactly these.
# Each with the trend (30m: the pages' step for 24h), as the Fleet, Environment and Project
# pages ask; the lists' and the Environment and Project pages' questions without it are
# answered from these (`recent_funnel`).
WARM_FUNNELS = ((("environment", "project"), "24h", "30m"), (("environment",), "24h", "30m"),
                (("project",), "24h", "30m"))


def thresholds_of(settings: Settings) -> Thresholds:
    return Thresholds(settings.activity_threshold_percent,
                      settings.effective_sm_active_percent,
                      round(settings.idle_window_hours * MINUTES_PER_HOUR),
                      settings.idle_held_memory_bytes)


class TelemetryQueries:
    def __init__(self, state: StateStore, telemetry: Callable[[], TelemetryStore],
                 settings: Settings, clock: Clock):
        self.state = state
        self._telemetry = telemetry
        self.settings = settings
        self.clock = clock
        self.thresholds = thresholds_of(settings)
        self._masks: tuple[TelemetryStore, MinuteMasks] | None = None
        self._masks_lock = threading.Lock()
        self._slot_cache = SlotCache(MAX_WINDOW + IDLE_LOOKBACK, clock)
        self._last_bindings: tuple[list[Slot], Bindings] | None = None  # `_bindings_of`
        self._gauges: dict[frozenset[str] | None, tuple[float, wt.FunnelView]] = {}
        self._recent: dict[tuple, wt.FunnelView] = {}  # recent_funnel's answers, by question
        self._recent_lock = threading.Lock()
        self._recent_idle: dict[frozenset[str] | None, IdleVerdicts] = {}  # by scope
        self._recent_asked = time.monotonic()  # a page's last recent_funnel (start: now)

    @property
    def telemetry(self) -> TelemetryStore:
        return self._telemetry()

    @property
    def slot_cache(self) -> SlotCache:
        """The recent bindings `read_slots` may answer from."""
        return self._slot_cache

    def mask_store(self) -> MaskStore:
        """The telemetry store, where it answers the funnel's questions in aggregate (both
        stores do: tsdb/masks.py); else 503 `telemetry_query_unsupported`."""
        store = self.telemetry
        if not isinstance(store, MaskStore):
            raise Unavailable("the funnel, idle and zombie lists need a telemetry store with "
                              "minute masks; this one does not offer them",
                              code="telemetry_query_unsupported")
        return store

    @property
    def masks(self) -> MinuteMasks:
        """The store's minute masks, kept while the store is (their cache lives in them)."""
        store = self.mask_store()
        with self._masks_lock:
            if self._masks is None or self._masks[0] is not store:
                self._masks = (store, store.minute_masks(self.thresholds))
            return self._masks[1]

    # --- range queries -------------------------------------------------------------------

    def range_query(self, principal: Principal, metric: str, *, start: datetime | None = None,
                    end: datetime | None = None, since: str | None = None,
                    step: str | None = None, filters: dict[str, list[str]] | None = None,
                    group_by: list[str] | None = None) -> wt.RangeQueryResult:
        """The metric per step over [start, end) (or the last `since`), aggregated by its class
        (docs/design.md, "Telemetry model") per group of labels. Owner labels (project, allocation)
        come from the binding intervals; a member's query counts only their projects' time.
        A counter its reader starts at zero (XIDs) counts a series first seen in the window
        from 0: its first value in the step of its first sample (first_values.py)."""
        principal.require(Action.READ_INVENTORY)
        row = catalogue_metric(metric)
        start, end = self._window(start, end, since)
        step_span = self._step(start, end, step)
        by, filters = list(group_by or []), {k: list(v) for k, v in (filters or {}).items()}
        allowed = self._labels_of(row)
        for name in [*by, *filters]:
            if name not in allowed:
                raise InvalidInput(f"cannot group or filter {metric} by '{name}'; choose from: "
                                   f"{', '.join(allowed)}", code="unknown_label",
                                   details={"label": name, "allowed": list(allowed)})
        with self.state.read() as session:
            profiles = mig_profiles(session) if "mig_profile" in [*by, *filters] else {}
            owners = principal.visible_projects is not None or \
                any(k in OWNER_LABELS for k in [*by, *filters])
            # One GPU's question (the dashboard's GPU page) reads that GPU's bindings by
            # index instead of walking every cached slot of the fleet.
            gpus = filters.get("gpu_uuid")
            slots = read_slots(session, principal, start, end,
                               gpu_uuids=gpus if gpus and None not in gpus else None,
                               cache=self.slot_cache) if owners else None
        if "mig_profile" in filters:
            wanted = set(filters.pop("mig_profile"))
            filters["mig_uuid"] = [u for u, p in profiles.items() if p in wanted]
        store_by = [n for n in by if n != "mig_profile"]
        if "mig_profile" in by:
            store_by += [n for n in ("gpu_uuid", "mig_uuid") if n not in store_by]
            filters.setdefault("mig_uuid", list(profiles))
        bindings = self._bindings_of(slots) if slots is not None else None
        new_counts = metric in COUNTED_FROM_READER_START  # per series, then first values
        results = self.telemetry.query_range(
            metric, start, end, step_span, filters=filters or None, bindings=bindings,
            group_by=store_by if not new_counts else
            [*store_by, *(n for n in series_names(metric) if n not in store_by)])
        if new_counts:
            results = count_first_values(self.telemetry, metric, results, start, end,
                                         step_span, by=store_by, filters=filters or None,
                                         bindings=bindings)
        if "mig_profile" in by:
            results = _regroup(results, by, profiles, row.aggregation.across_series)
        return wt.RangeQueryResult(
            metric=metric, unit=row.unit.value, start=start, end=end,
            step_s=step_span.total_seconds(), by=by,
            series=[wt.QuerySeries(labels={k: r.labels.get(k) for k in by}, points=r.points)
                    for r in results])

    def _bindings_of(self, slots: list[Slot]) -> Bindings:
        """`telemetry_bindings` of the slots, the same object as the last range query's
        while its slots are the same ones (compared item by item: the slot cache hands the
        same `Slot` objects until the binding table changes). The DuckDB store reuses its
        last selection for the same bindings object (`_slots_of`), so a repeated question
        walks neither the slots into bindings nor the series into slots again."""
        last = self._last_bindings
        if last is not None and last[0] == slots:
            return last[1]
        bindings = telemetry_bindings(slots)
        self._last_bindings = (slots, bindings)
        return bindings

    def _labels_of(self, row) -> tuple[str, ...]:
        extra = PROCESS_LABELS if Scope.PROCESS in row.scopes else ()
        return (*UNIT_LABELS, "mig_profile", *OWNER_LABELS, *row.labels, *extra)

    def _window(self, start: datetime | None, end: datetime | None,
                since: str | None) -> tuple[datetime, datetime]:
        end = self.clock.now() if end is None else check_time(end, name="end")
        if start is None:
            start = end - parse_duration(since or "1h", name="since")
        check_time(start, name="start")
        if end <= start:
            raise InvalidInput("start must be before end", code="invalid_range",
                               details={"start": start.isoformat(), "end": end.isoformat()})
        if end - start > MAX_WINDOW:
            raise InvalidInput(f"a window may span at most {MAX_WINDOW.days} days",
                               code="window_too_long")
        return start, end

    def _step(self, start: datetime, end: datetime, step: str | None) -> timedelta:
        window = end - start
        if step is None:
            seconds = max(60.0, window.total_seconds() / DEFAULT_POINTS)
            return timedelta(seconds=(seconds + 59) // 60 * 60)
        span = parse_duration(step, name="step")
        points = window / span
        if points > MAX_POINTS_PER_SERIES:
            raise InvalidInput(
                f"step {step} gives {int(points)} points per series over this window; at most "
                f"{MAX_POINTS_PER_SERIES} — use a step of at least "
                f"{int(window.total_seconds() // MAX_POINTS_PER_SERIES) + 1}s",
                code="step_too_small", details={"step": step, "points": int(points)})
        return span

    # --- the funnel ----------------------------------------------------------------------

    def funnel(self, principal: Principal, group_by: list[str] | None = None,
               window_end: datetime | None = None, window: str | None = None,
               step: str | None = None, *, project: str | None = None,
               environment: str | None = None) -> wt.FunnelView:
        """Total / allocated / active / effective GPU-hours over the window, per group;
        with `step`, each row's trend in steps of that length and its allocations' usage.
        `project`, `environment`: only the allocations of that project, on units in that
        environment — the total and reporting hours (the inventory's) are then left out,
        as they are for a member."""
        principal.require(Action.READ_INVENTORY)
        by = tuple(group_by or ())
        for name in by:
            if name not in FUNNEL_LABELS:
                raise InvalidInput(f"the funnel cannot be grouped by '{name}'; choose from: "
                                   f"{', '.join(FUNNEL_LABELS)}", code="unknown_label",
                                   details={"label": name, "allowed": list(FUNNEL_LABELS)})
        masks = self.masks  # a store without them: 503 before any work
        start, end = self._funnel_window(window_end, window)
        step_span = None if step is None else trend_step(start, end, step)
        scoped = principal.visible_projects is not None or bool(project or environment)
        with self.state.read() as session:
            slots = read_slots(session, principal, start, end, cache=self.slot_cache,
                               projects=[project] if project else None)
            if environment:
                slots = [s for s in slots if s.environment == environment]
            inventory = None if scoped or not set(by) <= set(INVENTORY_LABELS) else \
                inventory_gpu_seconds(session, by, start, end)
            fleet_total = None if scoped else inventory_gpu_seconds(session, (), start, end)
        done = masks.refresh()  # one bound for every count of this question
        rows = self._funnel_rows(masks, done, slots, by, start, end, inventory)
        fleet = Funnel(total_gpu_hours=None if fleet_total is None else
                       fleet_total.get((), 0.0) / 3600)
        for funnel in rows.values():
            fleet = fleet.merge(Funnel(None, None, funnel.allocated_gpu_hours,
                                       funnel.active_gpu_hours, funnel.effective_gpu_hours,
                                       funnel.unknown_gpu_hours, funnel.sm_active_gpu_hours))
        if fleet_total is not None:
            reported = masks.reporting_minutes((), to_ms(start), to_ms(end), done).get((), 0)
            fleet.reporting_gpu_hours = reported / MINUTES_PER_HOUR
        usage = {} if step_span is None else \
            _trends(masks, done, slots, by, start, end, step_span)
        return wt.FunnelView(
            window_start=start, window_end=end, by=list(by),
            activity_threshold_percent=self.thresholds.activity_percent,
            effective_sm_active_percent=self.thresholds.effective_sm_active_percent,
            rows=[_funnel_row(dict(zip(by, key, strict=True)), f, usage.get(key, _NO_USAGE))
                  for key, f in sorted(rows.items(), key=lambda kv: [str(v) for v in kv[0]])],
            fleet=_funnel_row({}, fleet, usage.get(None, _NO_USAGE)),
            step_s=None if step_span is None else step_span.total_seconds())

    def recent_funnel(self, principal: Principal, group_by: list[str] | None = None,
                      window: str | None = None, step: str | None = None, *,
                      project: str | None = None, environment: str | None = None,
                      fresh: bool = False) -> wt.FunnelView:
        """`funnel` over the window ending now, or an answer to the same question for the
        same scope (the principal's visible projects) whose window ended at most
        RECENT_FUNNEL_S ago: its `window_end` says as of when. For the dashboard's pages;
        the API's /telemetry/funnel always counts afresh. `fresh`: count afresh and keep
        the answer (the upkeep loop's warming)."""
        principal.require(Action.READ_INVENTORY)
        key = (principal.visible_projects, tuple(group_by or ()), window or "24h", step,
               project, environment)
        now = self.clock.now()
        if not fresh:
            self._recent_asked = time.monotonic()
            with self._recent_lock:
                kept = self._recent.get(key)
                if kept is None and step is None:  # the same question asked with a trend
                    kept = next((_without_trend(v) for k, v in self._recent.items()
                                 if k[3] is not None and k[:3] + k[4:] == key[:3] + key[4:]
                                 and (now - v.window_end).total_seconds() <= RECENT_FUNNEL_S),
                                None)
            if kept is not None and \
                    (now - kept.window_end).total_seconds() <= RECENT_FUNNEL_S:
                return kept
        view = self.funnel(principal, group_by, None, window, step, project=project,
                           environment=environment)
        with self._recent_lock:
            self._recent = {k: v for k, v in self._recent.items()
                            if (now - v.window_end).total_seconds() <= RECENT_FUNNEL_S}
            if len(self._recent) >= RECENT_FUNNELS_KEPT:
                self._recent.pop(next(iter(self._recent)))
            self._recent[key] = view
        return view

    def warm_recent_funnels(self) -> None:
        """Count the dashboard's fleet-wide funnels afresh (WARM_FUNNELS, as the admin sees
        them), so the Fleet, Environments and Projects pages find them in `recent_funnel`:
        the upkeep loop's work, once a round — while a page asked for one in the last
        WARM_WHILE_USED_S (else nobody is looking: the next page counts afresh)."""
        if time.monotonic() - self._recent_asked > WARM_WHILE_USED_S:
            return
        for by, window, step in WARM_FUNNELS:
            self.recent_funnel(SYSTEM, list(by), window, step, fresh=True)

    def _funnel_window(self, window_end: datetime | None,
                       window: str | None) -> tuple[datetime, datetime]:
        """[end − window, end), its part after now cut off: no GPU-hour is counted before
        it happened. A window wholly after now is a 400 `window_in_future`."""
        now = self.clock.now()
        end = now if window_end is None else check_time(window_end, name="end")
        start = end - parse_duration(window or "24h", name="window")
        if start >= now:
            raise InvalidInput(f"the window starts at {start.isoformat()}, after now: nothing "
                               "has happened in it yet", code="window_in_future",
                               details={"window_start": start.isoformat(),
                                        "now": now.isoformat()})
        return self._window(start, min(end, now), None)

    def _funnel_rows(self, masks: MinuteMasks, done: int, slots: list[Slot],
                     by: tuple[str, ...], start: datetime, end: datetime,
                     inventory: dict[tuple, float] | None) -> dict[tuple, Funnel]:
        lo, hi = to_ms(start), to_ms(end)
        keys: dict = {}  # a group's label values (one name: the value itself) → its number
        allocated: dict[int, float] = defaultdict(float)
        spans = SpanColumns()  # columns, no object per binding (see SpanColumns)
        key_of = _slot_key(by)
        for slot in slots:
            key = key_of(slot)
            group = keys.get(key)
            if group is None:
                group = keys[key] = len(keys)
            span_lo, span_hi = _clip(slot, lo, hi)
            allocated[group] += slot.weight * _minutes(span_lo, span_hi)
            spans.append(slot.unit, span_lo, span_hi, group, slot.weight)
        tallies = masks.tallies(spans, lo, hi, done) if spans else {}
        rows: dict[tuple, Funnel] = {}
        for key, group in keys.items():
            t = tallies.get(group)
            minutes = allocated[group]
            rows[key if len(by) != 1 else (key,)] = Funnel(
                allocated_gpu_hours=minutes / 60,
                active_gpu_hours=(t.active if t else 0.0) / 60,
                effective_gpu_hours=(t.effective if t else 0.0) / 60,
                unknown_gpu_hours=max(minutes - (t.known if t else 0.0), 0.0) / 60,
                sm_active_gpu_hours=(t.sm_percent if t else 0.0) / 100 / 60)
        if inventory is not None:
            reported = masks.reporting_minutes(by, lo, hi, done)
            for key, seconds in inventory.items():
                funnel = rows.setdefault(key, Funnel())
                funnel.total_gpu_hours = seconds / 3600
                funnel.reporting_gpu_hours = reported.get(key, 0) / 60
        return rows

    # --- activity per binding (billing) ------------------------------------------------

    def binding_activity(self, slots: list[Slot], start: datetime,
                         end: datetime) -> dict[int, tuple[int, int]]:
        """Per binding (the slot's `binding_id`): (active minutes, known minutes) of its
        time in [start, end), judged by the funnel's own masks and rule — a minute without
        a signal is unknown, never idle — up to what the store has rolled up. Whole
        minutes of the unit, not weighted: billing weighs them exactly (docs/billing.md).
        A binding with no known minute is left out. A store without masks: 503."""
        masks = self.masks
        lo, hi = to_ms(start), to_ms(end)
        done = masks.refresh()
        spans = SpanColumns()
        weights: dict[int, float] = {}
        for slot in slots:
            if slot.binding_id is None:
                continue
            span_lo, span_hi = _clip(slot, lo, hi)
            if span_lo < span_hi:
                spans.append(slot.unit, span_lo, span_hi, slot.binding_id, slot.weight)
                weights[slot.binding_id] = slot.weight
        counts = masks.active_known(spans, lo, hi, done) if spans else {}
        found: dict[int, tuple[int, int]] = {}
        for binding_id, (active, known) in counts.items():
            weight = weights[binding_id]
            if round(known / weight):
                found[binding_id] = (round(active / weight), round(known / weight))
        return found

    # --- idleness ------------------------------------------------------------------------

    def idle(self, principal: Principal, *, held_only: bool = False,
             project: str | None = None, environment: str | None = None,
             cursor: str | None = None, limit: int | None = None,
             window_minutes: int | None = None) -> wt.IdleList:
        """Allocations whose units stayed below the activity threshold for the whole idle
        window, judged on the rolled-up minutes up to now; idle-held ones hold memory.

        Ordered by (idle since, allocation, GPU, MIG instance) and paged by that key
        (`limit` None: every item): the verdicts are worked out for every candidate (they
        are counted in aggregate), but only a page's items are built and sent.
        `window_minutes`: another idle window than the setting's (a reclamation policy's);
        `project`, `environment`: only allocations of that project, units in that environment."""
        principal.require(Action.READ_INVENTORY)
        after = idle_cursor(cursor) if cursor is not None else None
        verdicts = self._idle_verdicts(principal, project=project, environment=environment,
                                       window_minutes=window_minutes)
        return verdicts.listed(held_only=held_only, after=after, limit=limit)

    def recent_idle(self, principal: Principal, *, project: str | None = None,
                    environment: str | None = None, limit: int | None = None,
                    fresh: bool = False) -> wt.IdleList:
        """`idle` (the setting's window, the first `limit` items) for one project or
        environment, picked from the verdicts of every binding the principal sees, kept
        while they were judged at most RECENT_FUNNEL_S ago: its `at` says as of when. For
        the dashboard's pages; the API's /telemetry/idle always counts afresh. `fresh`:
        judge afresh and keep the verdicts (the upkeep loop's warming)."""
        principal.require(Action.READ_INVENTORY)
        key = principal.visible_projects  # the scope: an admin's are never a member's
        now = self.clock.now()
        kept = None
        if not fresh:
            self._recent_asked = time.monotonic()
            with self._recent_lock:
                kept = self._recent_idle.get(key)
        if kept is None or (now - kept.at).total_seconds() > RECENT_FUNNEL_S:
            kept = self._idle_verdicts(principal)
            with self._recent_lock:
                self._recent_idle = {k: v for k, v in self._recent_idle.items()
                                     if (now - v.at).total_seconds() <= RECENT_FUNNEL_S}
                if len(self._recent_idle) >= RECENT_FUNNELS_KEPT:
                    self._recent_idle.pop(next(iter(self._recent_idle)))
                self._recent_idle[key] = kept
        return kept.listed(project=project, environment=environment, limit=limit)

    def warm_recent_idle(self) -> None:
        """Judge the fleet's idle list afresh as the admin sees it, so the Environment and
        Project pages pick their rows from it in `recent_idle`: the upkeep loop's work, once
        a round, while the dashboard is in use (as `warm_recent_funnels`)."""
        if time.monotonic() - self._recent_asked > WARM_WHILE_USED_S:
            return
        self.recent_idle(SYSTEM, fresh=True)

    def _idle_verdicts(self, principal: Principal, *, project: str | None = None,
                       environment: str | None = None,
                       window_minutes: int | None = None) -> IdleVerdicts:
        """Every open binding's idle verdict (idle, idle-held, unknown, too new, or active),
        of `project` / `environment` or every one the principal sees."""
        masks = self.masks  # a store without them: 503 before any work
        now = self.clock.now()
        t = self.thresholds if window_minutes is None else \
            replace(self.thresholds, idle_window_minutes=window_minutes)
        window = timedelta(minutes=t.idle_window_minutes)
        with self.state.read() as session:
            slots = [s for s in read_slots(session, principal, now - IDLE_LOOKBACK, now,
                                           projects=[project] if project else None,
                                           cache=self.slot_cache)
                     if (s.end is None or s.end > now)
                     and (environment is None or s.environment == environment)]
        done = min(masks.refresh(), to_ms(now))
        lo = done - int(window.total_seconds() * 1000)
        spans = SpanColumns()  # columns, no object per binding (see SpanColumns)
        # per (project, environment): [too new, unknown, best known minutes of an unknown]
        others: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0, None])
        for n, s in enumerate(slots):
            if s.start_ms <= lo:  # held all window (and open after now): [lo, done) whole
                spans.append(s.unit, lo, done, n, s.weight)
            else:
                others[s.project, s.environment][0] += 1
        # (active, known) minutes per binding: all the window's verdicts need of its masks
        counts = masks.active_known(spans, lo, done, done) if spans else {}
        candidates = [n for n in spans.groups if not ((c := counts.get(n)) and c[0])]
        look_lo = done - int(IDLE_LOOKBACK.total_seconds() * 1000)
        looked = SpanColumns()
        for n in candidates:
            looked.append(slots[n].unit, *_clip(slots[n], look_lo, done), n, slots[n].weight)
        last = masks.last_active_minutes(looked, look_lo, done, done) if candidates else {}
        units = [slots[n].unit for n in candidates]
        # Memory as of the judged minutes' end, as the activity: fresh within 5 minutes of it
        memory = masks.unit_memory(units, int(live.FRESH.total_seconds() * 1000)) \
            if isinstance(masks, UnitMemory) \
            else live.latest_memory(self.telemetry, units, from_ms(done))
        found = []
        for n in candidates:
            slot, count = slots[n], counts.get(n)
            known = (count[1] / slot.weight) if count and slot.weight else 0.0
            state = live.idle_state(t, known_minutes=known, memory=memory.get(slot.unit))
            if state is None:
                other = others[slot.project, slot.environment]
                other[1] += 1
                other[2] = max(known, other[2] or 0.0)
                continue
            last_ms = last.get(n)
            since = max(slot.start, now - IDLE_LOOKBACK) if last_ms is None else \
                from_ms(last_ms + MINUTE_MS)
            found.append(IdleVerdict((since, slot.allocation, slot.unit[0], slot.unit[1] or ""),
                                     slot, state, memory.get(slot.unit)))
        found.sort(key=lambda f: f.key)
        return IdleVerdicts(now, t, found, dict(others))

    # --- live views (latest values, processes) ---------------------------------------------

    def latest_snapshots(self, principal: Principal, *, environment: list[str] | None = None,
                         node: str | None = None, model: list[str] | None = None,
                         project: str | None = None, allocation: str | None = None,
                         cursor: str | None = None, limit: int = 100):
        principal.require(Action.READ_INVENTORY)
        return live.latest_snapshots(
            self, principal, live.UnitFilter(environment or [], node, model or [],
                                                      project, allocation), cursor, limit)

    def zombies(self, principal: Principal) -> list[wt.ZombieProcess]:
        principal.require(Action.READ_INVENTORY)
        return live.zombies(self, principal)

    def unattributed(self, principal: Principal) -> list[wt.UnattributedUsage]:
        principal.require(Action.READ_INVENTORY)
        return live.unattributed(self, principal)

    def top(self, principal: Principal, limit: int = 10) -> wt.TopView:
        principal.require(Action.READ_INVENTORY)
        return live.top(self, principal, limit)

    # --- /metrics ------------------------------------------------------------------------

    def funnel_by_environment(self, principal: Principal) -> wt.FunnelView:
        """The funnel over the default window by environment, for the server's /metrics;
        kept for a minute so scrapes stay cheap."""
        principal.require(Action.READ_INVENTORY)
        scope = principal.visible_projects
        cached = self._gauges.get(scope)
        if cached is not None and time.monotonic() - cached[0] < METRICS_CACHE_S:
            return cached[1]
        view = self.funnel(principal, ["environment"])
        self._gauges[scope] = (time.monotonic(), view)
        return view


@dataclass(frozen=True)
class IdleVerdict:
    """An idle (or idle-held) binding, with its place in the idle list's order."""

    key: tuple[datetime, str, str, str]  # (idle since, allocation, GPU, MIG instance or "")
    slot: Slot
    state: str
    memory: int | None


@dataclass(frozen=True)
class IdleVerdicts:
    """The idle verdicts of some bindings as of `at`: their idle list, or any project's or
    environment's among them, is picked without judging again (`recent_idle`)."""

    at: datetime
    thresholds: Thresholds
    found: list[IdleVerdict]  # in the list's order
    others: dict[tuple[str, str], list]  # (project, environment) → [too new, unknown, best]

    def listed(self, *, project: str | None = None, environment: str | None = None,
               held_only: bool = False, after: tuple | None = None,
               limit: int | None = None) -> wt.IdleList:
        found = [f for f in self.found
                 if (project is None or f.slot.project == project)
                 and (environment is None or f.slot.environment == environment)
                 and (not held_only or f.state == "idle_held")
                 and (after is None or f.key > after)]
        page, next_cursor = (found, None) if limit is None else split_page(
            found, limit, lambda f: [f.key[0].isoformat(), *f.key[1:]])
        others = [v for (p, e), v in self.others.items()
                  if (project is None or p == project)
                  and (environment is None or e == environment)]
        best = [v[2] for v in others if v[2] is not None]
        t = self.thresholds
        return wt.IdleList(
            at=self.at, window_hours=t.idle_window_minutes / MINUTES_PER_HOUR,
            activity_threshold_percent=t.activity_percent,
            idle_held_memory_bytes=t.idle_held_memory_bytes,
            items=[wt.IdleAllocation(
                allocation=f.slot.allocation, project=f.slot.project,
                gpu_uuid=f.slot.unit[0], mig_uuid=f.slot.unit[1],
                mig_profile=f.slot.mig_profile, node=f.slot.node,
                environment=f.slot.environment, model=f.slot.model, weight=f.slot.weight,
                state=f.state, idle_since=f.key[0], memory_held_bytes=f.memory)
                for f in page],
            unknown=sum(v[1] for v in others), next_cursor=next_cursor,
            known_minutes_needed=math.ceil(IDLE_MIN_KNOWN_SHARE * t.idle_window_minutes
                                           - 1e-9),
            unknown_best_known_minutes=round(max(best), 1) if best else None,
            too_new=sum(v[0] for v in others))


def idle_cursor(cursor: str) -> tuple[datetime, str, str, str]:
    """The idle list's sort key from a cursor it issued (idle since, allocation, GPU, MIG
    instance or ""); anything else is a 400 `invalid_cursor`."""
    since, *rest = decode_cursor(cursor, 4)
    if not all(isinstance(v, str) for v in (since, *rest)):
        raise mismatched_cursor(cursor)
    try:
        at = datetime.fromisoformat(since)
    except ValueError as exc:
        raise mismatched_cursor(cursor) from exc
    if at.tzinfo is None:
        raise mismatched_cursor(cursor)
    return (at, *rest)


def _without_trend(view: wt.FunnelView) -> wt.FunnelView:
    """A funnel asked with `step`, as it answers without: the rows' figures do not depend on
    the step, which only adds each row's trend and allocations."""
    usage = {"trend": None, "allocations": None, "allocation_held_hours": None}
    return view.model_copy(update={
        "step_s": None, "fleet": view.fleet.model_copy(update=usage),
        "rows": [row.model_copy(update=usage) for row in view.rows]})


def _slot_key(by: tuple[str, ...]) -> Callable[[Slot], object]:
    """A slot's group in the funnel: its values of `by` (all attributes of a slot), the
    value itself where `by` names one (no tuple per binding: see SpanColumns)."""
    if not by:
        return lambda slot: ()
    return attrgetter(*by)


def _clip(slot: Slot, lo: int, hi: int) -> tuple[int, int]:
    """The slot's part of [lo, hi) in ms (empty: both ends at its start)."""
    start = max(slot.start_ms, lo)
    end = min(slot.end_ms, hi) if slot.end_ms is not None else hi
    return start, max(start, end)


def _minutes(lo_ms: int, hi_ms: int) -> int:
    """Minute buckets whose start lies in [lo, hi): how the masks count a binding's time."""
    return max(0, -(-hi_ms // MINUTE_MS) - -(-lo_ms // MINUTE_MS))


def _funnel_row(group: dict, f: Funnel, usage: dict | None = None) -> wt.FunnelRow:
    return wt.FunnelRow(group=group, total_gpu_hours=f.total_gpu_hours,
                        reporting_gpu_hours=f.reporting_gpu_hours,
                        silent_gpu_hours=f.silent_gpu_hours,
                        allocated_gpu_hours=f.allocated_gpu_hours,
                        active_gpu_hours=f.active_gpu_hours,
                        effective_gpu_hours=f.effective_gpu_hours,
                        unknown_gpu_hours=f.unknown_gpu_hours,
                        efficiency_percent=f.efficiency_percent, **(usage or {}))


# --- the funnel's trend ------------------------------------------------------------------

MAX_TREND_POINTS = 500
_NO_USAGE: dict = {}


def trend_step(start: datetime, end: datetime, step: str) -> timedelta:
    """The trend's step: whole minutes (the masks' resolution), at most MAX_TREND_POINTS
    of them in the window; else a 400 naming `step`."""
    span = parse_duration(step, name="step")
    if span < timedelta(minutes=1) or span.total_seconds() % 60:
        raise InvalidInput(f"step '{step}' must be whole minutes, at least 1m",
                           code="invalid_step", details={"step": step})
    points = math.ceil((end - start) / span) + 1  # aligned steps: the first may be partial
    if points > MAX_TREND_POINTS:
        raise InvalidInput(f"step '{step}' cuts the window into {points} points; at most "
                           f"{MAX_TREND_POINTS}: choose a longer step", code="step_too_small",
                           details={"step": step, "points": points})
    return span


def _trends(masks: MinuteMasks, done: int, slots: list[Slot], by: tuple[str, ...],
            start: datetime, end: datetime, step: timedelta) -> dict:
    """Per funnel row key (None: the fleet): its `trend` — GPU-hours per step, counted as
    the funnel counts them — and its allocations with their held hours.

    Steps are aligned to multiples of `step` since the epoch (the first and last cut at
    the window's edges), so a store with `step_tallies` counts every step from its hour
    masks in one query over one span per binding. Otherwise (or for a step that does not
    fit the hours) each binding is cut at the steps' edges: bindings × steps spans, one
    tally. Allocated minutes per step come from a difference array: a binding adds its
    weight to the steps it covers whole, minutes to the two it covers in part."""
    lo, hi, step_ms = to_ms(start), to_ms(end), int(step.total_seconds() * 1000)
    base = lo // step_ms * step_ms
    n = max(1, -(-(hi - base) // step_ms))
    edges = [lo] + [base + i * step_ms for i in range(1, n)] + [hi]
    in_store = hasattr(masks, "step_tallies") and steps_fit_hours(step_ms)
    key_of, keys = _slot_key(by), {}
    whole: dict[int, list[float]] = {}  # group → difference array of weight over steps
    part: dict[int, float] = defaultdict(float)  # group × n + step → weighted minutes
    held: dict[int | None, dict[str, list[int]]] = defaultdict(dict)  # → [first, last] ms
    spans = SpanColumns()
    for slot in slots:
        key = key_of(slot)
        group = keys.setdefault(key if len(by) != 1 else (key,), len(keys))
        span_lo, span_hi = _clip(slot, lo, hi)
        if span_lo >= span_hi:
            continue
        first, last, w = (span_lo - base) // step_ms, (span_hi - 1 - base) // step_ms, \
            slot.weight
        if in_store:
            spans.append(slot.unit, span_lo, span_hi, group, w)
        else:
            for b in range(first, last + 1):
                spans.append(slot.unit, max(span_lo, edges[b]), min(span_hi, edges[b + 1]),
                             group * n + b, w)
        if first == last:
            part[group * n + first] += w * _minutes(span_lo, span_hi)
        else:
            part[group * n + first] += w * _minutes(span_lo, edges[first + 1])
            part[group * n + last] += w * _minutes(edges[last], span_hi)
            if last > first + 1:
                diff = whole.setdefault(group, [0.0] * (n + 1))
                diff[first + 1] += w
                diff[last] -= w
        for owner in (group, None):
            seen = held[owner].setdefault(slot.allocation, [span_lo, span_hi])
            seen[0], seen[1] = min(seen[0], span_lo), max(seen[1], span_hi)
    if not spans:
        tallies = {}
    elif in_store:
        tallies = {group * n + (at - base) // step_ms: t for (group, at), t in
                   masks.step_tallies(spans, lo, hi, done, step_ms).items()}
    else:
        tallies = masks.tallies(spans, lo, hi, done)
    step_minutes = [_minutes(edges[b], edges[b + 1]) for b in range(n)]

    def allocated(group: int) -> list[float]:
        weight, minutes = 0.0, []
        for b, delta in enumerate(whole.get(group, [0.0] * (n + 1))[:n]):
            weight += delta
            minutes.append(weight * step_minutes[b] + part.get(group * n + b, 0.0))
        return minutes

    per_group = {g: allocated(g) for g in keys.values()}

    def usage(groups: list[int], owner: int | None) -> dict:
        points = []
        for b in range(n):
            counted = [t for g in groups if (t := tallies.get(g * n + b))]
            points.append(wt.FunnelPoint(
                start=from_ms(edges[b]),
                allocated_gpu_hours=sum(per_group[g][b] for g in groups) / 60,
                active_gpu_hours=sum(t.active for t in counted) / 60,
                effective_gpu_hours=sum(t.effective for t in counted) / 60))
        spans_held = [last - first for first, last in held[owner].values()]
        return {"trend": points, "allocations": len(spans_held),
                "allocation_held_hours": sum(spans_held) / 3_600_000}

    found = {key: usage([g], g) for key, g in keys.items()}
    found[None] = usage(list(keys.values()), None)
    return found


def _regroup(results: list[SeriesResult], by: list[str], profiles: dict[str, str],
             across: AcrossSeries) -> list[SeriesResult]:
    """Fold per-unit results into groups that include `mig_profile` (a label the store
    does not hold), combining values across units as the metric's class says."""
    merged: dict[tuple, dict[datetime, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        labels = {**r.labels, "mig_profile": profiles.get(r.labels.get("mig_uuid") or "")}
        key = tuple(labels.get(n) for n in by)
        for at, value in r.points:
            merged[key][at].append(value)
    return [SeriesResult(dict(zip(by, key, strict=True)),
                         [(at, combine_across(vs, AcrossSeries(across)))
                          for at, vs in sorted(points.items())])
            for key, points in sorted(merged.items(), key=lambda kv: [str(v) for v in kv[0]])]
