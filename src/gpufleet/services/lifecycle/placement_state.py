"""The live fleet as the placement engine sees it, read from the state store.

Only what can take new units is loaded: GPUs in the requested sharing mode, on `ready`
nodes, not quarantined, and not draining for a sharing-mode change (`pending_sharing_mode`:
their node already reports another mode, so only their current holders stay). A MIG GPU's
layout is its pending MIG plan when it has one (the agent has not applied it yet),
otherwise the instances its node reports. The layout is fixed — only its existing
instances can be had — on a node whose backend does not apply MIG plans
(`nodes.applies_mig_plans`), and on a GPU with instances its node could not read: a plan
there could never be applied, or would be applied over instances in use. A quarantined
MIG instance is loaded as held: nobody is given it and no plan removes it. Host CPU and
memory left on a node are its capacity less what the requests bound there asked per unit.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.inventory import OUT_OF_SERVICE, GpuHealth, NodeStatus, SharingMode
from gpufleet.domain.placement import FleetState, GpuState, MigSlot, NodeState, free_milli
from gpufleet.domain.requests import FlavourKind
from gpufleet.store.tables import (
    Binding,
    Environment,
    Gpu,
    GpuRequest,
    MigInstance,
    MigPlan,
    Node,
)

MIB = 1024**2

MODE_OF_KIND = {FlavourKind.WHOLE: SharingMode.EXCLUSIVE, FlavourKind.MIG: SharingMode.MIG,
                FlavourKind.SHARED: SharingMode.SHARED}


@dataclass
class LiveFleet:
    """A FleetState plus the database ids behind its keys."""

    state: FleetState
    gpu_ids: dict[str, int] = field(default_factory=dict)      # GPU UUID -> gpus.id
    node_ids: dict[str, int] = field(default_factory=dict)     # node name -> nodes.id


def load(session: Session, *, kinds: Iterable[FlavourKind] = tuple(FlavourKind),
         models: Iterable[str] | None = None, environment: str | None = None,
         node_names: Iterable[str] | None = None) -> LiveFleet:
    """The usable part of the fleet, or of the nodes named (a cache refreshing them)."""
    modes = [MODE_OF_KIND[k].value for k in kinds]
    query = (select(Gpu.id, Gpu.uuid, Gpu.index, Gpu.model, Gpu.sharing_mode, Gpu.allocated,
                    Gpu.used_milli, Gpu.nvlink_peers, Node.id, Node.name, Node.cpu_cores,
                    Node.memory_bytes, Environment.name, Node.applies_mig_plans,
                    Gpu.mig_instances_unread)
             .join(Node, Node.id == Gpu.node_id)
             .join(Environment, Environment.id == Node.environment_id)
             .where(Node.status == NodeStatus.READY.value,
                    Gpu.health.not_in(OUT_OF_SERVICE),
                    Gpu.sharing_mode.in_(modes), Gpu.pending_sharing_mode.is_(None))
             .order_by(Node.id, Gpu.index))
    if models is not None:
        query = query.where(Gpu.model.in_(list(models)))
    if environment is not None:
        query = query.where(Environment.name == environment)
    if node_names is not None:
        query = query.where(Node.name.in_(list(node_names)))
    rows = session.execute(query).all()
    node_ids = {row[8] for row in rows}
    mig_gpu_ids = [row[0] for row in rows if row[4] == SharingMode.MIG.value]
    layouts = _mig_layouts(session, mig_gpu_ids)
    cpu_used, memory_used = _host_use(session, node_ids)

    live = LiveFleet(state=FleetState([]))
    nodes: dict[int, NodeState] = {}
    for (gpu_id, uuid, index, model, mode, allocated, used_milli, peers, node_id, node_name,
         cores, memory_bytes, env_name, applies_mig_plans, mig_unread) in rows:
        node = nodes.get(node_id)
        if node is None:
            node = nodes[node_id] = NodeState(
                name=node_name, gpus=[], environment=env_name,
                cpu_milli_free=cores * 1000 - cpu_used.get(node_id, 0),
                memory_mib_free=memory_bytes // MIB - memory_used.get(node_id, 0))
            live.node_ids[node_name] = node_id
        node.gpus.append(GpuState(
            key=uuid, index=index, model=model, sharing_mode=SharingMode(mode),
            whole_bound=allocated if mode == SharingMode.EXCLUSIVE.value else False,
            used_milli=used_milli, mig_instances=layouts.get(gpu_id, []),
            mig_fixed=not applies_mig_plans or mig_unread > 0,
            nvlink_peers=frozenset(peers or ())))
        live.gpu_ids[uuid] = gpu_id
    live.state = FleetState(nodes.values())
    return live


def models_by_mode(session: Session) -> defaultdict[str, set[str]]:
    """Every GPU model in the fleet per sharing mode, usable or not."""
    found: defaultdict[str, set[str]] = defaultdict(set)
    for mode, model in session.execute(select(Gpu.sharing_mode, Gpu.model).distinct()):
        found[mode].add(model)
    return found


def current_mig_layouts(session: Session, gpu_ids: Iterable[int]
                        ) -> dict[int, list[tuple[int, int]]]:
    """Each MIG GPU's layout now, as (profile id, start): its pending plan, else the
    instances its node reports (the agent has not applied the plan yet)."""
    gpu_ids = list(gpu_ids)
    layouts = {gpu_id: [(int(p), int(s)) for p, s in layout] for gpu_id, layout in
               session.execute(select(MigPlan.gpu_id, MigPlan.layout)
                               .where(MigPlan.gpu_id.in_(gpu_ids)))}
    reported: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for gpu_id, profile_id, start in session.execute(
            select(MigInstance.gpu_id, MigInstance.profile_id, MigInstance.placement_start)
            .where(MigInstance.gpu_id.in_(gpu_ids), MigInstance.placement_start.is_not(None))):
        reported[gpu_id].append((profile_id, start))
    for gpu_id, instances in reported.items():
        layouts.setdefault(gpu_id, instances)
    return layouts


def _mig_layouts(session: Session, gpu_ids: list[int]) -> dict[int, list[MigSlot]]:
    """Each MIG GPU's instances, marked bound where a binding holds them or a quarantine
    does: a quarantined instance is neither given out nor dropped by a re-partition, so
    the memory it was struck on is not handed to a new instance before the GPU's reset
    (docs/operations.md, "MIG instances")."""
    if not gpu_ids:
        return {}
    bound = {(g, p, s) for g, p, s in session.execute(
        select(Binding.gpu_id, Binding.mig_profile_id, Binding.mig_start)
        .where(Binding.gpu_id.in_(gpu_ids), Binding.ended_at.is_(None)))}
    bound |= quarantined_mig_instances(session, gpu_ids)
    return {gpu_id: [MigSlot(profile_id=p, start=s, bound=(gpu_id, p, s) in bound)
                     for p, s in instances]
            for gpu_id, instances in current_mig_layouts(session, gpu_ids).items()}


def quarantined_mig_instances(session: Session, gpu_ids: Iterable[int]
                              ) -> set[tuple[int, int, int | None]]:
    """(GPU id, profile id, start) of the quarantined MIG instances on these GPUs."""
    return {(g, p, s) for g, p, s in session.execute(
        select(MigInstance.gpu_id, MigInstance.profile_id, MigInstance.placement_start)
        .where(MigInstance.gpu_id.in_(list(gpu_ids)),
               MigInstance.health == GpuHealth.QUARANTINED.value))}


def free_milli_by_mode(nodes: Iterable[NodeState]) -> Counter[tuple[str, str]]:
    """Free milli-GPU of usable GPUs per (sharing mode, model) on these nodes."""
    free: Counter[tuple[str, str]] = Counter()
    for node in nodes:
        for gpu in node.gpus:
            free[(gpu.sharing_mode.value, gpu.model)] += free_milli(gpu)
    return free


def _host_use(session: Session, node_ids: set[int]) -> tuple[dict[int, int], dict[int, int]]:
    """CPU milli and memory MiB that open bindings took on each node."""
    if not node_ids:
        return {}, {}
    rows = session.execute(
        select(Binding.node_id, func.sum(GpuRequest.cpu_milli_per_unit),
               func.sum(GpuRequest.memory_mib_per_unit))
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(Binding.ended_at.is_(None), Binding.node_id.in_(list(node_ids)))
        .group_by(Binding.node_id))
    cpu: dict[int, int] = {}
    memory: dict[int, int] = {}
    for node_id, cpu_milli, memory_mib in rows:
        cpu[node_id], memory[node_id] = int(cpu_milli or 0), int(memory_mib or 0)
    return cpu, memory
