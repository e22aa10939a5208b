"""The vocabulary of placement: fleet state, demands, and the two answers (decision, refusal).

Everything here is plain data. The state classes are mutable because a `Placer` commits
decisions into them; a `Demand`, a `Decision` and a `Refusal` are values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigInstanceSpec

MILLI = 1000  # one whole GPU, in milli-GPU


class UnitKind(StrEnum):
    """What one unit of a demand is: a whole GPU, a MIG instance, or a shared fraction."""

    WHOLE = "whole"
    MIG = "mig"
    SHARED = "shared"


@dataclass
class MigSlot:
    """An existing MIG GPU instance on a GPU, keyed by (profile id, placement start)."""

    profile_id: int
    start: int
    bound: bool = False  # held by an allocation


@dataclass
class GpuState:
    key: str  # the GPU UUID in the live fleet; any unique string in replays
    index: int  # index on its node
    model: str  # gpu_models key (e.g. "H100-80GB"), or the name as reported
    sharing_mode: SharingMode
    usable: bool = True  # False: takes no new units (quarantined, ...)
    whole_bound: bool = False  # exclusive mode: the GPU is held
    used_milli: int = 0  # shared mode: milli-GPU held by bindings (0..1000)
    mig_instances: list[MigSlot] = field(default_factory=list)  # mig mode
    # mig mode: the layout cannot change (the node's backend does not apply MIG plans), so
    # only its existing, unbound instances can be had
    mig_fixed: bool = False
    nvlink_peers: frozenset[str] = frozenset()  # keys of GPUs it has NVLink to


@dataclass
class NodeState:
    name: str
    gpus: list[GpuState]
    environment: str = ""
    schedulable: bool = True  # False: cordoned / unreachable / retired
    cpu_milli_free: int | None = None  # None: not tracked
    memory_mib_free: int | None = None  # None: not tracked
    max_tasks: int | None = None  # None: no limit (openb: 1001)
    tasks: int = 0


@dataclass(frozen=True)
class Demand:
    """What a request asks for. `cpu_milli` / `memory_mib` are for the whole demand."""

    kind: UnitKind
    count: int  # >= 1; WHOLE with 0 is a host-only task
    models: frozenset[str] | None = None  # None: any model
    mig_profile: str | None = None  # MIG: the profile name, resolved per model
    milli: int = MILLI  # SHARED: milli-GPU per unit, 1..999
    cpu_milli: int = 0
    memory_mib: int = 0
    same_node: bool = False
    nvlink: bool = False  # one node, units pairwise NVLink-connected (WHOLE only)
    environments: frozenset[str] | None = None

    @property
    def host_only(self) -> bool:
        return self.kind is UnitKind.WHOLE and self.count == 0


@dataclass(frozen=True)
class UnitChoice:
    node: str
    gpu: str  # GpuState.key
    gpu_index: int
    kind: UnitKind
    milli: int  # 1000 for WHOLE, the fraction for SHARED, round(weight * 1000) for MIG
    mig_profile_id: int | None = None
    mig_start: int | None = None
    creates_mig_instance: bool = False  # part of a MIG plan: the instance does not exist yet


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Decision:
    """Concrete units for a demand, the host resources taken per node, and the MIG plan.

    `mig_layouts` maps a GPU key to its COMPLETE new layout, for every GPU whose instances
    change; `previous_mig_layouts` holds the layouts they replace, so `Placer.release`
    can restore them. Every node the decision uses (host-only tasks included) is a key of
    `cpu_milli_by_node`.
    """

    units: tuple[UnitChoice, ...]
    cpu_milli_by_node: Mapping[str, int]
    memory_mib_by_node: Mapping[str, int]
    mig_layouts: Mapping[str, tuple[MigInstanceSpec, ...]] = field(default_factory=dict)
    previous_mig_layouts: Mapping[str, tuple[MigSlot, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("cpu_milli_by_node", "memory_mib_by_node", "mig_layouts",
                     "previous_mig_layouts"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def nodes(self) -> tuple[str, ...]:
        seen = dict.fromkeys(unit.node for unit in self.units)
        seen.update(dict.fromkeys(self.cpu_milli_by_node))
        return tuple(seen)

    @property
    def milli(self) -> int:
        """GPU capacity the decision holds, in milli-GPU (docs/design.md, "Funnel and activity"
        weights)."""
        return sum(unit.milli for unit in self.units)


@dataclass(frozen=True)
class Refusal:
    reason: str  # stable snake_case code
    message: str  # one clear sentence for a person
