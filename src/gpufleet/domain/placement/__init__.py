"""Placement (docs/design.md, "Placement"): which concrete units satisfy a demand, across the fleet.

Pure: no I/O, no clock. The live service and `gpufleet whatif` run this same code. See
docs/placement.md for the rules and the policies.
"""

from .candidates import DEFAULT_MAX_CANDIDATES
from .fleet import FleetState, NodeSummary, free_milli
from .mig_plans import geometry_of
from .model import (
    MILLI,
    Decision,
    Demand,
    GpuState,
    MigSlot,
    NodeState,
    Refusal,
    UnitChoice,
    UnitKind,
)
from .placer import Placer, StaleDecision
from .policies import POLICIES
from .workload import FragmentationMeter, Workload

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "MILLI",
    "POLICIES",
    "Decision",
    "Demand",
    "FleetState",
    "FragmentationMeter",
    "GpuState",
    "MigSlot",
    "NodeState",
    "NodeSummary",
    "Placer",
    "Refusal",
    "StaleDecision",
    "UnitChoice",
    "UnitKind",
    "Workload",
    "free_milli",
    "geometry_of",
]
