"""Inventory vocabulary (docs/design.md, "Concepts") and the rules that derive one state from
others.

Statuses that can be derived are derived here, in one place, so the store only caches them
for fast grouping (`fleet summary` at 100,000 GPUs) and never decides them.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum


class EnvironmentKind(StrEnum):
    CLOUD = "cloud"
    ONPREM = "onprem"


class SharingMode(StrEnum):
    """How a GPU is handed out: whole, as MIG instances, or as time-sliced fractions."""

    EXCLUSIVE = "exclusive"
    MIG = "mig"
    SHARED = "shared"


class NodeAdminState(StrEnum):
    """What an operator decided about a node; reachability is observed separately."""

    ACTIVE = "active"
    CORDONED = "cordoned"
    RETIRED = "retired"


class NodeStatus(StrEnum):
    READY = "ready"
    CORDONED = "cordoned"
    UNREACHABLE = "unreachable"
    RETIRED = "retired"


class GpuHealth(StrEnum):
    """docs/operations.md, "GPU health and quarantine": `retired` is for good (a quarantined
    GPU an operator gave up on); placement uses neither it nor a quarantined one."""

    HEALTHY = "healthy"
    SUSPECT = "suspect"
    QUARANTINED = "quarantined"
    RETIRED = "retired"


# Health values placement never uses.
OUT_OF_SERVICE = (GpuHealth.QUARANTINED.value, GpuHealth.RETIRED.value)


class GpuStatus(StrEnum):
    """The one word an operator asks of a GPU: can it be used, and is it in use?"""

    FREE = "free"
    ALLOCATED = "allocated"
    CORDONED = "cordoned"
    QUARANTINED = "quarantined"
    UNREACHABLE = "unreachable"
    RETIRED = "retired"


def node_status(admin_state: NodeAdminState, reachable: bool) -> NodeStatus:
    """Retired wins over everything; a silent node is unreachable even when cordoned.

    Keeping the operator's decision (`admin_state`) apart from what was observed
    (`reachable`) means a cordoned node that goes silent and comes back is cordoned again,
    not silently made ready.
    """
    if admin_state is NodeAdminState.RETIRED:
        return NodeStatus.RETIRED
    if not reachable:
        return NodeStatus.UNREACHABLE
    if admin_state is NodeAdminState.CORDONED:
        return NodeStatus.CORDONED
    return NodeStatus.READY


def gpu_status(node: NodeStatus, health: GpuHealth, allocated: bool) -> GpuStatus:
    """Precedence: retired (the node or the GPU) > unreachable > quarantined > allocated >
    cordoned > free.

    An allocated GPU on a cordoned node is still allocated (a cordon stops new placements,
    not running work); a `suspect` GPU stays usable and is reported by its health.
    """
    if node is NodeStatus.RETIRED or health is GpuHealth.RETIRED:
        return GpuStatus.RETIRED
    if node is NodeStatus.UNREACHABLE:
        return GpuStatus.UNREACHABLE
    if health is GpuHealth.QUARANTINED:
        return GpuStatus.QUARANTINED
    if allocated:
        return GpuStatus.ALLOCATED
    if node is NodeStatus.CORDONED:
        return GpuStatus.CORDONED
    return GpuStatus.FREE


def silence_cutoff(now: datetime, heartbeat_interval_s: float,
                   missed_intervals: int) -> datetime:
    """Nodes last seen before this instant have missed `missed_intervals` heartbeats."""
    return now - timedelta(seconds=heartbeat_interval_s * missed_intervals)


def is_silent(last_seen: datetime | None, now: datetime, heartbeat_interval_s: float,
              missed_intervals: int) -> bool:
    """A node is silent once `missed_intervals` heartbeats in a row did not arrive."""
    if last_seen is None:
        return True
    return last_seen < silence_cutoff(now, heartbeat_interval_s, missed_intervals)


def canonical_gpu_uuid(uuid: str) -> str:
    """NVML prints GPU UUIDs as `GPU-` + lowercase hex; compare and store them that way."""
    return "GPU-" + uuid[4:].lower() if uuid[:4].upper() == "GPU-" else uuid
