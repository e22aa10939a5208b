"""A plan on one node, and the cache that reuses plans across nodes of one shape.

Most of what a decision computes it has computed before for another node with the same
GPUs: the plans for a demand depend on the node's *shape* alone (each GPU's index and
picture, in order; `fleet.TupleIds`), and their ranks on the shape, the node's free host
resources and its task room. `ShapeCache` keeps both per demand; a plan made on one node
is moved to another of the same shape with `moved` (docs/placement.md, "Indexes and
cost").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from . import mig_plans
from .model import MILLI, Demand, NodeState, UnitChoice

if TYPE_CHECKING:
    from .fleet import FleetState
    from .policies import Scorer

Ranked = list[tuple[tuple, "NodePlan"]]  # (rank without the node name, plan)


@dataclass
class NodePlan:
    """Units on one node, with what the node looks like afterwards (for scoring)."""

    node: NodeState
    units: list[UnitChoice]
    layouts: dict[str, mig_plans.LayoutKey] = field(default_factory=dict)
    cpu_milli: int = 0
    memory_mib: int = 0
    pictures_after: tuple = ()
    gpu_free_after: int = MILLI  # free milli left on the GPU a shared unit lands on
    origin: tuple[str, ...] = ()  # cached plans: the GPU keys of the node made on, in order
    after_id: int | None = None  # cached plans: fleet.ids of pictures_after

    @cached_property
    def free_after(self) -> int:
        """Free milli-GPU left on the node."""
        return sum(picture[3] for picture in self.pictures_after)


class DemandCache:
    """One demand's plans by shape id and ranked plans by (shape, host)."""

    def __init__(self, cache: ShapeCache, demand: Demand):
        self._cache = cache
        self._demand = demand
        self.plans: dict[int, list[NodePlan]] = {}
        self.ranks: dict[tuple, Ranked] = {}

    def ranked(self, node: NodeState,
               make: Callable[[NodeState], list[NodePlan]]) -> Ranked:
        """The node's plans (`make` builds them when its shape has none yet), ranked."""
        if not node.schedulable:
            return []
        fleet = self._cache.fleet
        summary = fleet.summary(node.name)
        shape = summary.shape
        host = (shape, node.cpu_milli_free, node.memory_mib_free, summary.open,
                node.max_tasks is None or node.tasks + 1 < node.max_tasks)
        ranked = self.ranks.get(host)
        if ranked is None:
            made = self.plans.get(shape)
            if made is None:
                if len(self.plans) > 50_000:
                    self.plans.clear()
                made = self.plans[shape] = make(node)
                origin = tuple(gpu.key for gpu in node.gpus)
                for plan in made:
                    plan.cpu_milli = self._demand.cpu_milli
                    plan.memory_mib = self._demand.memory_mib
                    plan.origin = origin
                    plan.after_id = fleet.ids(plan.pictures_after)
            if len(self.ranks) > 50_000:
                self.ranks.clear()
            scorer = self._cache.scorer
            ranked = self.ranks[host] = [(scorer.rank(fleet, node, plan), plan)
                                         for plan in made]
        return ranked


class ShapeCache:
    """Per demand, plans by node shape and ranks by shape and host resources.

    Ranks are dropped whenever the scorer's `version()` changes (the default policy's
    workload weights, or whether the fleet's CPU runs out first); plans only when a bound
    is passed. Demands with many distinct host sizes (a live fleet) cycle through at most
    256 entries.
    """

    def __init__(self, fleet: FleetState, scorer: Scorer):
        self.fleet = fleet
        self.scorer = scorer
        self._demands: dict[Demand, DemandCache] = {}
        self._version = scorer.version()

    def for_demand(self, demand: Demand) -> DemandCache:
        version = self.scorer.version()
        if version != self._version:
            self._version = version
            for cache in self._demands.values():
                cache.ranks.clear()
        found = self._demands.get(demand)
        if found is None:
            if len(self._demands) >= 256:
                self._demands.clear()
            found = self._demands[demand] = DemandCache(self, demand)
        return found


def moved(plan: NodePlan, node: NodeState) -> NodePlan:
    """A cached `plan`, made on a node of the same shape (perhaps `node` itself, as it
    was), on `node` now: the units and layouts on the GPUs at the same positions."""
    gpus = dict(zip(plan.origin, node.gpus, strict=True))
    units = [UnitChoice(node.name, gpus[unit.gpu].key, gpus[unit.gpu].index, unit.kind,
                        unit.milli, unit.mig_profile_id, unit.mig_start,
                        unit.creates_mig_instance) for unit in plan.units]
    layouts = {gpus[key].key: layout for key, layout in plan.layouts.items()}
    return NodePlan(node, units, layouts, plan.cpu_milli, plan.memory_mib,
                    plan.pictures_after, plan.gpu_free_after)
