"""The telemetry store's protocol and its value types (docs/design.md, "Telemetry model"–§5).

A sample is (series, time, value). A series is keyed by the metric and the **unit** it
describes (`gpu_uuid`, and `mig_uuid` for a MIG instance) plus the metric's own extra labels
(`link`, `xid`); `node`, `environment` and `model` ride along as attributes of the series.
Ownership (allocation, project) is deliberately not a label: it changes over a unit's life
and lives in the state store's binding intervals, joined at query time by unit and time, so
a series stays one series however often its GPU is reallocated.

Times are epoch milliseconds inside the store; the API takes aware datetimes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from gpufleet.domain.errors import InvalidInput, Unavailable
from gpufleet.domain.telemetry.catalogue import metric as catalogue_metric
from gpufleet.domain.telemetry.vocabulary import AcrossSeries, Comparison, OverTime

# Labels a query may filter or group by besides a metric's extra labels.
UNIT_LABELS = ("gpu_uuid", "mig_uuid", "node", "environment", "model")
MINUTE_MS = 60_000
HOUR_MS = 3_600_000


class TelemetryStoreUnavailable(Unavailable):
    """The telemetry engine behind the store could not be reached, or did not accept a
    write (a non-2xx answer): nothing in the batch may be acknowledged, so the agent keeps
    it in its spool and sends it again."""

    default_code = "telemetry_store_unavailable"


class Tier(StrEnum):
    """Where a query reads: raw samples, 1-minute or 1-hour rollups."""

    RAW = "raw"
    MINUTE = "1m"
    HOUR = "1h"


@dataclass(frozen=True)
class Retention:
    """How long each tier keeps its rows (docs/design.md, "Telemetry model" defaults)."""

    raw: timedelta = timedelta(days=7)
    minute: timedelta = timedelta(days=30)
    hour: timedelta = timedelta(days=400)


@dataclass(frozen=True)
class SeriesLabels:
    """One series: its identity (`key`) and its attributes (node, environment, model).

    `labels` holds the metric's extra labels as sorted (name, value) pairs; use `series()`
    to build one from a dict.
    """

    metric: str
    gpu_uuid: str
    mig_uuid: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    node: str = ""
    environment: str = ""
    model: str = ""

    def __post_init__(self) -> None:
        # Ingest looks a series up 3–4 times per remote-write sample (the columns' index,
        # the store's id, the journal's new series): dataclass' own __hash__ builds and
        # hashes a 7-tuple each time, a Python call. Labels never change, so the hash is
        # worked out once (kept outside the fields: eq, repr and fields() are as before).
        object.__setattr__(self, "_hash", hash((self.metric, self.gpu_uuid, self.mig_uuid,
                                                self.labels, self.node, self.environment,
                                                self.model)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def key(self) -> tuple[str, str, str | None, tuple[tuple[str, str], ...]]:
        return (self.metric, self.gpu_uuid, self.mig_uuid, self.labels)

    def label(self, name: str) -> str | None:
        """The value of a unit label or an extra label; None where the series has none."""
        if name in UNIT_LABELS:
            return getattr(self, name)
        return dict(self.labels).get(name)


def series(metric: str, gpu_uuid: str, mig_uuid: str | None = None, *,
           labels: Mapping[str, str] | None = None, node: str = "", environment: str = "",
           model: str = "") -> SeriesLabels:
    return SeriesLabels(metric, gpu_uuid, mig_uuid, tuple(sorted((labels or {}).items())),
                        node, environment, model)


@dataclass(frozen=True)
class Sample:
    """One value of one series at one time; `value` None is "the source cannot say" and is
    never stored (docs/design.md, "Telemetry model")."""

    series: SeriesLabels
    at: datetime
    value: float | None


@dataclass(frozen=True)
class SampleColumns:
    """Many samples as parallel columns: sample `i` is `values[i]` of series
    `series[series_index[i]]` at `times_ms[i]`. Ingest builds these straight from an
    agent's columnar batch or a remote-write body, so a sample never becomes an object of
    its own on the hot path. Values are finite numbers; "cannot say" was left out."""

    series: Sequence[SeriesLabels]
    series_index: Sequence[int]  # a list, or a range where sample i is of series i
    times_ms: Sequence[int]  # a list, or a numpy int64 column (remote-write's steady body)
    values: Sequence[float]  # a list, or a numpy float64 column

    def __len__(self) -> int:
        return len(self.values)


def as_list(column: Sequence) -> Sequence:
    """A column as Python numbers: a numpy column converted whole, anything else as is."""
    tolist = getattr(column, "tolist", None)
    return column if tolist is None else tolist()


@dataclass(frozen=True)
class SeriesResult:
    """One answer series of `query_range`: the group's labels and its (time, value) points,
    each time the start of its step."""

    labels: dict[str, str | None]
    points: list[tuple[datetime, float]] = field(default_factory=list)


@dataclass(frozen=True)
class LatestValue:
    series: SeriesLabels
    at: datetime
    value: float


Filters = Mapping[str, Sequence[str | None]]


@dataclass(frozen=True)
class ValueFilter:
    """Answer only the values for which `value <op> limit` holds — what PromQL's `x > 85`
    does in the engine. An alert rule over 100,000 GPUs wants the handful over its
    threshold: compared where the data is, the other 99,990 answers are never built (as
    objects here, as JSON from a Prometheus engine)."""

    op: Comparison
    limit: float
    # `latest` only: the value compared is 100 × the value ÷ the same unit's latest value
    # of this metric in the same window (memory used as % of memory total); a unit without
    # one, or with 0, never passes. The answer still carries the metric's own value.
    percent_of: str | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.limit):
            raise InvalidInput(f"a value filter's limit must be a finite number, "
                               f"not {self.limit}")
        if self.op is Comparison.HAS_ANY_BITS and (self.limit != int(self.limit)
                                                     or not 0 < self.limit < 2**63):
            raise InvalidInput(f"has_any_bits takes a positive integer mask, not {self.limit}")

    def holds(self, value: float) -> bool:
        return self.op.holds(value, self.limit)

    def refuse_percent(self) -> None:
        """Range queries compare the value itself (a group's ratio is the caller's)."""
        if self.percent_of is not None:
            raise InvalidInput("a value filter with percent_of applies to latest values only")

    def sql(self, expression: str) -> str:
        """The condition in SQL (DuckDB) over `expression`."""
        if self.op is Comparison.HAS_ANY_BITS:
            return f"(CAST({expression} AS BIGINT) & {int(self.limit)}) <> 0"
        op = "=" if self.op is Comparison.EQ else "<>" if self.op is Comparison.NE \
            else self.op.value
        return f"{expression} {op} {self.limit!r}"


def filter_matcher(filters: Filters | None) -> Callable[[SeriesLabels], bool]:
    """Whether a series passes every filter: its label's value is one of the allowed ones,
    where "" and None both mean "the series has no such label" (a whole GPU's `mig_uuid`;
    a URL cannot say None, and a Prometheus engine cannot store an empty label)."""
    allowed = {name: {v or None for v in values} for name, values in (filters or {}).items()}
    return lambda labels: all((labels.label(name) or None) in values
                              for name, values in allowed.items())
OWNER_LABELS = ("allocation", "project")


@dataclass(frozen=True)
class Binding:
    """Who held a unit over [start, end) (`end` None: still held), as the state store's
    binding intervals say. A query given bindings attributes each bucket of a unit's series
    to the binding that covers the bucket's start."""

    start: datetime
    end: datetime | None
    allocation: str
    project: str
    # The interval in epoch ms, worked out once: a query at 100,000 GPUs reads 75,000.
    start_ms: int = field(init=False, compare=False, repr=False)
    end_ms: int | None = field(init=False, compare=False, repr=False)
    owner: tuple[str, str] = field(init=False, compare=False, repr=False)  # OWNER_LABELS'

    def __post_init__(self) -> None:
        object.__setattr__(self, "start_ms", to_ms(self.start))
        object.__setattr__(self, "end_ms", None if self.end is None else to_ms(self.end))
        object.__setattr__(self, "owner", (self.allocation, self.project))


# (gpu_uuid, mig_uuid) → the unit's bindings over the query window.
Bindings = Mapping[tuple[str, str | None], Sequence[Binding]]


class TelemetryStore(Protocol):
    """What the services need of a telemetry store, whatever engine is behind it."""

    def write(self, batch: Sequence[Sample]) -> int:
        """Store a batch atomically; returns how many samples were stored (None values are
        skipped). No upload key, so no replay detection: ingest writes through
        `write_columns`; this is for tools, benchmarks and tests that write samples."""
        ...

    def write_columns(self, batches: Sequence[tuple[str, SampleColumns]]) -> list[int | None]:
        """Store several keyed batches in one go (the ingest's group commit).

        A key names one upload (`node:batch_id`). A batch whose key the store already holds
        is a replay: it is skipped and answered None; each other batch is answered with
        the samples it stored. When this returns, everything answered is durable; when it
        raises, the caller must not acknowledge any of the batches."""
        ...

    def query_range(self, metric: str, start: datetime, end: datetime, step: timedelta, *,
                    filters: Filters | None = None, group_by: Sequence[str] = (),
                    over_time: OverTime | None = None, across: AcrossSeries | None = None,
                    tier: Tier | None = None, bindings: Bindings | None = None,
                    where: ValueFilter | None = None) -> list[SeriesResult]:
        """Values in [start, end) per step, aggregated over time per series and then across
        the series of each group, by the metric class's rules unless overridden.

        With `bindings`, only units' time under a binding counts, and `allocation` /
        `project` can be filtered and grouped by like labels. With `where`, only the points
        whose (aggregated) value passes it are answered, and groups left with none are not."""
        ...

    def latest(self, filters: Filters | None = None, *, metric: str | None = None,
               since: datetime | None = None,
               where: ValueFilter | None = None) -> list[LatestValue]:
        """The latest stored value of every matching series (at or after `since`); with
        `where`, only the series whose latest value passes it."""
        ...

    def latest_of_units(self, metric: str, units: Collection[tuple[str, str | None]],
                        since: datetime) -> dict[tuple[str, str | None], float]:
        """Each of `units`' latest value of `metric` at or after `since`, by (gpu_uuid,
        mig_uuid); a unit with several such series (it moved node) answers its newest
        sample's (`newest_of_units`). The idle list's memory read: thousands of units,
        answered without a `LatestValue` per series."""
        ...

    def rollup(self, until: datetime) -> None:
        """Fold every closed minute and hour before `until` into the rollup tiers."""
        ...

    def apply_retention(self, now: datetime) -> None:
        """Drop rows older than each tier keeps (raw rows only once rolled up)."""
        ...

    def close(self) -> None: ...


def newest_of_units(found: Iterable[tuple[tuple[str, str | None], int, float]],
                    units: Collection[tuple[str, str | None]]
                    ) -> dict[tuple[str, str | None], float]:
    """`latest_of_units`' rule, the same on every store: per unit of `units`, the value of
    its newest (unit, time ms, value); at the same time, the larger value."""
    wanted = set(units)
    newest: dict[tuple[str, str | None], tuple[int, float]] = {}
    for unit, at_ms, value in found:
        if unit in wanted and (unit not in newest or (at_ms, value) > newest[unit]):
            newest[unit] = (at_ms, value)
    return {unit: value for unit, (_, value) in newest.items()}


def to_ms(at: datetime) -> int:
    if at.tzinfo is None:
        raise InvalidInput("telemetry times must be timezone-aware", code="naive_time")
    return int(at.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def choose_tier(step: timedelta, start: datetime, end: datetime,
                retention: Retention = Retention()) -> Tier:
    """Raw below a 1-minute step, 1-minute rollups below a 1-hour step, else 1-hour rollups;
    a coarser tier where the window reaches back past what the finer tier keeps."""
    if step < timedelta(minutes=1) and end - start <= retention.raw:
        return Tier.RAW
    if step < timedelta(hours=1) and end - start <= retention.minute:
        return Tier.MINUTE
    return Tier.HOUR


def aggregation_of(metric: str, start: datetime, end: datetime, step: timedelta,
                   over_time: OverTime | None,
                   across: AcrossSeries | None) -> tuple[OverTime, AcrossSeries]:
    """What a range query aggregates by: the metric class's rules unless overridden. Refuses
    (InvalidInput) an empty window, a step that is not positive, a metric not catalogued."""
    if step <= timedelta(0) or end <= start:
        raise InvalidInput("a range query needs start < end and a positive step",
                           code="invalid_range")
    aggregation = catalogue_metric(metric).aggregation
    return (OverTime(over_time or aggregation.over_time),
            AcrossSeries(across or aggregation.across_series))
