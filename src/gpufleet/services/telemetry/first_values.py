"""Counters their reader starts at zero (`COUNTED_FROM_READER_START`: an XID code's series is
born at its first event): a series first seen inside a window rose from 0 to its first value
there, which a store's increase cannot see (it has no sample before the first to rise from).

The health rules (services/operations/rule_evaluation.py) and range queries (queries.py) both
ask `seen_before` which series are not new; range queries add each new series' first value
to the step of its first sample (`count_first_values`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta

from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, OverTime
from gpufleet.tsdb import SeriesResult, TelemetryStore
from gpufleet.tsdb.protocol import Bindings, Filters
from gpufleet.tsdb.rollups import combine_across

# How far before the window a series must have been seen for its first value inside the
# window not to count as new (a node silent for longer looks like a reader restart).
SEEN_BEFORE = timedelta(hours=1)

Key = tuple[str | None, ...]


def series_names(metric: str) -> tuple[str, ...]:
    """The labels that tell one series of `metric` from another."""
    return ("gpu_uuid", "mig_uuid", *catalogue_metric(metric).labels)


def series_key(labels: Mapping[str, str | None], names: Sequence[str]) -> Key:
    """A series' identity by `names` ("" and None alike: a whole GPU has no mig_uuid)."""
    return tuple(labels.get(n) or None for n in names)


def seen_before(store: TelemetryStore, metric: str, start: datetime, gpus: Iterable[str],
                names: Sequence[str]) -> set[Key]:
    """The series of `metric` on `gpus` (keyed by `names`) with a sample in the
    SEEN_BEFORE before `start`: their first value inside a window from `start` is not new."""
    gpus = sorted(set(gpus))
    if not gpus:
        return set()
    return {series_key(r.labels, names) for r in store.query_range(
        metric, start - SEEN_BEFORE, start, SEEN_BEFORE, filters={"gpu_uuid": gpus},
        group_by=list(names), over_time=OverTime.LAST, across=AcrossSeries.MAX)}


def count_first_values(store: TelemetryStore, metric: str, increases: list[SeriesResult],
                       start: datetime, end: datetime, step: timedelta, *, by: Sequence[str],
                       filters: Filters | None, bindings: Bindings | None) -> list[SeriesResult]:
    """`increases`: the store's per-step increase of each series of a counter its reader
    starts at zero, grouped by `by` and `series_names`, over [start, end). Each series first
    seen inside the window gets its first value added in the step of its first sample (its
    last value there less the store's increase there: no reset inside that step is assumed;
    a negative difference adds nothing); then the series are summed per `by`.

    With `bindings`, a new series' first value goes to the one group that held its unit at
    its first sample's step (of several, the one whose first value there is lowest: later
    holders start from higher values), and to none where nobody visible held it then."""
    names = series_names(metric)
    grouping = [*by, *(n for n in names if n not in by)]
    lasts = store.query_range(metric, start, end, step, filters=filters, group_by=grouping,
                              over_time=OverTime.LAST, across=AcrossSeries.MAX,
                              bindings=bindings)
    old = seen_before(store, metric, start, (r.labels["gpu_uuid"] for r in lasts
                                             if r.labels.get("gpu_uuid")), names)
    new = [r for r in lasts if r.points and series_key(r.labels, names) not in old]
    births = _first_steps(store, metric, start, end, step, new, names) \
        if bindings is not None and new else None
    inc = {tuple(r.labels.get(n) for n in grouping): dict(r.points) for r in increases}
    credited: dict[Key, tuple[float, tuple, datetime]] = {}  # series → (first value, row, at)
    for r in new:
        at, last = r.points[0]
        key = series_key(r.labels, names)
        if births is not None and births.get(key) != at:
            continue  # its first sample fell outside the visible holders' time
        row = tuple(r.labels.get(n) for n in grouping)
        first = last - inc.get(row, {}).get(at, 0.0)
        if first > 0 and (key not in credited or first < credited[key][0]):
            credited[key] = (first, row, at)
    for first, row, at in credited.values():
        points = inc.setdefault(row, {})
        points[at] = points.get(at, 0.0) + first
    return _summed(inc, grouping, list(by))


def _first_steps(store: TelemetryStore, metric: str, start: datetime, end: datetime,
                 step: timedelta, rows: list[SeriesResult],
                 names: Sequence[str]) -> dict[Key, datetime]:
    """Each series' first step with a sample, whoever held its unit then."""
    gpus = sorted({r.labels["gpu_uuid"] for r in rows if r.labels.get("gpu_uuid")})
    return {series_key(r.labels, names): r.points[0][0] for r in store.query_range(
        metric, start, end, step, filters={"gpu_uuid": gpus}, group_by=list(names),
        over_time=OverTime.LAST, across=AcrossSeries.MAX) if r.points}


def _summed(rows: dict[tuple, dict[datetime, float]], grouping: list[str],
            by: list[str]) -> list[SeriesResult]:
    """Per-series points summed per group of `by` (a counter's increase adds across series),
    groups in the order first met."""
    groups: dict[tuple, dict[datetime, list[float]]] = {}
    for row, points in rows.items():
        key = tuple(v for n, v in zip(grouping, row, strict=True) if n in by)
        group = groups.setdefault(key, {})
        for at, value in points.items():
            group.setdefault(at, []).append(value)
    return [SeriesResult(dict(zip(by, key, strict=True)),
                         [(at, combine_across(vs, AcrossSeries.SUM))
                          for at, vs in sorted(points.items())])
            for key, points in groups.items()]
