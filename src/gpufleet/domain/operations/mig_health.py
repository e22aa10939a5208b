"""MIG instance health: the faults NVIDIA confines to one GPU instance move only it.

On a MIG-enabled GPU most faults still belong to the whole GPU: XIDs 48, 63/64, 74, 79,
95, 119/120, uncorrectable ECC that no instance contained, row-remap failure, NVLink,
slowdowns, a GPU missing from its node. Those move the GPU (`health_rules.py`), and a
quarantined GPU takes every instance on it out with it. One fault is the instance's own:
a *contained* uncorrectable memory error (XID 94). With MIG, the driver kills only the
work of the GPU instance whose memory was hit and the other instances keep running; the
GPU wants a reset when convenient, to apply the row remapping (NVIDIA, "GPU Memory Error
Management", "Error Containment"). NVML names that instance in the XID event
(`nvmlEventData_t.gpuInstanceId` / `computeInstanceId`), so the agent files the event
under the instance's MIG UUID, and these rules judge the instance on it.

An instance moves through the GPU's own states, `healthy → suspect → quarantined →
healthy` (`health.decide`), less `retired`: retiring is the GPU's, and it retires every
instance with it. Application XIDs (13, 31, 43, 45) never move an instance either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpufleet.domain.errors import Conflict, InvalidInput
from gpufleet.domain.inventory import GpuHealth
from gpufleet.domain.operations.health import Finding
from gpufleet.domain.operations.health_rules import (
    APPLICATION_XIDS,
    Reading,
    xid_finding,
)

# XIDs that are never confined to one GPU instance: the GPU (or its memory, link, bus,
# firmware) failed, so the GPU rules take the whole GPU out. Naming one of them for an
# instance would leave the other instances serving on a broken GPU.
GPU_WIDE_XIDS = frozenset({48, 63, 64, 74, 79, 95, 119, 120})
CONTAINED_XIDS = frozenset({94})


def check_instance_xids(codes: frozenset[int], setting: str) -> None:
    """Refuse codes an instance must not be judged on: application XIDs (the program, not
    the instance, failed) and GPU-wide ones (the GPU rules own them)."""
    wrong = sorted(codes & APPLICATION_XIDS)
    if wrong:
        raise InvalidInput(f"{setting}: XID {', '.join(map(str, wrong))} is an application "
                           "error and never marks a MIG instance", code="invalid_health_rule",
                           details={"xids": wrong})
    wide = sorted(codes & GPU_WIDE_XIDS)
    if wide:
        raise InvalidInput(f"{setting}: XID {', '.join(map(str, wide))} is GPU-wide: it takes "
                           "the whole GPU out (health_xid_quarantine), never one instance",
                           code="invalid_health_rule", details={"xids": wide})


@dataclass(frozen=True)
class MigSignals:
    """What one evaluation read for one MIG instance: the XIDs its events named, increases
    over `window` (as `GpuSignals.xid_increases`)."""

    gpu_uuid: str
    mig_uuid: str
    window: timedelta
    xid_increases: Mapping[int, Reading] = field(default_factory=dict)


@dataclass(frozen=True)
class MigXidRule:
    """A new XID that NVIDIA confines to the GPU instance it names: `quarantine` codes take
    the instance out of service, `suspect` codes mark it. Other codes on an instance's
    series are the GPU rules' business (they count every series of the GPU)."""

    quarantine: frozenset[int] = CONTAINED_XIDS
    suspect: frozenset[int] = frozenset()
    name: str = "mig_xid"

    def __post_init__(self) -> None:
        check_instance_xids(self.quarantine | self.suspect, "MIG instance XIDs")

    def verdict(self, s: MigSignals, now: datetime) -> Finding | None:
        return xid_finding(self.name, self.quarantine, self.suspect, s.xid_increases,
                           s.window, f" on MIG instance {s.mig_uuid}")


def mig_findings(rule: MigXidRule, s: MigSignals, now: datetime) -> list[Finding]:
    found = rule.verdict(s, now)
    return [] if found is None else [found]


def check_mig_clear(current: GpuHealth, gpu: str, mig_uuid: str) -> None:
    """An operator returns a suspect or quarantined instance to healthy; a healthy one is a
    mistake worth saying (409), as for a GPU."""
    if current is GpuHealth.HEALTHY:
        raise Conflict(f"MIG instance {mig_uuid} of GPU {gpu} is healthy: there is nothing "
                       "to clear", code="mig_instance_already_healthy",
                       details={"gpu": gpu, "mig_instance": mig_uuid,
                                "health": current.value})
