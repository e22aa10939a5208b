"""Telemetry queries as the API answers them: range queries, latest snapshots, the funnel,
idle / zombie / unattributed lists, and the fleet view behind `gpufleet top`.

Percentages are 0–100; GPU-hours weigh a MIG instance by its share of the GPU and a shared fraction
by milli ÷ 1000 (docs/design.md, "Funnel and activity"). A value a source cannot give is null, never
0.
"""

from __future__ import annotations

from datetime import datetime

from gpufleet.wire.base import View


class QuerySeries(View):
    labels: dict[str, str | None]
    points: list[tuple[datetime, float]]  # (start of the step, value)


class RangeQueryResult(View):
    metric: str
    unit: str
    start: datetime
    end: datetime
    step_s: float
    by: list[str]
    series: list[QuerySeries]


class Charge(View):
    """An allocation a unit's usage is charged to: the binding holding the unit."""

    allocation: str
    project: str
    weight: float  # GPU share the binding holds


class ProcessView(View):
    pid: int
    name: str | None = None
    memory_used_bytes: float | None = None
    sm_utilization_percent: float | None = None
    container: str | None = None
    pod: str | None = None
    namespace: str | None = None
    slurm_job: str | None = None
    claimed_allocation: str | None = None
    tags: dict[str, str] = {}
    claim: str  # matches | mismatch | no_claim | unbound
    last_seen_at: datetime


class UnitSnapshotView(View):
    gpu_uuid: str
    mig_uuid: str | None = None
    mig_profile: str | None = None
    node: str
    environment: str
    model: str
    at: datetime | None  # the newest value's time; None: nothing recent
    activity_percent: float | None
    activity_source: str
    values: dict[str, float]  # metric → latest value
    charged_to: list[Charge]
    processes: list[ProcessView]
    workload_claims: list[dict[str, str]] = []


class FunnelPoint(View):
    """One step of a funnel's trend: its GPU-hours in [start, start + step)."""

    start: datetime
    allocated_gpu_hours: float
    active_gpu_hours: float
    effective_gpu_hours: float


class FunnelRow(View):
    group: dict[str, str | None]
    total_gpu_hours: float | None  # inventory (not retired); None when grouped by owner
    reporting_gpu_hours: float | None
    silent_gpu_hours: float | None
    allocated_gpu_hours: float
    active_gpu_hours: float
    effective_gpu_hours: float
    unknown_gpu_hours: float  # allocated, activity unknown
    efficiency_percent: float | None
    # Asked for with `step` (else null): the trend, and the allocations that held units
    # in the window with their held hours (first binding start to last end, in the window).
    trend: list[FunnelPoint] | None = None
    allocations: int | None = None
    allocation_held_hours: float | None = None


class FunnelView(View):
    window_start: datetime
    window_end: datetime
    by: list[str]
    activity_threshold_percent: float
    effective_sm_active_percent: float
    rows: list[FunnelRow]
    fleet: FunnelRow
    step_s: float | None = None  # the trend's step, when asked for


class IdleAllocation(View):
    allocation: str
    project: str
    gpu_uuid: str
    mig_uuid: str | None = None
    mig_profile: str | None = None
    node: str
    environment: str
    model: str
    weight: float
    state: str  # idle | idle_held
    idle_since: datetime
    memory_held_bytes: float | None


class IdleList(View):
    at: datetime
    window_hours: float
    activity_threshold_percent: float
    idle_held_memory_bytes: int
    items: list[IdleAllocation]
    unknown: int  # allocated units whose activity is unknown for too much of the window
    next_cursor: str | None = None  # the next page (`cursor=`); None on the last page
    # Why units are not judged: a unit needs this many minutes of the window known ...
    known_minutes_needed: int = 0
    # ... and the best of the `unknown` ones had this many (None: none unknown) ...
    unknown_best_known_minutes: float | None = None
    # ... and these allocated units were bound for less than the window: not judged yet.
    too_new: int = 0


class ZombieProcess(View):
    gpu_uuid: str
    mig_uuid: str | None = None
    node: str
    environment: str
    pid: int
    name: str | None = None
    memory_used_bytes: float | None
    reason: str  # no_binding | binding_ended | no_sm_activity
    allocation: str | None = None
    project: str | None = None
    binding_ended_at: datetime | None = None
    last_seen_at: datetime


class UnattributedUsage(View):
    gpu_uuid: str
    mig_uuid: str | None = None
    node: str
    environment: str
    kind: str  # process | workload_claim | activity
    reason: str  # unbound | mismatch
    pid: int | None = None
    name: str | None = None
    claimed_allocation: str | None = None
    workload: dict[str, str] = {}
    bound_allocations: list[str] = []
    memory_used_bytes: float | None = None
    activity_percent: float | None = None
    last_seen_at: datetime


class TopGroup(View):
    group: dict[str, str | None]
    units: int  # units whose activity is known, in the last five minutes
    allocated_gpus: float
    activity_percent: float | None
    sm_active_percent: float | None
    memory_used_bytes: float | None  # null where no unit reported its memory


class TopUnit(View):
    gpu_uuid: str
    mig_uuid: str | None = None
    node: str
    environment: str
    model: str
    activity_percent: float
    sm_active_percent: float | None
    memory_used_bytes: float | None
    charged_to: list[Charge]


class TopView(View):
    at: datetime
    fleet: TopGroup
    by_environment: list[TopGroup]
    by_project: list[TopGroup]
    busiest: list[TopUnit]
    idlest_allocated: list[TopUnit]
