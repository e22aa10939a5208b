"""The GPU page's charts: which metrics each chart draws, the window a range picks, and a
step that keeps every chart at a few hundred points (docs/dashboard.md, "GPU").

Each metric is one range query of the telemetry service — the one `GET
/api/v1/telemetry/query` makes — filtered to the GPU and grouped by `mig_uuid`: the series
without one is the GPU itself, the others its MIG instances. The store aggregates each step
(mean, sum, increase: the metric's class), so a 7-day chart reads rollups, never raw samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpufleet.api.web.page import api_url
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.telemetry.durations import check_time, parse_duration
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.telemetry.queries import MAX_WINDOW
from gpufleet.wire.telemetry_queries import RangeQueryResult

PRESETS = ("1h", "6h", "24h", "7d")
DEFAULT_RANGE = "1h"
MAX_POINTS = 300  # per chart: enough for a 720-pixel-wide line
# Round steps. 40 minutes is there for 7 days (252 points): a step of an hour or more
# makes a member's query mix hourly and minute rows through their bindings
# (tsdb/mixed_tiers.py), which pays off over many GPUs but costs one GPU ~5× a minute read.
STEPS_S = (60, 120, 300, 600, 900, 1800, 2400, 3600, 7200, 10800, 21600, 43200, 86400)
GIB = 1024**3


@dataclass(frozen=True)
class Line:
    metric: str
    label: str


@dataclass(frozen=True)
class Group:
    """One chart: metrics of one unit, shown in `unit` (catalogue values ÷ `scale`)."""

    key: str
    title: str
    unit: str
    lines: tuple[Line, ...]
    scale: float = 1.0
    y_max: float | None = None
    per_step: bool = False  # a counter: the chart shows its increase in each step


GROUPS = (
    Group("activity", "Activity", "%", (Line("gpu.utilization", "Utilization"),
                                        Line("gpu.gr_engine_active", "Graphics engine active")),
          y_max=100),
    Group("sm", "SM", "%", (Line("gpu.sm_active", "SM active"),
                            Line("gpu.sm_occupancy", "SM occupancy"),
                            Line("gpu.tensor_active", "Tensor active"),
                            Line("gpu.dram_active", "DRAM active")), y_max=100),
    Group("memory", "Memory", "GiB", (Line("gpu.memory_used_bytes", "Used"),
                                      Line("gpu.memory_total_bytes", "Total")), scale=GIB),
    Group("power", "Power", "W", (Line("gpu.power_usage_watts", "Draw"),
                                  Line("gpu.power_limit_watts", "Limit"))),
    Group("temperature", "Temperature", "°C", (
        Line("gpu.temperature_celsius", "GPU"),
        Line("gpu.memory_temperature_celsius", "Memory (HBM)"))),
    Group("clocks", "Clocks", "MHz", (Line("gpu.sm_clock_mhz", "SM"),
                                      Line("gpu.memory_clock_mhz", "Memory"))),
    Group("ecc", "ECC errors", "errors", (
        Line("gpu.ecc_corrected_errors_total", "Corrected"),
        Line("gpu.ecc_uncorrected_errors_total", "Uncorrected")), per_step=True),
    Group("nvlink", "NVLink traffic", "GiB/s", (
        Line("gpu.nvlink_tx_bytes_per_second", "Sent"),
        Line("gpu.nvlink_rx_bytes_per_second", "Received")), scale=GIB),
    Group("nvlink_errors", "NVLink errors", "errors", (
        Line("gpu.nvlink_crc_flit_errors_total", "CRC flit"),
        Line("gpu.nvlink_crc_data_errors_total", "CRC data"),
        Line("gpu.nvlink_replay_errors_total", "Replay"),
        Line("gpu.nvlink_recovery_errors_total", "Recovery")), per_step=True),
)
MIG_ACTIVITY = "gpu.gr_engine_active"  # per instance, where the store has it


@dataclass(frozen=True)
class Window:
    """What the charts cover. `range` is set for a window back from now (it refreshes);
    `clipped` says why the window is shorter than asked."""

    start: datetime
    end: datetime
    step_s: int
    range: str | None = None
    clipped: str | None = None

    @property
    def step_text(self) -> str:
        return f"{self.step_s}s"

    @property
    def step_words(self) -> str:
        """The step as the page says it: `5 min`, `3 h`, `1 d`."""
        for unit_s, unit in ((86400, "d"), (3600, "h"), (60, "min")):
            if self.step_s % unit_s == 0:
                return f"{self.step_s // unit_s} {unit}"
        return f"{self.step_s} s"

    def query_params(self) -> dict[str, str]:
        """How the API call behind a chart says this window."""
        if self.range is not None and self.clipped is None:
            return {"since": self.range}
        return {"start": _iso(self.start), "end": _iso(self.end)}


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def step_for(span: timedelta) -> int:
    """The smallest round step that keeps the window at or under MAX_POINTS points."""
    needed = span.total_seconds() / MAX_POINTS
    return next((s for s in STEPS_S if s >= needed), STEPS_S[-1])


def _time(text: str, name: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(f"{name} '{text}' is not a time like 2026-11-02T09:00Z",
                           code="invalid_time", details={name: text}) from None
    return check_time(at if at.tzinfo else at.replace(tzinfo=UTC), name=name)


def window_of(now: datetime, range_: str | None, start: str | None, end: str | None
              ) -> Window:
    """The window a request asks for: `start` (and `end`, default now) when given, else
    `range` back from now. A window longer than a range query may span shows its most
    recent part and says so; malformed input is an InvalidInput naming the parameter."""
    if start:
        stop = _time(end, "end") if end else now
        begin = _time(start, "start")
        if stop <= begin:
            raise InvalidInput("start must be before end", code="invalid_range",
                               details={"start": start, "end": end})
        relative = None
    else:
        if end:
            raise InvalidInput("end needs a start", code="invalid_range", details={"end": end})
        relative = range_ or DEFAULT_RANGE
        stop, begin = now, now - parse_duration(relative, name="range")
    clipped = None
    if stop - begin > MAX_WINDOW:
        begin = stop - MAX_WINDOW
        clipped = (f"A chart spans at most {MAX_WINDOW.days} days: these show the "
                   f"{MAX_WINDOW.days} days up to the end of the range asked for.")
    return Window(begin, stop, step_for(stop - begin), relative, clipped)


@dataclass
class MetricSeries:
    """One metric's answer for this GPU: the GPU's own points and each MIG instance's."""

    api: str
    gpu: list[tuple[datetime, float]]
    instances: dict[str, list[tuple[datetime, float]]]


def query_metric(gf: Gpufleet, p: Principal, uuid: str, metric: str, window: Window
                 ) -> MetricSeries:
    result: RangeQueryResult = gf.queries.range_query(
        p, metric, start=window.start, end=window.end, step=window.step_text,
        filters={"gpu_uuid": [uuid]}, group_by=["mig_uuid"])
    own: list[tuple[datetime, float]] = []
    instances: dict[str, list[tuple[datetime, float]]] = {}
    for series in result.series:
        mig = series.labels.get("mig_uuid")
        if mig is None:
            own = list(series.points)
        else:
            instances[mig] = list(series.points)
    api = api_url("telemetry/query", metric=metric, **window.query_params(),
                  step=window.step_text, by="mig_uuid", filter=f"gpu_uuid={uuid}")
    return MetricSeries(api, own, instances)


def with_gaps(points: list[tuple[datetime, float]], step_s: int, scale: float = 1.0
              ) -> list[tuple[datetime, float | None]]:
    """The points in the chart's unit, with a None where a step is missing, so the line
    breaks there instead of bridging the gap ("not known" is never drawn)."""
    out: list[tuple[datetime, float | None]] = []
    previous = None
    for at, value in points:
        if previous is not None and (at - previous).total_seconds() > step_s * 1.5:
            out.append((previous + timedelta(seconds=step_s), None))
        out.append((at, value / scale))
        previous = at
    return out
