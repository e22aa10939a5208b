"""The fleet's state as Prometheus gauges, for the server's `/metrics` (docs/design.md,
"Interfaces").

Computed at scrape time from the state store with a few grouped queries, so a scrape costs the same
at 100 nodes or 12,500: GPUs by environment × model × status, nodes by environment × status, the
GPUs held by each project's allocations (a MIG instance weighs its share of the GPU, a shared
fraction its milli ÷ 1000 — docs/design.md, "Funnel and activity"), requests by state, and how long
the quietest agent of each environment has been silent, and the fleet funnel by environment over the
default window (GPU-hours total, allocated, active, effective — from the telemetry queries, cached
for a minute so a scrape stays cheap). This module only gathers numbers; the API renders them in
Prometheus' text format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.inventory import NodeStatus
from gpufleet.domain.placement.model import MILLI
from gpufleet.services.access.principal import Principal
from gpufleet.services.telemetry.ingest import IngestCounters
from gpufleet.store.tables import Binding, Environment, Gpu, GpuRequest, Node, Project
from gpufleet.wire.telemetry_queries import FunnelView

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric and its samples (labels → value): a gauge, or a counter (exposed with
    the `_total` suffix Prometheus expects)."""

    name: str
    help: str
    label_names: tuple[str, ...]
    samples: dict[Labels, float] = field(default_factory=dict)
    counter: bool = False

    def add(self, value: float, **labels: str) -> None:
        key = tuple((name, labels[name]) for name in self.label_names)
        self.samples[key] = self.samples.get(key, 0.0) + value


def gather(session: Session, principal: Principal, now: datetime) -> list[Family]:
    """Every project's allocations and requests: for monitoring tokens, never a member."""
    principal.require(Action.READ_FLEET_METRICS)
    environments = dict(session.execute(select(Environment.id, Environment.name)).all())
    return [_gpus(session, environments), _nodes(session, environments),
            _allocated(session, environments), _requests(session),
            _silence(session, environments, now)]


def _gpus(session: Session, environments: dict[int, str]) -> Family:
    family = Family("gpufleet_gpus", "GPUs in the inventory by environment, model and status.",
                    ("environment", "model", "status"))
    for env_id, model, status, count in session.execute(
            select(Gpu.environment_id, Gpu.model, Gpu.status, func.count())
            .group_by(Gpu.environment_id, Gpu.model, Gpu.status)):
        family.add(count, environment=environments[env_id], model=model, status=status)
    return family


def _nodes(session: Session, environments: dict[int, str]) -> Family:
    family = Family("gpufleet_nodes", "Nodes by environment and status.",
                    ("environment", "status"))
    for env_id, status, count in session.execute(
            select(Node.environment_id, Node.status, func.count())
            .group_by(Node.environment_id, Node.status)):
        family.add(count, environment=environments[env_id], status=status)
    return family


def _allocated(session: Session, environments: dict[int, str]) -> Family:
    family = Family("gpufleet_allocated_gpus",
                    "GPUs held by open bindings, per project, environment and unit kind; a "
                    "MIG instance counts as its share of the GPU, a shared fraction as "
                    "milli/1000.", ("project", "environment", "kind"))
    # A binding's milli is its weight (placement writes 1000 whole, the fraction shared,
    # round(weight × 1000) for MIG).
    rows = session.execute(
        select(Project.name, Gpu.environment_id, Binding.kind, func.sum(Binding.milli))
        .join(Gpu, Gpu.id == Binding.gpu_id).join(Project, Project.id == Binding.project_id)
        .where(Binding.ended_at.is_(None))
        .group_by(Project.name, Gpu.environment_id, Binding.kind))
    for project, env_id, kind, milli in rows:
        family.add(int(milli or 0) / MILLI, project=project,
                   environment=environments[env_id], kind=kind)
    return family


def _requests(session: Session) -> Family:
    family = Family("gpufleet_requests", "GPU requests by state.", ("state",))
    for state, count in session.execute(select(GpuRequest.state, func.count())
                                        .group_by(GpuRequest.state)):
        family.add(count, state=state)
    return family


def _silence(session: Session, environments: dict[int, str], now: datetime) -> Family:
    family = Family("gpufleet_agent_silence_max_seconds",
                    "Seconds since the quietest agent of each environment was last heard "
                    "from (nodes not retired).", ("environment",))
    for env_id, oldest in session.execute(
            select(Node.environment_id, func.min(Node.last_seen_at))
            .where(Node.status != NodeStatus.RETIRED.value, Node.last_seen_at.is_not(None))
            .group_by(Node.environment_id)):
        family.add(max((now - oldest).total_seconds(), 0.0), environment=environments[env_id])
    return family



_FUNNEL = (("total", "GPU-hours of the inventory's GPUs (not retired)"),
           ("reporting", "GPU-hours of GPUs that sent telemetry"),
           ("allocated", "GPU-hours held by bindings"),
           ("active", "allocated GPU-hours in minutes whose activity reached the threshold"),
           ("effective", "allocated GPU-hours in minutes whose sm_active reached the "
                         "effective threshold"))


def funnel_families(view: FunnelView) -> list[Family]:
    """`gpufleet_funnel_<term>_gpu_hours{environment}` over the view's window (docs/design.md,
    "Funnel and activity")."""
    hours = (view.window_end - view.window_start).total_seconds() / 3600
    families = []
    for term, meaning in _FUNNEL:
        family = Family(f"gpufleet_funnel_{term}_gpu_hours",
                        f"Fleet funnel over the last {hours:g} h by environment: {meaning}.",
                        ("environment",))
        for row in view.rows:
            value = getattr(row, f"{term}_gpu_hours")
            if value is not None:
                family.add(value, environment=row.group.get("environment") or "")
        families.append(family)
    return families


def ingest_families(counters: IngestCounters) -> list[Family]:
    """What this server process's telemetry ingest has done since it started."""
    batches = Family("gpufleet_ingest_batches", "Telemetry uploads by outcome (stored, "
                     "duplicate: a replay already stored, refused: a 4xx) since start.",
                     ("outcome",), counter=True)
    refusals = Family("gpufleet_ingest_refusals", "Refused telemetry uploads by error code "
                      "since start.", ("code",), counter=True)
    stored = Family("gpufleet_ingest_samples_stored", "Telemetry samples stored since start.",
                    (), counter=True)
    dropped = Family("gpufleet_ingest_samples_dropped", "Telemetry samples dropped and "
                     "counted by reason (docs/telemetry-ingest.md) since start.", ("reason",),
                     counter=True)
    with counters.lock:
        for outcome in ("stored", "duplicate", "refused"):
            batches.add(counters.batches[outcome], outcome=outcome)
        for code, n in counters.refusals.items():
            refusals.add(n, code=code)
        stored.add(counters.samples_stored)
        for reason, n in counters.samples_dropped.items():
            dropped.add(n, reason=reason)
    return [batches, refusals, stored, dropped]
