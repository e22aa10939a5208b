"""The Prometheus-compatible telemetry store: remote-write out, PromQL in (docs/design.md,
"Architecture").

For sites that outgrow one machine: samples go to VictoriaMetrics (single-node or cluster)
by remote-write, and queries are PromQL (MetricsQL) range and instant queries. The engine
keeps the samples, downsamples and expires them; this class maps the `TelemetryStore`
protocol onto it so that the services cannot tell the backends apart
(tests/tsdb_behaviour.py runs on both).

How a query keeps the DuckDB store's answers:

* Windows are the store's buckets exactly. A step bucket [b, b + step) is PromQL's range window
  `[step]` evaluated at b + step − 1 ms (range windows are left-open), and a last partial bucket is
  one instant query with a window cut at `end`.
* Over time, by class: mean → `avg_over_time` (as `sum_over_time` / `count_over_time` where rows are
  folded further), last → `last_over_time`, the sensor peak → `max_over_time`. A counter's increase
  is computed here from each row's `increase_prometheus` (the increase inside the row, resets
  handled, no extrapolation, no guess about the sample before the window), `first_over_time` and
  `last_over_time`: the step between rows is credited to the later one, reset-aware, exactly as the
  DuckDB store's fold does. MetricsQL's own `increase` is not used: it guesses whether a counter
  started from zero when no earlier sample is in reach, and answers 155 where 55 is right.
* Across series: in the engine (`avg|sum|max by (…)`, count as `sum(x != bool 0)`) when nothing
  needs folding here; otherwise here, per group and bucket.
* Bindings: ownership is not a label (docs/design.md, "Telemetry model"), so the per-unit rows are
  fetched at the attribution resolution (1 minute, 1 hour for windows past 30 days, the step when it
  is finer), attributed to the binding covering each row's start, folded into steps and aggregated
  here — the DuckDB store's rule.

`tier` only aligns the first bucket as the DuckDB store does; the engine reads whatever
resolution it keeps (its own downsampling). `apply_retention()` does nothing: the engine's
retention flags rule (VictoriaMetrics `-retentionPeriod`). `rollup(until)` folds nothing
either; it records until when minutes are final, which is what the funnel's minute masks
judge (`minute_masks`, prometheus_masks.py).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

import httpx
import orjson

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, Comparison, OverTime
from gpufleet.tsdb.prometheus_masks import PrometheusMinuteMasks, series_minutes
from gpufleet.tsdb.prometheus_names import (
    EXPOSITION_PREFIX,
    LATEST_AHEAD_MS,
    PART_LABEL,
    RESERVED_LABELS,
    exposition_labels,
    exposition_name,
    series_of_labels,
)
from gpufleet.tsdb.protocol import (
    HOUR_MS,
    MINUTE_MS,
    OWNER_LABELS,
    Bindings,
    Filters,
    LatestValue,
    Sample,
    SampleColumns,
    SeriesLabels,
    SeriesResult,
    TelemetryStoreUnavailable,
    Tier,
    ValueFilter,
    aggregation_of,
    as_list,
    choose_tier,
    filter_matcher,
    from_ms,
    newest_of_units,
    to_ms,
)
from gpufleet.tsdb.rollups import combine_across
from gpufleet.wire.remote_write import METRIC_NAME_LABEL, REQUEST_HEADERS, encode_write_request

_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ABSENT_AS_EMPTY = frozenset(("node", "environment", "model"))  # "" in SeriesLabels
_TIER_WIDTH_MS = {Tier.RAW: 1, Tier.MINUTE: MINUTE_MS, Tier.HOUR: HOUR_MS}

MAX_SAMPLES_PER_REQUEST = 50_000  # one remote-write body stays a few hundred kB
MAX_POINTS_PER_QUERY = 10_000  # under Prometheus' 11,000 and VictoriaMetrics' 30,000
# `latest` without `since` looks back this far: as long as raw samples may be kept (the
# setting's limit); a window reaching back to the epoch finds nothing in VictoriaMetrics.
LATEST_LOOKBACK_MS = 3661 * 86_400_000
REMEMBERED_BATCH_KEYS = 100_000
MAX_SELECTOR_CHARS = 6_000  # with the query around it, under -search.maxQueryLen's 16 kB

_ACROSS_IN_ENGINE = {AcrossSeries.MEAN: "avg", AcrossSeries.SUM: "sum",
                     AcrossSeries.MAX: "max", AcrossSeries.COUNT: "sum"}
# Row parts each over-time aggregation needs when rows are folded here.
_ROW_PARTS = {
    "mean": {"sum": "sum_over_time", "count": "count_over_time"},
    "peak": {"max": "max_over_time"},
    "last": {"last": "last_over_time"},
    "increase": {"within": "increase_prometheus", "first": "first_over_time",
                 "last": "last_over_time"},
}


# -- the store -----------------------------------------------------------------------------

class PrometheusTelemetryStore:
    """The `TelemetryStore` on a Prometheus-compatible engine.

    `write_url` is the engine's remote-write base (`{write_url}/api/v1/write`); `query_url`
    its PromQL base (`{query_url}/api/v1/query_range`), `write_url` when None. A `client`
    passed in is used as it is and not closed by `close()`.
    """

    def __init__(self, write_url: str, query_url: str | None = None, *,
                 timeout_s: float = 10.0, client: httpx.Client | None = None):
        self.write_url = write_url.rstrip("/")
        self.query_url = (query_url or write_url).rstrip("/")
        self._owns_client = client is None
        self._client = client or httpx.Client(timeout=timeout_s)
        # Upload keys written by this process: a replay is answered None. The engine drops
        # a sample repeated at the same time (VictoriaMetrics with -dedup.minScrapeInterval),
        # so a replay this process does not remember is harmless too.
        self._batch_keys: OrderedDict[str, None] = OrderedDict()
        self._keys_lock = threading.Lock()
        self._rolled_up_ms = 0  # minutes before this are final (`rollup`)

    # -- writes ---------------------------------------------------------------------------

    def write(self, batch: Sequence[Sample]) -> int:
        points: dict[SeriesLabels, list[tuple[int, float]]] = defaultdict(list)
        stored = 0
        for sample in batch:
            if sample.value is not None:
                points[sample.series].append((to_ms(sample.at), float(sample.value)))
                stored += 1
        self._remote_write(points)
        return stored

    def write_columns(self, batches: Sequence[tuple[str, SampleColumns]]) -> list[int | None]:
        answers: list[int | None] = []
        points: dict[SeriesLabels, list[tuple[int, float]]] = defaultdict(list)
        fresh: set[str] = set()
        with self._keys_lock:
            held = {key for key, _ in batches if key in self._batch_keys}
        for key, columns in batches:
            if key in held or key in fresh:
                answers.append(None)
                continue
            fresh.add(key)
            for index, at_ms, value in zip(columns.series_index, as_list(columns.times_ms),
                                           as_list(columns.values), strict=True):
                points[columns.series[index]].append((at_ms, float(value)))
            answers.append(len(columns))
        self._remote_write(points)
        with self._keys_lock:
            for key in fresh:
                self._batch_keys[key] = None
            while len(self._batch_keys) > REMEMBERED_BATCH_KEYS:
                self._batch_keys.popitem(last=False)
        return answers

    def rollup(self, until: datetime) -> None:
        """The engine keeps no rollups (it downsamples by its own settings), so this only
        records that minutes ending before `until` are final: the funnel, idle list and
        zombies judge those (the server calls it with now − `telemetry_rollup_grace_s`,
        which must cover the engine's `-search.latencyOffset`)."""
        until_ms = to_ms(until) // MINUTE_MS * MINUTE_MS
        with self._keys_lock:
            self._rolled_up_ms = max(self._rolled_up_ms, until_ms)

    def apply_retention(self, now: datetime) -> None:
        """Nothing to do: the engine expires samples by its own retention flag
        (VictoriaMetrics `-retentionPeriod`, Prometheus `--storage.tsdb.retention.time`)."""

    def close(self) -> None:
        if self._owns_client:
            self._client.close()

    # -- reads ----------------------------------------------------------------------------

    def query_range(self, metric: str, start: datetime, end: datetime, step: timedelta, *,
                    filters: Filters | None = None, group_by: Sequence[str] = (),
                    over_time: OverTime | None = None, across: AcrossSeries | None = None,
                    tier: Tier | None = None, bindings: Bindings | None = None,
                    where: ValueFilter | None = None) -> list[SeriesResult]:
        over_time, across = aggregation_of(metric, start, end, step, over_time, across)
        if where is not None:
            where.refuse_percent()
        fold = "peak" if across is AcrossSeries.MAX and over_time is OverTime.MEAN \
            else over_time.value
        _check_label_names([*group_by, *(filters or {})])
        if tier is None:
            # As the DuckDB store: with bindings, attribution is by minute where minutes
            # are kept, and the first bucket is aligned on the tier's width.
            by_step = min(step, timedelta(minutes=1)) if bindings is not None else step
            tier = choose_tier(by_step, start, end)
        width = _TIER_WIDTH_MS[Tier(tier)]
        step_ms = max(int(step.total_seconds() * 1000), 1)
        window = _Window(to_ms(start) // width * width, to_ms(end), step_ms)
        unit_filters = {k: list(v) for k, v in (filters or {}).items() if k not in OWNER_LABELS}
        owner_filters = {k: set(v) for k, v in (filters or {}).items() if k in OWNER_LABELS}
        if bindings is not None:
            bound = {gpu for gpu, _ in bindings}
            wanted = set(unit_filters.get("gpu_uuid", bound))
            unit_filters["gpu_uuid"] = sorted(bound & wanted)
            row_ms = step_ms if width == 1 else min(step_ms, width)
            window = _Window(window.lo, window.hi, row_ms, step_ms)
        selector, leftover = _selection(exposition_name(metric), unit_filters)
        if selector is None:
            return []
        # A counter's increase is folded here, but over one row without bindings it is the
        # row's own `increase_prometheus` (nothing to carry between rows): the engine can
        # answer it, and leave out the series that cannot pass `where`, so a fleet's quiet
        # counters never travel as JSON.
        single_row = bindings is None and window.hi - window.lo <= window.row_ms
        if bindings is None and not leftover and (over_time is not OverTime.INCREASE
                                                  or single_row):
            return self._aggregated_in_engine(selector, window, group_by, across, fold, where)
        slots = _Slots(group_by, bindings, owner_filters, leftover)
        parts = _ROW_PARTS[fold]
        narrow = _increase_prefilter(where) if fold == "increase" and single_row else None

        def expression(w: int) -> str:
            keep = "" if narrow is None else f" and {narrow(f'{selector}[{w}ms]')}"
            return _union({part: f"{fn}({selector}[{w}ms]){keep}"
                           for part, fn in parts.items()})

        for labels, by_start in self._rows(window, expression).items():
            slots.add(series_of_labels(dict(labels), metric), by_start)
        return slots.results(window, fold, across, where)

    def latest(self, filters: Filters | None = None, *, metric: str | None = None,
               since: datetime | None = None,
               where: ValueFilter | None = None) -> list[LatestValue]:
        _check_label_names(list(filters or {}))
        names = exposition_name(metric) if metric is not None else f"{EXPOSITION_PREFIX}.+"
        at_ms = _instant_now_ms() + LATEST_AHEAD_MS
        window_ms = at_ms - to_ms(since) + 1 if since is not None else LATEST_LOOKBACK_MS
        return self._latest_at(names, metric, filters or {}, at_ms, window_ms, where)

    def _latest_at(self, names: str, metric: str | None, filters: Filters, at_ms: int,
                   window_ms: int, where: ValueFilter | None = None) -> list[LatestValue]:
        """`latest` over the window (at − window, at]."""
        selector, leftover = _selection(names, filters)
        if selector is None:
            return []
        # keep_metric_names: the series of several metrics stay apart.
        value = f"last_over_time({selector}[{window_ms}ms]) keep_metric_names"
        at = f"tlast_over_time({selector}[{window_ms}ms]) keep_metric_names"
        found: dict[tuple, dict[str, float]] = defaultdict(dict)
        if where is not None:
            # The values that pass first (a comparison keeps the passing series' values);
            # then the times of those series only: a fleet-wide second rollup would cost
            # the engine as much as the first, for a handful of series.
            if where.percent_of is None:
                value = _compared(value, where)
            else:
                passing = _percent_compared(selector, metric, filters, window_ms, where)
                value = f"({value}) and ({passing})"
            for labels, got in self._instant(value, at_ms):
                found[_key(labels)]["value"] = got
            gpus = sorted({dict(key)["gpu_uuid"] for key in found if dict(key).get("gpu_uuid")})
            queries = [{"at": f"tlast_over_time({narrow}[{window_ms}ms]) keep_metric_names"}
                       for narrow in _selections_by_gpu(names, filters, gpus)]
        else:
            queries = [{"value": value, "at": at}]
        for query in queries:
            for labels, got in self._instant(_union(query), at_ms):
                part = labels.pop(PART_LABEL)
                key = _key(labels)
                if where is None or key in found:
                    found[key][part] = got
        latest = []
        matches = filter_matcher(leftover)  # once: its sets of a thousand GPUs, not per series
        for labels, got in found.items():
            described = series_of_labels(dict(labels))
            if described is not None and matches(described) and len(got) == 2 \
                    and (where is None or where.percent_of is not None
                         or where.holds(got["value"])):  # as compared here, exactly
                latest.append(LatestValue(described, from_ms(round(got["at"] * 1000)),
                                          got["value"]))
        # A MIG GPU's own series has no mig_uuid (None) beside its instances' (str).
        return sorted(latest, key=lambda v: (v.series.metric, v.series.gpu_uuid,
                                             v.series.mig_uuid or "", v.series.labels))

    def latest_of_units(self, metric: str, units: Collection[tuple[str, str | None]],
                        since: datetime) -> dict[tuple[str, str | None], float]:
        """See protocol.TelemetryStore. The idle list asks it for ~20,000 units of a
        100,000-GPU fleet, whose UUIDs no selector holds, so the engine answers the whole
        metric and the units are picked here (`newest_of_units`)."""
        wanted = set(units)
        if not wanted:
            return {}
        at_ms = _instant_now_ms() + LATEST_AHEAD_MS  # the window `latest` reads
        return self.newest_of_units(metric, at_ms, at_ms - to_ms(since) + 1, wanted)

    def newest_of_units(self, metric: str, at_ms: int, window_ms: int,
                        units: Collection[tuple[str, str | None]] | None = None
                        ) -> dict[tuple[str, str | None], float]:
        """Each unit's (of `units`; of every unit when None) newest value of `metric` in
        (at − window, at]: one instant query of the values alone, parsed with orjson,
        nothing built per series but the unit's key. The times are asked only for the rare
        unit answered by several series (it moved node), through `latest`'s reading, in
        selectors that keep within the engine's query length however many moved."""
        selector, _ = _selection(
            exposition_name(metric),
            {} if units is None else {"gpu_uuid": sorted({gpu for gpu, _ in units})})
        if selector is None:
            return {}
        wanted = None if units is None else set(units)
        values: dict[tuple[str, str | None], float] = {}
        moved: set[tuple[str, str | None]] = set()
        for found in self._instant_results(f"last_over_time({selector}[{window_ms}ms])",
                                           at_ms):
            labels = found["metric"]
            gpu = labels.get("gpu_uuid")
            unit = (gpu, labels.get("mig_uuid") or None)
            value = float(found["value"][1])
            if gpu is None or (wanted is not None and unit not in wanted) or math.isnan(value):
                continue
            if unit in values:
                moved.add(unit)
            values[unit] = value
        if moved:
            found = self._latest_at(exposition_name(metric), metric,
                                    {"gpu_uuid": sorted({gpu for gpu, _ in moved})},
                                    at_ms, window_ms)
            values.update(newest_of_units(
                (((v.series.gpu_uuid, v.series.mig_uuid), round(v.at.timestamp() * 1000),
                  v.value) for v in found), moved))
        return values

    # -- the funnel's minute masks (prometheus_masks.py) -----------------------------------

    def minute_masks(self, thresholds: Thresholds) -> PrometheusMinuteMasks:
        """Per-unit minute masks over the engine's 1-minute means (masks.MinuteMasks); the
        caller keeps the object, whose cache of closed hours lives in it."""
        return PrometheusMinuteMasks(self._mask_engine(), lambda: self._rolled_up_ms,
                                     thresholds)

    def _mask_engine(self) -> _MaskEngine:
        return _MaskEngine(self)

    def series_minutes(self, chosen: Sequence[SeriesLabels], lo_ms: int, hi_ms: int,
                       above: float) -> dict[SeriesLabels, tuple[int, int, int | None]]:
        """See masks.MaskStore."""
        return series_minutes(self._minute_series,
                              lambda metric, f: _selection(exposition_name(metric), f)[0],
                              chosen, lo_ms, hi_ms, above)

    def _minute_series(self, lo_ms: int, hi_ms: int, parts: Mapping[str, Callable[[int], str]]
                       ) -> Iterable[tuple[dict[str, str], str, list[tuple[int, float]]]]:
        """The minutes of [lo, hi) (minute-aligned) per answer series: its labels, its
        part, and its points, each minute [b, b + 60 s) answered at b + 60 s − 1 ms (range
        windows are left-open). The masks read every point of a fleet's day: no row
        dictionaries are built (`_rows`)."""
        expression = _union({part: make(MINUTE_MS) for part, make in parts.items()})
        for first, count in _Window(lo_ms, hi_ms, MINUTE_MS).full_row_chunks():
            for labels, points in self._range(expression, first + MINUTE_MS - 1, count,
                                              MINUTE_MS):
                part = labels.pop(PART_LABEL)
                labels.pop(METRIC_NAME_LABEL, None)
                yield labels, part, points

    # -- internals ------------------------------------------------------------------------

    def _aggregated_in_engine(self, selector: str, window: _Window, group_by: Sequence[str],
                              across: AcrossSeries, fold: str,
                              where: ValueFilter | None) -> list[SeriesResult]:
        fn = {"mean": "avg_over_time", "peak": "max_over_time", "last": "last_over_time",
              "increase": "increase_prometheus"}[fold]  # increase: one row only
        by = f" by ({', '.join(group_by)})" if group_by else ""

        def expression(window_ms: int) -> str:
            inner = f"{fn}({selector}[{window_ms}ms])"
            if across is AcrossSeries.COUNT:
                inner = f"({inner} != bool 0)"
            combined = f"{_ACROSS_IN_ENGINE[across]}{by} ({inner})"
            return combined if where is None else _compared(combined, where)

        results = []
        for labels, by_start in self._rows(window, expression).items():
            found = dict(labels)
            group = {name: found.get(name, "" if name in _ABSENT_AS_EMPTY else None)
                     for name in group_by}
            points = [(from_ms(b), row[None]) for b, row in sorted(by_start.items())
                      if where is None or where.holds(row[None])]
            if points:
                results.append(SeriesResult(group, points))
        return sorted(results, key=lambda r: [str(v) for v in r.labels.values()])

    def _rows(self, window: _Window, expression: Callable[[int], str]
              ) -> dict[tuple, dict[int, dict[str | None, float]]]:
        """Each answer series' rows: row start → {part: value}, for rows of `window.row_ms`
        from `window.lo`, the last one cut at `window.hi`."""
        rows: dict[tuple, dict[int, dict[str | None, float]]] = defaultdict(
            lambda: defaultdict(dict))

        def series_rows(labels: dict[str, str]) -> tuple[dict[int, dict], str | None]:
            part = labels.pop(PART_LABEL, None)
            labels.pop(METRIC_NAME_LABEL, None)
            return rows[_key(labels)], part

        row_ms = window.row_ms
        for first, count in window.full_row_chunks():
            for labels, points in self._range(expression(row_ms), first + row_ms - 1, count,
                                              row_ms):
                by_start, part = series_rows(labels)  # once per series, not per point
                for at_ms, value in points:
                    by_start[at_ms - row_ms + 1][part] = value
        cut = window.cut_row()
        if cut is not None:
            cut_start, cut_ms = cut
            for labels, value in self._instant(expression(cut_ms), window.hi - 1):
                by_start, part = series_rows(labels)
                by_start[cut_start][part] = value
        return rows

    def _range(self, query: str, first_ms: int, count: int, step_ms: int
               ) -> Iterable[tuple[dict[str, str], list[tuple[int, float]]]]:
        """Each answer series' labels and its points (time in ms, value; NaN left out)."""
        data = self._get("query_range", {
            "query": query, "start": _seconds(first_ms),
            "end": _seconds(first_ms + (count - 1) * step_ms), "step": _seconds(step_ms)})
        for found in data["result"]:
            points = [(round(float(at_s) * 1000), value) for at_s, text in found["values"]
                      if not math.isnan(value := float(text))]
            yield dict(found["metric"]), points

    def _instant(self, query: str, at_ms: int) -> Iterable[tuple[dict[str, str], float]]:
        data = self._get("query", {"query": query, "time": _seconds(at_ms)})
        for found in data["result"]:
            value = float(found["value"][1])
            if not math.isnan(value):
                yield dict(found["metric"]), value

    def _instant_results(self, query: str, at_ms: int) -> list[dict]:
        """The result entries of an instant query ("metric", "value"), parsed with orjson:
        for answers of 100,000s of series (the masks, `latest_of_units`)."""
        url = f"{self.query_url}/api/v1/query"
        try:
            answer = self._client.post(
                url, data={"query": query, "time": _seconds(at_ms), "nocache": "1"})
        except httpx.HTTPError as error:
            raise _unavailable("query", url, None, str(error)) from error
        if answer.status_code != 200:
            raise _unavailable("query", url, answer.status_code, answer.text[:500])
        return orjson.loads(answer.content)["data"]["result"]

    def _get(self, endpoint: str, form: dict[str, str]) -> dict:
        # nocache=1: VictoriaMetrics would otherwise align start and end to the step (for
        # its cache) and hide the latest -search.latencyOffset of an instant query.
        url = f"{self.query_url}/api/v1/{endpoint}"
        try:
            answer = self._client.post(url, data={**form, "nocache": "1"})
        except httpx.HTTPError as error:
            raise _unavailable("query", url, None, str(error)) from error
        if answer.status_code != 200:
            raise _unavailable("query", url, answer.status_code, answer.text[:500])
        return answer.json()["data"]

    def _remote_write(self, points: Mapping[SeriesLabels, list[tuple[int, float]]]) -> None:
        """Send the points, in bodies of at most MAX_SAMPLES_PER_REQUEST samples; returns
        once every body was answered 2xx. On an error some bodies may have been stored:
        the caller does not acknowledge, the agent resends, and the engine keeps one sample
        per series and time."""
        body: list[tuple[dict[str, str], list[tuple[int, float]]]] = []
        size = 0
        for labels, series_points in points.items():
            body.append((exposition_labels(labels), sorted(series_points)))
            size += len(series_points)
            if size >= MAX_SAMPLES_PER_REQUEST:
                self._post(body)
                body, size = [], 0
        if body:
            self._post(body)

    def _post(self, body: list[tuple[dict[str, str], list[tuple[int, float]]]]) -> None:
        url = f"{self.write_url}/api/v1/write"
        try:
            answer = self._client.post(url, content=encode_write_request(body),
                                       headers=REQUEST_HEADERS)
        except httpx.HTTPError as error:
            raise _unavailable("write", url, None, str(error)) from error
        if not 200 <= answer.status_code < 300:
            raise _unavailable("write", url, answer.status_code, answer.text[:500])


class _MaskEngine:
    """The engine as the minute masks use it (prometheus_masks.MaskEngine): instant queries
    whose answers run to 100,000s of series (parsed with orjson), and VictoriaMetrics'
    `/api/v1/import` and `/api/v1/export` JSON lines for the recorded hours."""

    def __init__(self, store: PrometheusTelemetryStore):
        self._store = store

    def instant(self, query: str, at_ms: int) -> list[dict]:
        return self._store._instant_results(query, at_ms)

    def newest_of_units(self, metric: str, at_ms: int, window_ms: int
                        ) -> dict[tuple[str, str | None], float]:
        return self._store.newest_of_units(metric, at_ms, window_ms)

    def import_lines(self, body: bytes) -> None:
        url = f"{self._store.write_url}/api/v1/import"
        try:
            answer = self._store._client.post(url, content=body)
        except httpx.HTTPError as error:
            raise _unavailable("write", url, None, str(error)) from error
        if not 200 <= answer.status_code < 300:
            raise _unavailable("write", url, answer.status_code, answer.text[:500])

    def export_lines(self, selector: str, lo_ms: int, hi_ms: int) -> Iterable[bytes]:
        """Read whole before the first line is given: a broken transfer raises here, not
        half-way through the caller's fold."""
        url = f"{self._store.query_url}/api/v1/export"
        try:
            answer = self._store._client.post(url, data={
                "match[]": selector, "start": _seconds(lo_ms), "end": _seconds(hi_ms)})
        except httpx.HTTPError as error:
            raise _unavailable("query", url, None, str(error)) from error
        if answer.status_code != 200:
            raise _unavailable("query", url, answer.status_code, answer.text[:500])
        return answer.content.split(b"\n")


class _Window:
    """The query's rows: [lo, hi) cut into rows of `row_ms` (the step itself unless rows
    are folded into steps here), folded into steps of `step_ms` from `lo`."""

    def __init__(self, lo: int, hi: int, row_ms: int, step_ms: int | None = None):
        self.lo, self.hi, self.row_ms = lo, hi, row_ms
        self.step_ms = step_ms or row_ms

    def full_row_chunks(self) -> Iterable[tuple[int, int]]:
        """(first row start, rows) of each range query: rows wholly inside [lo, hi)."""
        full = (self.hi - self.lo) // self.row_ms
        for done in range(0, full, MAX_POINTS_PER_QUERY):
            yield self.lo + done * self.row_ms, min(MAX_POINTS_PER_QUERY, full - done)

    def cut_row(self) -> tuple[int, int] | None:
        """(start, length) of the last row where `hi` cuts it short, else None."""
        cut_ms = (self.hi - self.lo) % self.row_ms
        return (self.hi - cut_ms, cut_ms) if cut_ms else None

    def step_of(self, row_start_ms: int) -> int:
        return self.lo + (row_start_ms - self.lo) // self.step_ms * self.step_ms


class _Slots:
    """Series rows by slot — one series over one binding, or over all time — folded into
    steps per slot and combined across the slots of each group."""

    def __init__(self, group_by: Sequence[str], bindings: Bindings | None,
                 owner_filters: Mapping[str, set], unit_filters: Filters):
        self.group_by = list(group_by)
        self.bindings = bindings
        self.owner_filters = owner_filters
        self._passes = filter_matcher(unit_filters)  # what the selector could not hold
        self.groups: dict[tuple, list[list[tuple[int, dict]]]] = defaultdict(list)

    def add(self, labels: SeriesLabels | None, by_start: Mapping[int, dict]) -> None:
        if labels is None or not self._passes(labels):
            return
        rows = sorted(by_start.items())
        if self.bindings is None:
            key = tuple(labels.label(name) for name in self.group_by)
            self.groups[key].append(rows)
            return
        for binding in self.bindings.get((labels.gpu_uuid, labels.mig_uuid), ()):
            owner = {"allocation": binding.allocation, "project": binding.project}
            if not all(owner[k] in allowed for k, allowed in self.owner_filters.items()):
                continue
            key = tuple(owner[name] if name in OWNER_LABELS else labels.label(name)
                        for name in self.group_by)
            lo = to_ms(binding.start)
            hi = to_ms(binding.end) if binding.end is not None else math.inf
            self.groups[key].append([(b, row) for b, row in rows if lo <= b < hi])

    def results(self, window: _Window, fold: str, across: AcrossSeries,
                where: ValueFilter | None = None) -> list[SeriesResult]:
        results = []
        for key, slots in self.groups.items():
            by_step: dict[int, list[float]] = defaultdict(list)
            for rows in slots:
                for step_ms, value in _fold_rows(rows, window, fold).items():
                    by_step[step_ms].append(value)
            combined = [(from_ms(b), combine_across(values, across))
                        for b, values in sorted(by_step.items())]
            points = [(b, v) for b, v in combined if where is None or where.holds(v)]
            if points:
                results.append(SeriesResult(dict(zip(self.group_by, key, strict=True)), points))
        return sorted(results, key=lambda r: [str(v) for v in r.labels.values()])


def _fold_rows(rows: Sequence[tuple[int, dict]], window: _Window, fold: str) -> dict[int, float]:
    """One slot's rows (in time order) folded into the query's steps, by the over-time
    aggregation; a counter's step between rows goes to the later row, reset-aware."""
    acc: dict[int, list[float]] = {}
    previous_last: float | None = None
    for start_ms, row in rows:
        b = window.step_of(start_ms)
        if fold == "mean":
            if "count" not in row:
                continue
            total = acc.setdefault(b, [0.0, 0.0])
            total[0] += row["sum"]
            total[1] += row["count"]
        elif fold == "peak":
            if "max" in row:
                acc[b] = [max(acc.get(b, [-math.inf])[0], row["max"])]
        elif fold == "last":
            if "last" in row:
                acc[b] = [row["last"]]
        elif "last" in row:  # increase
            first = row.get("first", row["last"])
            carried = 0.0 if previous_last is None else \
                (first - previous_last if first >= previous_last else first)
            acc.setdefault(b, [0.0])[0] += row.get("within", 0.0) + carried
            previous_last = row["last"]
    if fold == "mean":
        return {b: total / n for b, (total, n) in acc.items() if n}
    return {b: value for b, (value, *_) in acc.items()}


def _selection(names: str, filters: Filters) -> tuple[str | None, dict[str, list]]:
    """`{__name__=~"names", label=~"a|b", …}` and the filters it could not hold; None where
    a filter allows nothing. `None` (and "") in a filter's values matches a series without
    that label. The engine refuses long queries (VictoriaMetrics `-search.maxQueryLen`,
    16 kB by default), so the longest matchers (a project's thousand GPUs) are left for
    the caller to apply to the series the engine returns."""
    matchers = [f"__name__=~{_quote(names)}"]
    leftover: dict[str, list] = {}
    budget = MAX_SELECTOR_CHARS
    for name, allowed in sorted(filters.items(), key=lambda item: len(item[1])):
        if not allowed:
            return None, {}
        alternatives = sorted({re.escape(v) if v else "" for v in allowed})
        matcher = f"{name}=~{_quote('|'.join(alternatives))}"
        if len(matcher) > budget:
            leftover[name] = list(allowed)
            continue
        budget -= len(matcher)
        matchers.append(matcher)
    return "{" + ", ".join(matchers) + "}", leftover


# A bit mask is tested run by run of adjacent bits (PromQL has no bitwise operators); a
# mask of more runs than this is compared here instead, after the answer.
_MAX_MASK_RUNS = 8


def _bit_runs(mask: int) -> list[tuple[int, int]]:
    """The runs of adjacent set bits of `mask`, as (lowest bit, length): 0xE8 → [(3, 1),
    (5, 3)]."""
    runs: list[tuple[int, int]] = []
    bit = 0
    while mask >> bit:
        if mask >> bit & 1:
            length = 1
            while mask >> (bit + length) & 1:
                length += 1
            runs.append((bit, length))
            bit += length
        else:
            bit += 1
    return runs


def _compared(expression: str, where: ValueFilter) -> str:
    """`expression` keeping only the values `where` passes, as PromQL compares: a
    comparison without `bool` drops the series (the point) that fails."""
    if where.op is Comparison.HAS_ANY_BITS:
        runs = _bit_runs(int(where.limit))
        if len(runs) > _MAX_MASK_RUNS:
            return expression
        # Any bit of a run [lo, lo + n) set ⟺ floor(x / 2^lo) % 2^n > 0.
        tests = " or ".join(f"floor(({expression}) / {2 ** lo}) % {2 ** n} > 0"
                            for lo, n in runs)
        return f"({expression}) and ({tests})"
    return f"({expression}) {where.op.value} {where.limit!r}"


def _selections_by_gpu(names: str, filters: Filters, gpus: Sequence[str]) -> list[str]:
    """Selectors of `names` for `gpus`, as few as keep each within the engine's query
    length (a thousand GPUs' UUIDs do not fit in one matcher)."""
    selectors, chunk, size = [], [], 0
    for gpu in gpus:
        if chunk and size + len(gpu) + 1 > MAX_SELECTOR_CHARS // 2:
            selectors.append(_selection(names, {**filters, "gpu_uuid": chunk})[0])
            chunk, size = [], 0
        chunk.append(gpu)
        size += len(gpu) + 1
    if chunk:
        selectors.append(_selection(names, {**filters, "gpu_uuid": chunk})[0])
    return [s for s in selectors if s is not None]


def _percent_compared(selector: str, metric: str | None, filters: Filters, window_ms: int,
                      where: ValueFilter) -> str:
    """The series of `selector` whose latest value, as a percentage of the same unit's
    latest `where.percent_of`, passes `where`: the two latest values match on every label
    (the functions drop the metric names), as the DuckDB store matches them by unit."""
    if metric is None:
        raise InvalidInput("a value filter with percent_of needs a metric")
    total, _ = _selection(exposition_name(where.percent_of), filters)
    ratio = f"100 * last_over_time({selector}[{window_ms}ms]) / " \
            f"(last_over_time({total}[{window_ms}ms]) != 0)"
    return _compared(ratio, replace(where, percent_of=None))


def _increase_prefilter(where: ValueFilter | None) -> Callable[[str], str] | None:
    """For a one-row increase, the engine-side test that leaves out only series that cannot
    pass `where`: those whose `increase_prometheus` over the row is below a positive
    bar (resets handled as the fold here handles them). None: no safe narrowing."""
    if where is None or where.op not in (Comparison.GT, Comparison.GE) or where.limit < 0 \
            or (where.op is Comparison.GE and where.limit == 0):
        return None
    return lambda ranged: f"(increase_prometheus({ranged}) {where.op.value} {where.limit!r})"


def _union(parts: Mapping[str, str]) -> str:
    """One expression answering several: each part's series tagged by `label_replace`."""
    return " or ".join(f"label_replace({expression}, {_quote(PART_LABEL)}, {_quote(part)}, "
                       '"", "")' for part, expression in parts.items())


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _key(labels: Mapping[str, str]) -> tuple:
    return tuple(sorted(labels.items()))


def _instant_now_ms() -> int:
    """Now for an instant query whose window is counted back to a `since`: the next whole
    second. The engine takes an instant query's time to the second, and a window counted
    in ms back from a time it moved would start after `since` and miss a sample there."""
    return (int(time.time()) + 1) * 1000


def _seconds(ms: int) -> str:
    return f"{ms // 1000}.{ms % 1000:03d}"


def _check_label_names(names: Iterable[str]) -> None:
    for name in names:
        if not _LABEL_NAME.match(name) or name in RESERVED_LABELS:
            raise InvalidInput(f"not a label a query can name: {name!r}", code="invalid_label",
                               details={"label": name})


def _unavailable(what: str, url: str, status: int | None, reason: str
                 ) -> TelemetryStoreUnavailable:
    said = f"answered {status}" if status is not None else "could not be reached"
    return TelemetryStoreUnavailable(
        f"the telemetry engine {said} on {what}: {reason}".strip(),
        details={"url": url, "status": status})
