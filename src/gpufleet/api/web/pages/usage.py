"""What the Fleet, Environment and Project pages share: a funnel row's trend drawn as GPUs
held, the usage figures read from the same row, and the step the trend is asked in
(docs/dashboard.md, "Usage duration"). Every figure is the service's; this only divides
GPU-hours by hours."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup

from gpufleet.api.web.charts import Series, line_chart
from gpufleet.api.web.page import templates, ui_url
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.durations import parse_duration
from gpufleet.wire.telemetry_queries import FunnelRow, FunnelView

NICE_STEPS = ("1m", "2m", "5m", "10m", "15m", "30m", "1h", "2h", "3h", "6h", "12h", "1d",
              "2d", "7d")
TREND_POINTS = 48  # enough to see a day's shape at half-hour steps
IDLE_SHOWN = 20


def trend_step(window: str) -> str | None:
    """The roundest step cutting `window` into at most TREND_POINTS steps; None for a bad
    window (the funnel's own call then names it, as the API would)."""
    try:
        span = parse_duration(window, name="window")
    except InvalidInput:
        return None
    return next((s for s in NICE_STEPS if span / parse_duration(s) <= TREND_POINTS),
                NICE_STEPS[-1])


def row_of(view: FunnelView, **group: str) -> FunnelRow | None:
    """The row of one group (`environment="onprem"`), None when it held nothing."""
    return next((row for row in view.rows if row.group == group), None)


@dataclass(frozen=True)
class Usage:
    """One funnel row read for a page: averages over the window and its allocations."""

    gpus_held: float
    active_percent: float | None
    efficiency_percent: float | None
    allocated_gpu_hours: float
    allocations: int | None
    mean_held_hours: float | None
    gpu_hours_per_allocation: float | None


def usage(view: FunnelView, row: FunnelRow) -> Usage:
    window_h = (view.window_end - view.window_start).total_seconds() / 3600
    allocated = row.allocated_gpu_hours
    count = row.allocations
    return Usage(
        gpus_held=allocated / window_h if window_h else 0.0,
        active_percent=100 * row.active_gpu_hours / allocated if allocated else None,
        efficiency_percent=row.efficiency_percent,
        allocated_gpu_hours=allocated, allocations=count,
        mean_held_hours=row.allocation_held_hours / count if count else None,
        gpu_hours_per_allocation=allocated / count if count else None)


def trend_chart(title: str, view: FunnelView, row: FunnelRow | None) -> Markup:
    """GPUs held, active and effective per step: each step's GPU-hours over its hours (the
    last step may be cut short at the window's end)."""
    points = row.trend if row is not None and row.trend else []
    ends = [p.start for p in points[1:]] + [view.window_end] * bool(points)

    def series(label: str, key: str) -> Series:
        return Series(label, [(p.start, _per_hour(getattr(p, key), p.start, end))
                              for p, end in zip(points, ends, strict=True)])

    return line_chart(title, "GPUs", view.window_start, view.window_end,
                      [series("Held (allocated)", "allocated_gpu_hours"),
                       series("Active", "active_gpu_hours"),
                       series("Effective", "effective_gpu_hours")])


def _per_hour(gpu_hours: float, start: datetime, end: datetime) -> float | None:
    """GPUs over a step: its GPU-hours over its hours as the funnel counts them — the
    minutes starting in it — so a step cut short at the window's edge reads true."""
    minutes = _minute_starts(end) - _minute_starts(start)
    return gpu_hours * 60 / minutes if minutes > 0 else None


def _minute_starts(at: datetime) -> int:
    return -(-round(at.timestamp() * 1000) // 60_000)


# What the templates call: the chart of a row's trend and dashboard links.
templates.env.globals.update(trend_chart=trend_chart, ui_url=ui_url)
