"""The Placer: decides which concrete units satisfy a demand, and commits or releases them.

`decide` is pure (it reads the fleet and returns a `Decision` or a `Refusal`); `commit`
applies a decision, `release` undoes one. The same code runs the live fleet and what-if
replays. A decision looks at a bounded set of candidate nodes drawn from the fleet's index
(`fleet.py`, walked by `candidates.py`), so its cost does not grow with the fleet, and
reuses plans made for nodes of the same shape (`plans.py`).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from math import ceil

from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigGeometry, MigInstanceSpec, layout_problems

from . import mig_plans
from .candidates import DEFAULT_MAX_CANDIDATES, Walk, candidates
from .fleet import FleetState, GpuPicture, Pool
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
from .plans import NodePlan, ShapeCache, moved
from .policies import POLICIES, Scorer, make_scorer
from .workload import Workload

GpuFilter = Callable[[NodeState, GpuState], bool]


class StaleDecision(ValueError):
    """`commit` found the fleet changed since `decide`: a unit is no longer free."""


@dataclass
class _Context:
    demand: Demand
    models: frozenset[str] | None
    profile_ids: dict[str, int]  # MIG: model -> profile id of the demanded profile
    gpu_filter: GpuFilter | None
    whole_from_shared: bool
    host_failures: int = 0
    short_of_host: list[str] = field(default_factory=list)  # nodes the walk passed over
    nvlink_failures: int = 0


class Placer:
    """Decides placements on a `FleetState` with one policy.

    `policy`: "default" (fragmentation-aware), "binpack" or "spread".
    `whole_gpus_from_shared`: openb semantics, a WHOLE demand may take a shared GPU with
    nothing on it. `max_candidates`: distinct candidate nodes scored per decision (the
    cost bound at scale); `workload`: the task distribution the default policy protects
    (learnt from the demands it decides when not given).
    """

    def __init__(self, fleet: FleetState, policy: str = "default", *, seed: int = 0,
                 whole_gpus_from_shared: bool = False,
                 max_candidates: int = DEFAULT_MAX_CANDIDATES,
                 workload: Workload | None = None, learn: bool = True):
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}; "
                             f"known: {', '.join(POLICIES)}")
        if max_candidates < 1:
            raise ValueError("max_candidates must be at least 1")
        self.fleet = fleet
        self.policy = policy
        self.whole_gpus_from_shared = whole_gpus_from_shared
        self.max_candidates = max_candidates
        self.workload = workload if workload is not None else Workload()
        self.learn = learn
        self._rng = random.Random(seed)
        self._scorer: Scorer = make_scorer(policy, self.workload, whole_gpus_from_shared,
                                           fleet)
        # plans and ranks reused across nodes of one shape (plans.py); None: never reused
        self._shapes: ShapeCache | None = ShapeCache(fleet, self._scorer)

    # --- decide ----------------------------------------------------------------------
    def decide(self, demand: Demand, *, gpu_filter: GpuFilter | None = None) -> Decision | Refusal:
        """The units for `demand`, or why there are none. Changes no fleet state; the
        default policy learns the demand's kind into its workload."""
        context = self._context(demand, gpu_filter)
        if isinstance(context, Refusal):
            return context
        if self.learn:
            self.workload.observe(demand)
        if demand.host_only or demand.count == 1 or demand.same_node or demand.nvlink:
            plan = self._best_plan(context, demand.count)
            if plan is not None:
                return self._decision([plan], demand)
            return self._refusal(context)
        plan = self._best_plan(context, demand.count)
        if plan is not None:
            return self._decision([plan], demand)
        plans = self._spanning_plans(context)
        return self._decision(plans, demand) if plans else self._refusal(context)

    def preview(self, demand: Demand) -> Decision | Refusal:
        """What `decide` would answer now, leaving this placer as it was (the request
        preview): a twin on the same fleet, with a copy of the workload and of the random
        state, decides instead, so nothing is learnt, no draw is spent, and the next real
        decision is the one it would have been."""
        twin = Placer(self.fleet, self.policy, whole_gpus_from_shared=self.whole_gpus_from_shared,
                      max_candidates=self.max_candidates, workload=copy.deepcopy(self.workload),
                      learn=self.learn)
        twin._rng.setstate(self._rng.getstate())
        return twin.decide(demand)

    def _context(self, demand: Demand, gpu_filter: GpuFilter | None) -> _Context | Refusal:
        if demand.count < 0 or (demand.count == 0 and demand.kind is not UnitKind.WHOLE):
            return Refusal("invalid_demand", f"a demand needs at least one unit, "
                                             f"not {demand.count}")
        if demand.cpu_milli < 0 or demand.memory_mib < 0:
            return Refusal("invalid_demand", "host CPU and memory cannot be negative")
        if demand.kind is UnitKind.SHARED and not 1 <= demand.milli < MILLI:
            return Refusal("invalid_demand", f"a shared unit is 1..999 milli-GPU, "
                                             f"not {demand.milli}")
        if demand.nvlink and demand.kind is not UnitKind.WHOLE:
            return Refusal("invalid_demand", "NVLink groups are for whole GPUs only")
        if demand.models is not None:
            unknown = sorted(m for m in demand.models if m not in self.fleet.models)
            if len(unknown) == len(demand.models):
                return Refusal("unknown_model", f"no GPU of model {', '.join(unknown)} "
                                                f"exists in the fleet")
        if demand.environments is not None:
            known = {env for _, env in self.fleet.pools}
            if not demand.environments & known:
                return Refusal("unknown_environment",
                               f"no node is in environment "
                               f"{', '.join(sorted(demand.environments))}")
        profile_ids: dict[str, int] = {}
        if demand.kind is UnitKind.MIG:
            if not demand.mig_profile:
                return Refusal("invalid_demand", "a MIG demand names its profile "
                                                 "(e.g. 1g.10gb)")
            models = demand.models or frozenset(self.fleet.models)
            geometries = {m: mig_plans.geometry_of(m) for m in models}
            if not any(geometries.values()):
                return Refusal("mig_model_unknown",
                               f"gpufleet knows no MIG geometry for "
                               f"{', '.join(sorted(models)) or 'any GPU in the fleet'}; "
                               f"MIG placements on unknown models are refused, never guessed")
            for model, geometry in geometries.items():
                profile = geometry.profile_named(demand.mig_profile) if geometry else None
                if profile is not None:
                    profile_ids[model] = profile.profile_id
            if not profile_ids:
                return Refusal("unknown_mig_profile",
                               f"MIG profile {demand.mig_profile!r} exists on none of "
                               f"{', '.join(sorted(m for m, g in geometries.items() if g))}")
        if demand.same_node or demand.nvlink:
            most = self._most_units_on_one_node(demand, profile_ids)
            if demand.count > most:
                return Refusal("too_many_for_one_node",
                               f"{demand.count} units on one node were asked for; the "
                               f"largest matching node holds {most}")
        return _Context(demand, demand.models, profile_ids, gpu_filter,
                        self.whole_gpus_from_shared)

    def _most_units_on_one_node(self, demand: Demand, profile_ids: dict[str, int]) -> int:
        most = 0
        for pool in self._pools(demand, profile_ids):
            units = pool.max_gpus
            if demand.kind is UnitKind.MIG:
                geometry = mig_plans.geometry_of(pool.model)
                units *= geometry.profile(profile_ids[pool.model]).max_instances
            most = max(most, units)
        return most

    def _pools(self, demand: Demand, profile_ids: dict[str, int]) -> list[Pool]:
        return [pool for (model, env), pool in self.fleet.pools.items()
                if (demand.models is None or model in demand.models)
                and (demand.environments is None or env in demand.environments)
                and (demand.kind is not UnitKind.MIG or model in profile_ids)]

    # --- candidates ------------------------------------------------------------------
    def _candidates(self, context: _Context, units_on_one_node: int, *,
                    every_node: bool = False, host: tuple[int, int] = (0, 0),
                    ) -> Iterator[NodeState]:
        """Distinct candidate nodes in the policy's order (`candidates.candidates`)."""
        walk = Walk(self.fleet, self._pools(context.demand, context.profile_ids),
                    context.demand, context.profile_ids, context.whole_from_shared,
                    units_on_one_node,
                    # spanning several nodes needs each of a signature's nodes
                    per_signature=every_node or context.gpu_filter is not None,
                    host=host, short_of_host=context.short_of_host)
        return candidates(walk, self.policy, self.max_candidates)

    # --- plans on one node -----------------------------------------------------------
    def _best_plan(self, context: _Context, count: int) -> NodePlan | None:
        """The best-ranked plan over the candidates, ties drawn at random."""
        cpu, memory = context.demand.cpu_milli, context.demand.memory_mib
        # plans reused across nodes of one shape: not with a gpu_filter (it may tell such
        # nodes apart) nor for NVLink groups (the shape does not hold the links)
        cached = (None if self._shapes is None or context.gpu_filter is not None
                  or context.demand.nvlink else self._shapes.for_demand(context.demand))

        def make(node: NodeState) -> list[NodePlan]:
            return self._plans_on(context, node, count)

        best_key: tuple | None = None
        best: list[tuple[NodeState, NodePlan]] = []
        fitting = 0
        for node in self._candidates(context, count, host=(cpu, memory)):
            if not self._host_fits(node, cpu, memory):
                if not context.host_failures and self._gpus_fit(context, node, count):
                    context.host_failures += 1
                continue
            if cached is None:
                ranked = self._ranked(context, node, count)
            else:
                ranked = cached.ranked(node, make)
            if ranked:
                fitting += 1
            for rank, plan in ranked:
                key = (*rank, node.name)
                if best_key is None or key < best_key:
                    best_key, best = key, [(node, plan)]
                elif key == best_key:
                    best.append((node, plan))
            if fitting >= self.max_candidates:
                break
        if not best:
            return None
        node, plan = best[0] if len(best) == 1 else self._rng.choice(best)
        return moved(plan, node) if plan.origin else plan

    def _ranked(self, context: _Context, node: NodeState,
                count: int) -> list[tuple[tuple, NodePlan]]:
        ranked = []
        for plan in self._plans_on(context, node, count):
            plan.cpu_milli, plan.memory_mib = context.demand.cpu_milli, context.demand.memory_mib
            ranked.append((self._scorer.rank(self.fleet, node, plan), plan))
        return ranked

    def _gpus_fit(self, context: _Context, node: NodeState, count: int) -> bool:
        return bool(self._plans_on(context, node, count))

    @staticmethod
    def _host_fits(node: NodeState, cpu_milli: int, memory_mib: int) -> bool:
        if node.cpu_milli_free is not None and node.cpu_milli_free < cpu_milli:
            return False
        if node.memory_mib_free is not None and node.memory_mib_free < memory_mib:
            return False
        return node.max_tasks is None or node.tasks < node.max_tasks

    def _usable(self, context: _Context, node: NodeState, gpu: GpuState) -> bool:
        return (gpu.usable and (context.models is None or gpu.model in context.models)
                and (context.gpu_filter is None or context.gpu_filter(node, gpu)))

    def _plans_on(self, context: _Context, node: NodeState, count: int) -> list[NodePlan]:
        if not node.schedulable:
            return []
        kind = context.demand.kind
        if context.demand.host_only:
            return [NodePlan(node, [], pictures_after=_pictures(self.fleet, node, {}))]
        if kind is UnitKind.WHOLE:
            return self._whole_plans(context, node, count)
        if kind is UnitKind.SHARED:
            return self._shared_plans(context, node, count)
        return self._mig_plans(context, node, count)

    def _whole_plans(self, context: _Context, node: NodeState, count: int) -> list[NodePlan]:
        free = [g for g in node.gpus if self._usable(context, node, g) and (
            (g.sharing_mode is SharingMode.EXCLUSIVE and not g.whole_bound)
            or (context.whole_from_shared and g.sharing_mode is SharingMode.SHARED
                and g.used_milli == 0))]
        if len(free) < count:
            return []
        if context.demand.nvlink and count > 1:
            chosen = _nvlink_group(free, count)
            if chosen is None:
                context.nvlink_failures += 1
                return []
        else:
            free.sort(key=lambda g: (g.sharing_mode is SharingMode.SHARED, g.index))
            chosen = free[:count]
        units = [UnitChoice(node.name, g.key, g.index, UnitKind.WHOLE, MILLI) for g in chosen]
        changes = {g.key: (g.sharing_mode.value, True, 0, (), False) for g in chosen}
        return [NodePlan(node, units, pictures_after=_pictures(self.fleet, node, changes),
                         gpu_free_after=0)]

    def _shared_plans(self, context: _Context, node: NodeState, count: int) -> list[NodePlan]:
        milli = context.demand.milli
        fits = [g for g in node.gpus if self._usable(context, node, g)
                and g.sharing_mode is SharingMode.SHARED and MILLI - g.used_milli >= milli]
        if len(fits) < count:
            return []
        if count == 1:
            by_free: dict[int, GpuState] = {}
            for gpu in sorted(fits, key=lambda g: g.index):
                by_free.setdefault(gpu.used_milli, gpu)
            groups = [[gpu] for gpu in by_free.values()]
        else:
            order = self._scorer.gpu_order(fits)
            groups = [order[:count]]
        plans = []
        for chosen in groups:
            units = [UnitChoice(node.name, g.key, g.index, UnitKind.SHARED, milli)
                     for g in chosen]
            changes = {g.key: ("shared", True, MILLI - g.used_milli - milli, (), False)
                       for g in chosen}
            plans.append(NodePlan(node, units,
                                  pictures_after=_pictures(self.fleet, node, changes),
                                  gpu_free_after=min(c[2] for c in changes.values())))
        return plans

    def _mig_plans(self, context: _Context, node: NodeState, count: int) -> list[NodePlan]:
        gpus = [g for g in node.gpus if self._usable(context, node, g)
                and g.sharing_mode is SharingMode.MIG and g.model in context.profile_ids]
        if not gpus:
            return []
        pictures = self.fleet.summary(node.name).pictures
        before = {g.key: pictures[g.key][4] for g in gpus}
        layouts = dict(before)
        units: list[UnitChoice] = []
        for _ in range(count):
            best = None
            for gpu in gpus:
                profile_id = context.profile_ids[gpu.model]
                option = mig_plans.best_option(gpu.model, layouts[gpu.key], profile_id,
                                               gpu.mig_fixed)
                if option is None:
                    continue
                bound = mig_plans.bound_milli(gpu.model, layouts[gpu.key])
                rank = (option.tier, self._scorer.mig_gpu_rank(bound), -option.flexibility,
                        gpu.index)
                if best is None or rank < best[0]:
                    best = (rank, gpu, option, profile_id)
            if best is None:
                return []
            _, gpu, option, profile_id = best
            layouts[gpu.key] = option.layout
            units.append(UnitChoice(
                node.name, gpu.key, gpu.index, UnitKind.MIG,
                mig_plans.unit_milli(gpu.model, profile_id), profile_id, option.start,
                creates_mig_instance=option.tier != mig_plans.EXISTING))
        changes, changed = {}, {}
        for gpu in gpus:
            layout = layouts[gpu.key]
            if layout == before[gpu.key]:
                continue
            changes[gpu.key] = ("mig", True,
                                MILLI - mig_plans.bound_milli(gpu.model, layout), layout,
                                gpu.mig_fixed)
            if _without_bound(layout) != _without_bound(before[gpu.key]):
                changed[gpu.key] = layout  # instances created or dropped: part of the plan
        return [NodePlan(node, units, layouts=changed,
                         pictures_after=_pictures(self.fleet, node, changes))]

    # --- across nodes ----------------------------------------------------------------
    def _spanning_plans(self, context: _Context) -> list[NodePlan] | None:
        """Units spread over several nodes, fewest nodes first; None if they do not fit."""
        demand = context.demand
        options: list[tuple[tuple, NodePlan]] = []
        for node in self._candidates(context, 1, every_node=True):
            if len(options) >= max(self.max_candidates, demand.count):
                break
            for units in range(demand.count - 1, 0, -1):
                cpu = ceil(demand.cpu_milli * units / demand.count)
                memory = ceil(demand.memory_mib * units / demand.count)
                if not self._host_fits(node, cpu, memory):
                    continue
                plans = self._plans_on(context, node, units)
                if plans:
                    plan = plans[0]
                    plan.cpu_milli, plan.memory_mib = cpu, memory
                    key = (*self._scorer.rank(self.fleet, node, plan), node.name)
                    options.append(((-units, key), plan))
                    break
        options.sort(key=lambda item: item[0])
        chosen, remaining = [], demand.count
        for _, plan in options:
            if remaining <= 0:
                break
            take = min(remaining, len(plan.units))
            if take < len(plan.units):
                plans = self._plans_on(context, plan.node, take)
                if not plans:
                    continue
                plan = plans[0]
            plan.cpu_milli = ceil(demand.cpu_milli * take / demand.count)
            plan.memory_mib = ceil(demand.memory_mib * take / demand.count)
            chosen.append(plan)
            remaining -= take
        return chosen if remaining <= 0 else None

    # --- answers ---------------------------------------------------------------------
    def _decision(self, plans: list[NodePlan], demand: Demand) -> Decision:
        units = tuple(u for plan in plans for u in plan.units)
        layouts = {}
        previous = {}
        for plan in plans:
            for key, layout in plan.layouts.items():
                layouts[key] = tuple(MigInstanceSpec(pid, start) for pid, start, _ in layout)
                previous[key] = tuple(MigSlot(s.profile_id, s.start, s.bound)
                                      for s in self.fleet.gpu(key).mig_instances)
        return Decision(units, {p.node.name: p.cpu_milli for p in plans},
                        {p.node.name: p.memory_mib for p in plans}, layouts, previous)

    def _refusal(self, context: _Context) -> Refusal:
        demand = context.demand
        what = _describe(demand)
        limited = any(pool.task_limited for pool in self._pools(demand, context.profile_ids))
        if context.host_failures or limited or any(
                self._gpus_fit(context, self.fleet.node(name), demand.count)
                for name in dict.fromkeys(context.short_of_host)):
            return Refusal("host_resources",
                           f"GPUs for {what} are free, but no such node has "
                           f"{demand.cpu_milli} milli-CPU and {demand.memory_mib} MiB free "
                           f"(or room for another task)")
        if context.nvlink_failures:
            return Refusal("no_nvlink_group", f"no node has {demand.count} free GPUs "
                                              f"connected to each other by NVLink")
        return Refusal("no_capacity", f"no schedulable node has room for {what}")

    # --- commit / release ------------------------------------------------------------
    def commit(self, decision: Decision) -> None:
        """Apply a decision; StaleDecision (nothing applied) if a unit is no longer free."""
        self._check_applicable(decision)
        for key, layout in decision.mig_layouts.items():
            gpu = self.fleet.gpu(key)
            bound = {(s.profile_id, s.start) for s in gpu.mig_instances if s.bound}
            gpu.mig_instances = [MigSlot(s.profile_id, s.start, (s.profile_id, s.start) in bound)
                                 for s in layout]
        for unit in decision.units:
            _bind(self.fleet.gpu(unit.gpu), unit, +1)
        self._take_host(decision, +1)

    def release(self, decision: Decision) -> None:
        """Undo a committed decision: units unbound, host resources returned, instances the
        decision created destroyed, and instances its re-partition dropped put back where
        the GPU's layout still allows them."""
        for unit in decision.units:
            _bind(self.fleet.gpu(unit.gpu), unit, -1)
        for key, previous in decision.previous_mig_layouts.items():
            gpu = self.fleet.gpu(key)
            created = {(u.mig_profile_id, u.mig_start) for u in decision.units
                       if u.gpu == key and u.creates_mig_instance}
            slots = [s for s in gpu.mig_instances
                     if s.bound or (s.profile_id, s.start) not in created]
            present = {(s.profile_id, s.start) for s in slots}
            geometry = mig_plans.geometry_of(gpu.model)
            for old in previous:
                if (old.profile_id, old.start) in present:
                    continue
                trial = [*slots, MigSlot(old.profile_id, old.start, False)]
                if geometry is not None and not _problems(geometry, trial):
                    slots = trial
                    present.add((old.profile_id, old.start))
            gpu.mig_instances = sorted(slots, key=lambda s: (s.start, s.profile_id))
        self._take_host(decision, -1)

    def _check_applicable(self, decision: Decision) -> None:
        taken: set[tuple[str, int | None, int | None]] = set()
        milli_by_gpu: dict[str, int] = {}
        for unit in decision.units:
            if unit.gpu not in self.fleet.gpu_keys:
                raise StaleDecision(f"GPU {unit.gpu} is not in the fleet")
            gpu = self.fleet.gpu(unit.gpu)
            if not gpu.usable:
                raise StaleDecision(f"GPU {unit.gpu} is not usable")
            if unit.kind is UnitKind.MIG:
                where = (unit.gpu, unit.mig_profile_id, unit.mig_start)
                current = next((s for s in gpu.mig_instances if s.profile_id == unit.mig_profile_id
                                and s.start == unit.mig_start), None)
                planned = decision.mig_layouts.get(unit.gpu)
                exists = current is not None or (planned is not None and MigInstanceSpec(
                    unit.mig_profile_id, unit.mig_start) in planned)
                if where in taken or not exists or (current is not None and current.bound):
                    raise StaleDecision(f"MIG instance {unit.mig_profile_id}@{unit.mig_start} "
                                        f"on {unit.gpu} is not free")
                taken.add(where)
                continue
            wanted = milli_by_gpu.get(unit.gpu, 0) + unit.milli
            milli_by_gpu[unit.gpu] = wanted
            if gpu.sharing_mode is SharingMode.EXCLUSIVE:
                if gpu.whole_bound or wanted > MILLI:
                    raise StaleDecision(f"GPU {unit.gpu} is held")
            elif gpu.sharing_mode is SharingMode.SHARED:
                if gpu.used_milli + wanted > MILLI:
                    raise StaleDecision(f"GPU {unit.gpu} has no {unit.milli} milli-GPU free")
            else:
                raise StaleDecision(f"GPU {unit.gpu} is in MIG mode")
        for key, layout in decision.mig_layouts.items():
            gpu = self.fleet.gpu(key)
            kept = {(s.profile_id, s.start) for s in layout}
            if any(s.bound and (s.profile_id, s.start) not in kept for s in gpu.mig_instances):
                raise StaleDecision(f"the MIG plan for {key} would drop a held instance")
        for name, cpu in decision.cpu_milli_by_node.items():
            node = self.fleet.node(name)
            if not self._host_fits(node, cpu, decision.memory_mib_by_node.get(name, 0)):
                raise StaleDecision(f"node {name} no longer has the host resources")

    def _take_host(self, decision: Decision, sign: int) -> None:
        for name in decision.nodes:
            node = self.fleet.node(name)
            cpu = decision.cpu_milli_by_node.get(name, 0)
            memory = decision.memory_mib_by_node.get(name, 0)
            if node.cpu_milli_free is not None:
                node.cpu_milli_free -= sign * cpu
            if node.memory_mib_free is not None:
                node.memory_mib_free -= sign * memory
            node.tasks += sign
            self.fleet.refresh(name)


def _bind(gpu: GpuState, unit: UnitChoice, sign: int) -> None:
    if unit.kind is UnitKind.MIG:
        for slot in gpu.mig_instances:
            if slot.profile_id == unit.mig_profile_id and slot.start == unit.mig_start:
                slot.bound = sign > 0
                return
        raise StaleDecision(f"MIG instance {unit.mig_profile_id}@{unit.mig_start} is not on "
                            f"{unit.gpu}")
    if gpu.sharing_mode is SharingMode.EXCLUSIVE:
        gpu.whole_bound = sign > 0
    else:
        gpu.used_milli += sign * unit.milli


def _problems(geometry: MigGeometry, slots: list[MigSlot]) -> list[str]:
    return layout_problems(geometry, [MigInstanceSpec(s.profile_id, s.start) for s in slots])


def _without_bound(layout: mig_plans.LayoutKey) -> tuple[tuple[int, int], ...]:
    return tuple((pid, start) for pid, start, _ in layout)


def _pictures(fleet: FleetState, node: NodeState, changes: dict[str, GpuPicture]) -> tuple:
    """The node's sorted GPU pictures after `changes` (GPU key -> new picture)."""
    if not changes:
        return fleet.summary(node.name).signature[0]
    current = fleet.summary(node.name).pictures
    return tuple(sorted((current[key][0], *changes[key]) if key in changes else picture
                        for key, picture in current.items()))


def _nvlink_group(free: list[GpuState], count: int) -> list[GpuState] | None:
    """`count` GPUs pairwise connected by NVLink, lowest indexes first; None if none."""
    free = sorted(free, key=lambda g: g.index)
    for first in free:
        group = [first]
        for other in free:
            if other is first:
                continue
            if all(other.key in g.nvlink_peers and g.key in other.nvlink_peers for g in group):
                group.append(other)
                if len(group) == count:
                    return group
    return None


def _describe(demand: Demand) -> str:
    if demand.host_only:
        return "a host-only task"
    if demand.kind is UnitKind.WHOLE:
        return f"{demand.count} whole GPU(s)"
    if demand.kind is UnitKind.SHARED:
        return f"{demand.count} × {demand.milli} milli-GPU"
    return f"{demand.count} × MIG {demand.mig_profile}"
