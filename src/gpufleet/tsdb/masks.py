"""What the funnel and the idle lists ask of a telemetry store that can answer them in
aggregate: per-unit minute masks (DESIGN.md §3), and per-series minute counts.

Only the embedded store offers these (`DuckDBTelemetryStore.minute_masks`,
`series_minutes`; duckdb_masks.py); a store without them (the Prometheus-compatible one)
is not a `MaskStore`, and the services answer 503 `telemetry_query_unsupported`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

from gpufleet.domain.telemetry.funnel import Thresholds
from gpufleet.tsdb.protocol import SeriesLabels

UnitKey = tuple[str, str | None]  # (gpu_uuid, mig_uuid)


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


class MinuteMasks(Protocol):
    def refresh(self) -> int:
        """Fold what the store has rolled up since; returns that bound (ms). Ask once per
        question and pass the bound to the questions, so they agree on it."""

    def tallies(self, spans: Sequence[SlotSpan], lo_ms: int, hi_ms: int, done_ms: int, *,
                last_active: bool = False) -> dict[int, Tally]:
        """Per group: weighted active / effective / known minutes and the sm_active sum over
        the spans' minutes in [lo, min(hi, done)) (and, asked for, the last active minute)."""

    def reporting_minutes(self, by: Sequence[str], lo_ms: int, hi_ms: int,
                          done_ms: int) -> dict[tuple, int]:
        """Per group of GPUs (by environment / model / node, as their series say): the
        GPU-minutes in [lo, min(hi, done)) in which a GPU sent any signal."""


@runtime_checkable
class MaskStore(Protocol):
    def minute_masks(self, thresholds: Thresholds) -> MinuteMasks: ...

    def series_minutes(self, chosen: Sequence[SeriesLabels], lo_ms: int, hi_ms: int,
                       above: float) -> dict[SeriesLabels, tuple[int, int, int | None]]:
        """Per series: rolled-up minutes in [lo, hi) with a value, minutes whose mean is
        above `above`, and the first such minute."""
