"""An agent's telemetry batch as store columns, each bad sample dropped and counted.

A batch as a whole is checked by the ingest service (who sent it, for which node's GPUs);
here each sample is. One bad sample must not cost the node its whole upload, so a sample
that cannot be stored is left out and counted under a reason the acknowledgement and the
server's metrics report:

  unknown_metric  the metric is not in the catalogue
  unknown_label   a label the metric does not have (a `link` on a metric without links)
  wrong_scope     a process metric as a unit series, or a device-only metric on a MIG unit
                  (but an event the instance was named in: catalogue.MIG_ATTRIBUTED)
  not_finite      NaN or ±inf
  out_of_range    impossible in the metric's unit: a percentage outside 0–100, a negative
                  byte count, a flag that is not 0 or 1 — a source's sentinel, or a value
                  in the wrong unit
  too_old         older than the server keeps raw samples (`telemetry_max_sample_age_s`)
  in_future       ahead of the server's clock (`telemetry_max_sample_future_s`): a node
                  whose clock is wrong
  repeated_time   a second value of one series at one time in one upload (a tick time
                  repeated, a series or process row sent twice): the first value present
                  is kept, as remote-write keeps the first — a store must never hold two
                  samples of a series at one instant, which aggregates would count twice

The hot path works a row (one series over the batch's ticks) at a time with C-level list
operations; only a row that fails a check is looked at sample by sample. The pieces
(`ColumnsBuilder`, `node_series_labels`, `unit_series_problem`, `row_window`) are public:
the remote-write receiver builds its columns with the same checks.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpufleet.domain.telemetry.catalogue import MIG_ATTRIBUTED
from gpufleet.domain.telemetry.catalogue import find as find_metric
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.metric import Metric
from gpufleet.domain.telemetry.vocabulary import Scope, Unit
from gpufleet.services.inventory.node_units import NodeUnits
from gpufleet.tsdb import SampleColumns, SeriesLabels, series
from gpufleet.wire.telemetry_batch import CLAIM_FIELDS, TelemetryBatch

_PERCENT_SLACK = 1e-6  # a 0–1 ratio × 100 may land a hair above 100
CLAIMED_METRIC = "gpu.workload_claimed"
# Process series come and go with pids: the per-node cache of series labels stops growing
# here, and later series are built per upload.
MAX_KNOWN_SERIES_PER_NODE = 20_000
PROCESS_LABELS = ("container", "pod", "namespace", "slurm_job", "claimed_allocation")


@dataclass(frozen=True)
class TimeWindow:
    """Sample times the store accepts, epoch milliseconds, both ends included."""

    oldest_ms: int
    newest_ms: int


def _range_of(unit: Unit) -> tuple[float, float]:
    if unit is Unit.PERCENT:
        return 0.0, 100.0 + _PERCENT_SLACK
    if unit is Unit.BOOLEAN:
        return 0.0, 1.0
    if unit is Unit.CELSIUS:
        return -273.15, 1000.0  # sentinels (0x7FFFFFFF) and garbage fall outside
    return 0.0, math.inf


_RANGES = {unit: _range_of(unit) for unit in Unit}
_RANGES_BY_METRIC: dict[str, tuple[float, float]] = {}


def range_of(metric: Metric) -> tuple[float, float]:
    """The values `metric`'s unit allows, both ends included (kept by name: a `Unit` key
    would hash through Enum.__hash__, a Python call each time)."""
    low_high = _RANGES_BY_METRIC.get(metric.name)
    if low_high is None:
        low_high = _RANGES_BY_METRIC[metric.name] = _RANGES[metric.unit]
    return low_high


class ColumnsBuilder:
    """SampleColumns under construction, with the drop counts."""

    def __init__(self) -> None:
        self.series: list[SeriesLabels] = []
        self._index: dict[SeriesLabels, int] = {}
        self.series_index: list[int] = []
        self.times_ms: list[int] = []
        self.values: list[float] = []
        self.dropped: Counter[str] = Counter()
        # Where each series' samples lie in the columns ([start, end) per row appended), so
        # a second row of a series is checked against the first's times alone.
        self._spans: list[list[tuple[int, int]]] = []
        self.times_may_repeat = False  # set when one row's own times may repeat

    def row(self, labels: SeriesLabels, metric: Metric, times_ms: Sequence[int],
            values: Sequence[float | None], window: TimeWindow | None) -> None:
        """One series over the batch's ticks; None entries are "cannot say", not drops.
        `window` None: every one of `times_ms` is known to be inside the window."""
        present = [v for v in values if v is not None]
        if not present:
            return
        if len(present) == len(values):
            kept_times = times_ms
        else:
            kept_times = [t for t, v in zip(times_ms, values, strict=True) if v is not None]
        low, high = _RANGES[metric.unit]
        # sum() is NaN or ±inf when any value is (or when huge ones overflow: then the slow
        # path looks at each); the times were checked for the whole batch when `window`
        # is None.
        clean = (math.isfinite(sum(present)) and min(present) >= low and max(present) <= high
                 and (window is None or (min(kept_times) >= window.oldest_ms
                                         and max(kept_times) <= window.newest_ms)))
        if not clean:
            kept_times, present = self._sift(kept_times, present, low, high, window)
            if not present:
                return
        self._append(labels, kept_times, present)

    def one(self, labels: SeriesLabels, metric: Metric, t: int, v: float | None,
            window: TimeWindow | None) -> None:
        """`row` of a single sample, without a row's list work (remote-write sends one
        sample per series entry)."""
        if v is None:
            return
        low, high = range_of(metric)
        self._one_in(labels, low, high, t, v, window)

    def _one_in(self, labels: SeriesLabels, low: float, high: float, t: int, v: float,
                window: TimeWindow | None) -> None:
        reason = sample_problem(t, v, low, high, window)
        if reason is not None:
            self.dropped[reason] += 1
            return
        if self.times_may_repeat or labels in self._index:
            self._append(labels, [t], [float(v)])
            return
        # A series' first sample (what remote-write sends): nothing to repeat, so no lists
        # of one and no span search; `_append` does the same.
        index = self._index[labels] = len(self.series)
        self.series.append(labels)
        start = len(self.values)
        self._spans.append([(start, start + 1)])
        self.series_index.append(index)
        self.times_ms.append(t)
        self.values.append(float(v))

    def firsts(self, labels: Sequence[SeriesLabels], ranges: Sequence[tuple[float, float]],
               times_ms: Sequence[int], values: Sequence[float],
               window: TimeWindow | None) -> None:
        """`one` of each (labels, range, t, v), in order, with the per-sample Python work done
        as numpy passes when every sample is storable and each series is new to the columns
        (a remote-write body's steady state: thousands of series of one sample each); any
        other case goes through `one`, sample by sample, for the same answer."""
        if not labels:
            return
        checked = np.asarray(values, dtype=np.float64)
        lows, highs = np.array(ranges, dtype=np.float64).T
        with np.errstate(invalid="ignore"):
            storable = bool((np.isfinite(checked) & (checked >= lows) & (checked <= highs))
                            .all())
        if (storable and not self.times_may_repeat
                and (window is None or (min(times_ms) >= window.oldest_ms
                                        and max(times_ms) <= window.newest_ms))
                and len(set(labels)) == len(labels) and self._index.keys().isdisjoint(labels)):
            first_series, start = len(self.series), len(self.values)
            indexes = range(first_series, first_series + len(labels))
            self._index.update(zip(labels, indexes, strict=True))
            self.series.extend(labels)
            self._spans.extend([(at, at + 1)] for at in range(start, start + len(labels)))
            self.series_index.extend(indexes)
            self.times_ms.extend(times_ms)
            self.values.extend(checked.tolist())
            return
        for series_labels, (low, high), t, v in zip(labels, ranges, times_ms, values,
                                                    strict=True):
            self._one_in(series_labels, low, high, t, v, window)

    def _append(self, labels: SeriesLabels, times_ms: Sequence[int],
                values: Sequence[float]) -> None:
        """Add a row's kept samples, each (series, time) once: a repeat of a time the series
        already has (or had earlier in this row) is dropped as `repeated_time`."""
        index = self._index.get(labels)
        if index is None:
            index = self._index[labels] = len(self.series)
            self.series.append(labels)
            self._spans.append([])
            if self.times_may_repeat:
                times_ms, values = self._first_at_each_time((), times_ms, values)
        else:
            times_ms, values = self._first_at_each_time(self._spans[index], times_ms, values)
        start = len(self.values)
        self._spans[index].append((start, start + len(values)))
        self.series_index.extend([index] * len(values))
        self.times_ms.extend(times_ms)
        self.values.extend(values)

    def _first_at_each_time(self, spans: Iterable[tuple[int, int]], times_ms: Sequence[int],
                            values: Sequence[float]) -> tuple[list[int], list[float]]:
        seen = {t for start, end in spans for t in self.times_ms[start:end]}
        kept_times, kept = [], []
        for t, v in zip(times_ms, values, strict=True):
            if t in seen:
                self.dropped["repeated_time"] += 1
            else:
                seen.add(t)
                kept_times.append(t)
                kept.append(v)
        return kept_times, kept

    def _sift(self, times_ms: Sequence[int], values: Sequence[float], low: float,
              high: float, window: TimeWindow | None) -> tuple[list[int], list[float]]:
        kept_times, kept = [], []
        for t, v in zip(times_ms, values, strict=True):
            reason = sample_problem(t, v, low, high, window)
            if reason is None:
                kept_times.append(t)
                kept.append(float(v))
            else:
                self.dropped[reason] += 1
        return kept_times, kept

    def drop(self, reason: str, values: Iterable[float | None]) -> None:
        """Count `values` (their None entries are not samples) as dropped for `reason`."""
        self.dropped[reason] += sum(1 for v in values if v is not None)

    def result(self) -> SampleColumns:
        return SampleColumns(self.series, self.series_index, self.times_ms, self.values)


def sample_problem(t: int, v: float, low: float, high: float,
                   window: TimeWindow | None) -> str | None:
    """Why one sample cannot be stored (a reason above), or None; `window` None: `t` is
    known to be inside it."""
    if window is not None and not window.oldest_ms <= t <= window.newest_ms:
        return "too_old" if t < window.oldest_ms else "in_future"
    if not math.isfinite(v):
        return "not_finite"
    if not low <= v <= high:
        return "out_of_range"
    return None


def row_window(times_ms: Sequence[int], window: TimeWindow) -> TimeWindow | None:
    """The window a row must check its times against: None when every one of `times_ms`
    is inside it (checked once per batch, not per series, in the usual case)."""
    return None if (min(times_ms) >= window.oldest_ms
                    and max(times_ms) <= window.newest_ms) else window


def node_series_labels(units: NodeUnits, metric: str, gpu_uuid: str, mig_uuid: str | None,
                       extra: dict[str, str]) -> SeriesLabels:
    """The store's labels of one of the node's series, from the node's cache (a node sends
    the same series in every upload). `gpu_uuid` must be one of `units`' GPUs."""
    # A MIG instance's profile is not a label: the inventory knows it by the MIG UUID,
    # and a series' extra labels are the metric's own (link, xid) or a process's.
    key = (metric, gpu_uuid, mig_uuid, *extra.items()) if extra else \
        (metric, gpu_uuid, mig_uuid)
    return node_series_labels_keyed(units, key, metric, gpu_uuid, mig_uuid, extra)


def node_series_labels_keyed(units: NodeUnits, key: tuple, metric: str, gpu_uuid: str,
                             mig_uuid: str | None, extra: dict[str, str]) -> SeriesLabels:
    """`node_series_labels` with its cache key made by the caller (the remote-write
    receiver keeps it with each series): (metric, gpu_uuid, mig_uuid, *extra.items())."""
    known = units.series_labels
    labels = known.get(key)
    if labels is None:
        environment, model = units.gpus[gpu_uuid]
        labels = series(metric, gpu_uuid, mig_uuid, labels=extra, node=units.node,
                        environment=environment, model=model)
        if len(known) < MAX_KNOWN_SERIES_PER_NODE:
            known[key] = labels
    return labels


def batch_columns(batch: TelemetryBatch, units: NodeUnits,
                  window: TimeWindow) -> tuple[SampleColumns, Counter[str]]:
    """The batch's storable samples, and how many were dropped by reason. Every unit the
    batch names must be one of `units` (the caller checks that first)."""
    out = ColumnsBuilder()
    times = batch.times_ms
    out.times_may_repeat = len(set(times)) < len(times)
    times_window = row_window(times, window)

    def labels_for(metric: str, gpu_uuid: str, mig_uuid: str | None,
                   extra: dict[str, str]) -> SeriesLabels:
        return node_series_labels(units, metric, gpu_uuid, mig_uuid, extra)

    for key, row in zip(batch.series, batch.values, strict=True):
        metric = find_metric(key.metric)
        reason = unit_series_problem(metric, key.mig_uuid, key.labels)
        if reason is not None:
            out.drop(reason, row)
            continue
        out.row(labels_for(key.metric, key.gpu_uuid, key.mig_uuid, key.labels), metric, times,
                row, times_window)
    for process in batch.processes:
        extra = {"pid": str(process.pid)}
        if process.name:
            extra["process_name"] = process.name
        extra |= {f: getattr(process, f) for f in PROCESS_LABELS if getattr(process, f)}
        extra |= {f"tag.{k}": v for k, v in process.tags.items()}
        at = [times[process.tick]]
        for name, value in process.values.items():
            metric = find_metric(name)
            if metric is None or Scope.PROCESS not in metric.scopes:
                out.drop("unknown_metric" if metric is None else "wrong_scope", [value])
                continue
            out.row(labels_for(name, process.gpu_uuid, process.mig_uuid, extra), metric, at,
                    [value], window)
    claimed = catalogue_metric(CLAIMED_METRIC)
    for claim in batch.unit_claims:
        extra = {f: getattr(claim, f) for f in CLAIM_FIELDS if getattr(claim, f)}
        out.row(labels_for(CLAIMED_METRIC, claim.gpu_uuid, claim.mig_uuid, extra), claimed,
                [times[claim.tick]], [1.0], window)
    return out.result(), out.dropped


def unit_series_problem(metric: Metric | None, mig_uuid: str | None,
                        labels: dict[str, str]) -> str | None:
    """Why a unit's series cannot be stored at all (unknown_metric, wrong_scope,
    unknown_label), or None."""
    if metric is None:
        return "unknown_metric"
    if Scope.PROCESS in metric.scopes or (mig_uuid is not None and not metric.per_mig
                                          and metric.name not in MIG_ATTRIBUTED):
        return "wrong_scope"
    if labels and not set(labels) <= set(metric.labels):
        return "unknown_label"
    return None


def units_named(batch: TelemetryBatch) -> set[str]:
    """Every GPU the batch has data for (MIG instances by their parent GPU)."""
    return ({key.gpu_uuid for key in batch.series}
            | {p.gpu_uuid for p in batch.processes}
            | {c.gpu_uuid for c in batch.unit_claims})
