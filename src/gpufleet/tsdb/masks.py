"""What the funnel and the idle lists ask of a telemetry store that can answer them in aggregate:
per-unit minute masks (docs/design.md, "Funnel and activity"), and per-series minute counts.

Both stores offer them: the embedded one folds its 1-minute rollups in SQL
(duckdb_masks.py), the Prometheus-compatible one folds the engine's 1-minute means in
Python (prometheus_masks.py). The two share the signals' roles (`signal_role`, from the
domain's `activity_signal`) and how a minute's activity is judged from them. A store
without them is not a `MaskStore`, and the services answer 503
`telemetry_query_unsupported`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from gpufleet.domain.telemetry.funnel import (
    SM_ACTIVE,
    ActivitySignal,
    Thresholds,
    activity_signal,
    architecture_of_model,
)
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, SeriesLabels

UnitKey = tuple[str, str | None]  # (gpu_uuid, mig_uuid)

# What a series stands for in its unit's masks: `GR` gpu.gr_engine_active and `UTIL`
# gpu.utilization (whole GPUs) give activity, the first one present in each minute wins;
# for MIG instances of Ampere (or unknown) models, `PMEM` (the instance's own used memory:
# it reported) and `PROC` (any process on it) stand in for activity in minutes without
# either; `SM` gpu.sm_active gives effective minutes and the efficiency sum.
GR, UTIL, SM, PMEM, PROC = range(5)
_ROLES = {ActivitySignal.GR_ENGINE: GR, ActivitySignal.UTILIZATION: UTIL,
          ActivitySignal.REPORTED: PMEM, ActivitySignal.RUNNING: PROC}


def signal_role(metric: str, mig_uuid: str | None, model: str) -> int | None:
    """The role of a series of `metric` on a unit of `model` in the masks; None for one
    that plays none."""
    if metric == SM_ACTIVE:
        return SM
    signal = activity_signal(metric, is_mig=mig_uuid is not None,
                             architecture=architecture_of_model(model))
    return None if signal is None else _ROLES[signal]


def steps_fit_hours(step_ms: int) -> bool:
    """Steps a store can count from its hour masks alone (`step_tallies`): whole hours, or
    whole minutes that divide an hour (so a step never straddles two hours' masks)."""
    return step_ms % HOUR_MS == 0 or (step_ms % MINUTE_MS == 0 and HOUR_MS % step_ms == 0)


class Tally(NamedTuple):
    """Weighted minute counts of one group (weight × minutes). A named tuple, not a
    dataclass: a question at 100,000 GPUs makes one per binding."""

    active: float = 0.0
    effective: float = 0.0
    known: float = 0.0
    sm_percent: float = 0.0  # Σ weight × sm_active% over the minutes (hour mean inside)
    last_active_ms: int | None = None


class SlotSpan(NamedTuple):
    """One binding's part of the question: a unit over [lo_ms, hi_ms), in group `group`."""

    unit: UnitKey
    lo_ms: int
    hi_ms: int
    group: int
    weight: float


class SpanColumns(Sequence[SlotSpan]):
    """Many spans as parallel columns. A question at 100,000 GPUs passes 75,000: as that many
    `SlotSpan`s they outlive a few young collections, are promoted, and trigger a full
    collection of the process's heap (~0.3 s there) nearly every question; five lists do
    not. Reads as a sequence of `SlotSpan` where a store wants one span at a time."""

    __slots__ = ("groups", "hi_ms", "lo_ms", "units", "weights")

    def __init__(self) -> None:
        self.units: list[UnitKey] = []
        self.lo_ms: list[int] = []
        self.hi_ms: list[int] = []
        self.groups: list[int] = []
        self.weights: list[float] = []

    @classmethod
    def of(cls, spans: Sequence[SlotSpan]) -> SpanColumns:
        """The spans as columns: themselves where they already are."""
        if isinstance(spans, SpanColumns):
            return spans
        columns = cls()
        for span in spans:
            columns.append(*span)
        return columns

    def append(self, unit: UnitKey, lo_ms: int, hi_ms: int, group: int,
               weight: float) -> None:
        self.units.append(unit)
        self.lo_ms.append(lo_ms)
        self.hi_ms.append(hi_ms)
        self.groups.append(group)
        self.weights.append(weight)

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, n):  # Sequence's: an int gives a span (slices are not needed)
        return SlotSpan(self.units[n], self.lo_ms[n], self.hi_ms[n], self.groups[n],
                        self.weights[n])

    def __iter__(self) -> Iterator[SlotSpan]:
        return map(SlotSpan, self.units, self.lo_ms, self.hi_ms, self.groups, self.weights)


class TallyRows(Mapping[int, Tally]):
    """Tallies per group kept as the engine's rows (plain tuples of numbers, which the
    garbage collector stops tracking), each made a `Tally` when asked for: the idle list
    asks for one per binding, 75,000 at 100,000 GPUs (see `SpanColumns`)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: Sequence[tuple]):
        self._rows = {row[0]: row for row in rows}  # (group, *Tally's fields)

    def __getitem__(self, group: int) -> Tally:
        return Tally._make(self._rows[group][1:])

    def get(self, group: int, default: Tally | None = None) -> Tally | None:
        row = self._rows.get(group)  # Mapping's own get goes through KeyError
        return default if row is None else Tally._make(row[1:])

    def __contains__(self, group: object) -> bool:
        return group in self._rows

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


class MinuteMasks(Protocol):
    def refresh(self) -> int:
        """Fold what the store has rolled up since; returns that bound (ms). Ask once per
        question and pass the bound to the questions, so they agree on it."""

    def tallies(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int, done_ms: int, *,
                last_active: bool = False) -> Mapping[int, Tally]:
        """Per group: weighted active / effective / known minutes and the sm_active sum over
        the spans' minutes in [lo, min(hi, done)) (and, asked for, the last active minute).
        `spans` may be `SpanColumns` (the services pass them so)."""

    def active_known(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int,
                     done_ms: int) -> dict[int, tuple[float, float]]:
        """Per group: (weighted active minutes, weighted known minutes) over the spans'
        minutes in [lo, min(hi, done)), for the groups `tallies` answers; equal to
        `tallies(...)[group]`'s `active` and `known`. The idle list's window asks only
        these, so the effective minutes and the sm_active sum (and the masks they read)
        are not counted for every binding of the fleet."""

    def last_active_minutes(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int,
                            done_ms: int) -> dict[int, int]:
        """Per group: the start (ms) of the last minute judged active among the spans'
        minutes in [lo, min(hi, done)); a group with none is left out. The idle list's 24 h
        look-back asks only this, so it need not count the four sums of `tallies` (nor read
        the masks they need) over 24 hours of every candidate; equal to `tallies(...,
        last_active=True)[group].last_active_ms`."""

    def reporting_minutes(self, by: Sequence[str], lo_ms: int, hi_ms: int,
                          done_ms: int) -> dict[tuple, int]:
        """Per group of GPUs (by environment / model / node, as their series say): the
        GPU-minutes in [lo, min(hi, done)) in which a GPU sent any signal."""


@runtime_checkable
class RecordedInEngine(Protocol):
    """Minute masks a shared engine computes and keeps (VictoriaMetrics:
    prometheus_masks.py): the upkeep loop refreshes them less often in a quiet spell (the
    engine's cost of a refresh follows the fleet's series, not the minutes), and the
    leader replica records their closed hours in the engine for the other replicas."""

    def upkeep_refresh(self) -> int | None:
        """The upkeep loop's refresh; None where a quiet spell skipped it."""

    def record_closed_hours(self) -> int:
        """Record the closed hours not recorded yet; returns how many were."""


@runtime_checkable
class UnitMemory(Protocol):
    """Minute masks that keep each unit's latest memory_used beside them (the engine's:
    prometheus_masks.py), so the idle list reads its candidates' memory without asking the
    store for a fleet's series."""

    def unit_memory(self, units: Iterable[UnitKey], fresh_ms: int) -> dict[UnitKey, float]:
        """Per unit of `units` with one: the value of its newest memory_used sample no
        older than `fresh_ms` before the masks' judged minutes' end."""


@runtime_checkable
class MaskStore(Protocol):
    def minute_masks(self, thresholds: Thresholds) -> MinuteMasks: ...

    def series_minutes(self, chosen: Sequence[SeriesLabels], lo_ms: int, hi_ms: int,
                       above: float) -> dict[SeriesLabels, tuple[int, int, int | None]]:
        """Per series: rolled-up minutes in [lo, hi) with a value, minutes whose mean is
        above `above`, and the first such minute."""
