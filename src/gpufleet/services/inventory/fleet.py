"""Reading the inventory: the fleet summary, GPU and node listings, and GPU details.

Members see the whole inventory but only their own projects' allocation details: the
`allocation` / `project` label values of other projects are withheld, value by value (a
shared or MIG GPU carries one value per allocation and project holding it).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import exists, false, func, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.inventory import GpuStatus, canonical_gpu_uuid
from gpufleet.domain.requests import request_id_from_code
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import not_found
from gpufleet.services.paging import apply_page, parse_sort, split_page
from gpufleet.store.tables import Environment, Gpu, GpuLabel, GpuRequest, Node, NodeLabel, Project
from gpufleet.wire.base import Page
from gpufleet.wire.inventory import (
    EnvironmentSummary,
    FleetSummary,
    GpuView,
    MigInstanceView,
    ModelSummary,
    NodeDetail,
    NodeView,
    SummaryCell,
)

ALLOCATION_LABELS = ("allocation", "project")

GPU_SORTS = {
    "uuid": (Gpu.uuid,),
    "node": (Node.name, Gpu.index, Gpu.uuid),
    "environment": (Environment.name, Gpu.uuid),
    "model": (Gpu.model, Gpu.uuid),
    "status": (Gpu.status, Gpu.uuid),
    "health": (Gpu.health, Gpu.uuid),
    "memory": (func.coalesce(Gpu.memory_bytes, -1), Gpu.uuid),
}

NODE_SORTS = {
    "name": (Node.name,),
    "environment": (Environment.name, Node.name),
    "status": (Node.status, Node.name),
    "cpu_cores": (Node.cpu_cores, Node.name),
    "memory": (Node.memory_bytes, Node.name),
}


def parse_labels(selectors: list[str]) -> list[tuple[str, str]]:
    """`key=value` strings from a query, as pairs; a malformed one is a 400 naming it."""
    pairs = []
    for selector in selectors:
        key, sep, value = selector.partition("=")
        if not sep or not key:
            raise InvalidInput(f"label selector '{selector}' is not key=value",
                               code="invalid_label_selector", details={"label": selector})
        pairs.append((key.strip(), value.strip()))
    return pairs


@dataclass
class GpuFilter:
    environment: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    health: list[str] = field(default_factory=list)
    sharing_mode: list[str] = field(default_factory=list)
    node: str | None = None
    label: list[str] = field(default_factory=list)
    node_label: list[str] = field(default_factory=list)
    model_known: bool | None = None


@dataclass
class NodeFilter:
    environment: list[str] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    model: list[str] = field(default_factory=list)
    health: list[str] = field(default_factory=list)
    label: list[str] = field(default_factory=list)


def _own_label(principal: Principal, key: str, value: str):
    """Whether a member may see (and so filter on) this `allocation` / `project` value: one
    of their projects, or an allocation of one; a condition, true or false in SQL."""
    if key == "project":
        return exists().where(Project.name == value) if principal.sees_project(value) \
            else false()
    return exists().where(GpuRequest.id == (request_id_from_code(value) or -1),
                          Project.id == GpuRequest.project_id,
                          Project.name.in_(sorted(principal.project_names)))


def _gpu_conditions(f: GpuFilter, principal: Principal) -> list:
    conditions = []
    if f.environment:
        conditions.append(Environment.name.in_(f.environment))
    if f.model:
        conditions.append(Gpu.model.in_(f.model))
    if f.status:
        conditions.append(Gpu.status.in_(f.status))
    if f.health:
        conditions.append(Gpu.health.in_(f.health))
    if f.sharing_mode:
        conditions.append(Gpu.sharing_mode.in_(f.sharing_mode))
    if f.node:
        conditions.append(Node.name == f.node)
    if f.model_known is not None:
        conditions.append(Gpu.model_known.is_(f.model_known))
    for key, value in parse_labels(f.label):
        conditions.append(exists().where(GpuLabel.gpu_id == Gpu.id, GpuLabel.key == key,
                                         GpuLabel.value == value))
        if key in ALLOCATION_LABELS and principal.visible_projects is not None:
            # A label value the listing withholds must not be found by filtering on it.
            conditions.append(_own_label(principal, key, value))
    for key, value in parse_labels(f.node_label):
        conditions.append(exists().where(NodeLabel.node_id == Gpu.node_id, NodeLabel.key == key,
                                         NodeLabel.value == value))
    return conditions


def visible_allocations(session: Session, principal: Principal,
                        gpus: list[Gpu]) -> frozenset[str] | None:
    """The `allocation` label values of `gpus` the caller may see: None for all (operators,
    viewers); a member's, those of their projects (one query for the whole page)."""
    if principal.visible_projects is None:
        return None
    ids = {request_id_from_code(label.value): label.value for gpu in gpus
           for label in gpu.labels if label.key == "allocation"}
    ids.pop(None, None)
    if not ids or not principal.project_names:
        return frozenset()
    owned = session.scalars(select(GpuRequest.id).join(Project, Project.id ==
                                                       GpuRequest.project_id)
                            .where(GpuRequest.id.in_(ids),
                                   Project.name.in_(sorted(principal.project_names))))
    return frozenset(ids[i] for i in owned)


def gpu_labels(principal: Principal, gpu: Gpu,
               allocations: frozenset[str] | None) -> dict[str, str]:
    """The GPU's labels, a key with several values (`allocation`, `project` on a shared or
    MIG GPU held by several allocations) as its values sorted and comma-separated; a
    member's view keeps only their projects and `allocations`."""
    values: dict[str, set[str]] = defaultdict(set)
    for label in gpu.labels:
        if label.key == "project" and not principal.sees_project(label.value):
            continue
        if label.key == "allocation" and allocations is not None and \
                label.value not in allocations:
            continue
        values[label.key].add(label.value)
    return {key: ",".join(sorted(vs)) for key, vs in sorted(values.items())}


def gpu_view(principal: Principal, gpu: Gpu, node_name: str, environment: str,
             allocations: frozenset[str] | None = None) -> GpuView:
    labels = gpu_labels(principal, gpu, allocations)
    return GpuView(
        uuid=gpu.uuid, node=node_name, environment=environment, index=gpu.index,
        model=gpu.model, model_known=gpu.model_known, reported_name=gpu.reported_name,
        pci_device_id=gpu.pci_device_id, pci_bus_id=gpu.pci_bus_id,
        memory_bytes=gpu.memory_bytes, driver_version=gpu.driver_version,
        sharing_mode=gpu.sharing_mode, pending_sharing_mode=gpu.pending_sharing_mode,
        nvlink_peers=gpu.nvlink_peers, health=gpu.health,
        health_reason=gpu.health_reason, status=gpu.status, labels=labels,
        mig_instances=[MigInstanceView.model_validate(m) for m in gpu.mig_instances],
        first_seen_at=gpu.first_seen_at)


def list_gpus(session: Session, principal: Principal, f: GpuFilter, sort: str,
              cursor: str | None, limit: int) -> Page[GpuView]:
    principal.require(Action.READ_INVENTORY)
    spec = parse_sort(sort, GPU_SORTS)
    query = (select(Gpu, Node.name, Environment.name, *spec.columns)
             .join(Node, Node.id == Gpu.node_id)
             .join(Environment, Environment.id == Gpu.environment_id)
             .where(*_gpu_conditions(f, principal)))
    rows = session.execute(apply_page(query, spec, cursor, limit)).all()
    width = len(spec.columns)
    rows, next_cursor = split_page(rows, limit, lambda row: tuple(row)[-width:])
    allocations = visible_allocations(session, principal, [row[0] for row in rows])
    return Page[GpuView](items=[gpu_view(principal, gpu, node, env, allocations)
                                for gpu, node, env, *_ in rows], next_cursor=next_cursor)


def get_gpu(session: Session, principal: Principal, uuid: str) -> GpuView:
    principal.require(Action.READ_INVENTORY)
    row = session.execute(
        select(Gpu, Node.name, Environment.name).join(Node, Node.id == Gpu.node_id)
        .join(Environment, Environment.id == Gpu.environment_id)
        .where(Gpu.uuid == canonical_gpu_uuid(uuid))).first()
    if row is None:
        raise not_found("gpu", uuid, label="GPU")
    gpu, node, environment = row
    return gpu_view(principal, gpu, node, environment,
                    visible_allocations(session, principal, [gpu]))


def _node_conditions(f: NodeFilter) -> list:
    conditions = []
    if f.environment:
        conditions.append(Environment.name.in_(f.environment))
    if f.status:
        conditions.append(Node.status.in_(f.status))
    if f.model:
        conditions.append(exists().where(Gpu.node_id == Node.id, Gpu.model.in_(f.model)))
    if f.health:
        conditions.append(exists().where(Gpu.node_id == Node.id, Gpu.health.in_(f.health)))
    for key, value in parse_labels(f.label):
        conditions.append(exists().where(NodeLabel.node_id == Node.id, NodeLabel.key == key,
                                         NodeLabel.value == value))
    return conditions


def node_view(node: Node, environment: str, gpus: int) -> NodeView:
    return NodeView(
        name=node.name, machine_id=node.machine_id, environment=environment,
        status=node.status, status_reason=node.status_reason, cpu_cores=node.cpu_cores,
        memory_bytes=node.memory_bytes, labels={lb.key: lb.value for lb in node.labels},
        agent_version=node.agent_version, os_name=node.os_name,
        driver_version=node.driver_version, cuda_version=node.cuda_version,
        registered_at=node.registered_at, last_seen_at=node.last_seen_at, gpus=gpus,
        desired_state_version=node.desired_state_version)


def list_nodes(session: Session, principal: Principal, f: NodeFilter, sort: str,
               cursor: str | None, limit: int) -> Page[NodeView]:
    principal.require(Action.READ_INVENTORY)
    spec = parse_sort(sort, NODE_SORTS)
    gpu_count = (select(func.count()).where(Gpu.node_id == Node.id)
                 .correlate(Node).scalar_subquery())
    query = (select(Node, Environment.name, gpu_count, *spec.columns)
             .join(Environment, Environment.id == Node.environment_id)
             .where(*_node_conditions(f)))
    rows = session.execute(apply_page(query, spec, cursor, limit)).all()
    width = len(spec.columns)
    rows, next_cursor = split_page(rows, limit, lambda row: tuple(row)[-width:])
    return Page[NodeView](items=[node_view(node, env, count) for node, env, count, *_ in rows],
                          next_cursor=next_cursor)


def get_node_detail(session: Session, principal: Principal, name: str) -> NodeDetail:
    principal.require(Action.READ_INVENTORY)
    row = session.execute(select(Node, Environment.name)
                          .join(Environment, Environment.id == Node.environment_id)
                          .where(Node.name == name)).first()
    if row is None:
        raise not_found("node", name)
    node, environment = row
    gpus = session.scalars(select(Gpu).where(Gpu.node_id == node.id).order_by(Gpu.index)).all()
    view = node_view(node, environment, len(gpus))
    allocations = visible_allocations(session, principal, list(gpus))
    return NodeDetail(**view.model_dump(), gpu_list=[
        gpu_view(principal, g, node.name, environment, allocations) for g in gpus])


def summary(session: Session, principal: Principal) -> FleetSummary:
    """GPUs by environment × model × status from one grouped scan of the summary index."""
    principal.require(Action.READ_INVENTORY)
    environments = {e.id: e for e in session.scalars(select(Environment))}
    node_counts = dict(session.execute(
        select(Node.environment_id, func.count())
        .where(Node.status != "retired").group_by(Node.environment_id)).all())
    grouped = session.execute(
        select(Gpu.environment_id, Gpu.model, Gpu.status, func.count())
        .group_by(Gpu.environment_id, Gpu.model, Gpu.status)).all()
    cells = sorted((SummaryCell(environment=environments[env_id].name, model=model,
                                status=status, gpus=count)
                    for env_id, model, status, count in grouped),
                   key=lambda c: (c.environment, c.model, c.status))
    retired = GpuStatus.RETIRED.value
    live = [c for c in cells if c.status != retired]

    def tally(selected: list[SummaryCell]) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for cell in selected:
            counts[cell.status] += cell.gpus
        return dict(sorted(counts.items()))

    def models(selected: list[SummaryCell]) -> list[ModelSummary]:
        by_model: dict[str, list[SummaryCell]] = defaultdict(list)
        for cell in selected:
            by_model[cell.model].append(cell)
        return [ModelSummary(model=m, total_gpus=sum(c.gpus for c in cs), by_status=tally(cs))
                for m, cs in sorted(by_model.items())]

    by_environment = []
    for env in sorted(environments.values(), key=lambda e: e.name):
        env_cells = [c for c in live if c.environment == env.name]
        by_environment.append(EnvironmentSummary(
            environment=env.name, kind=env.kind, nodes=node_counts.get(env.id, 0),
            total_gpus=sum(c.gpus for c in env_cells), by_status=tally(env_cells),
            models=models(env_cells)))
    return FleetSummary(
        total_gpus=sum(c.gpus for c in live),
        retired_gpus=sum(c.gpus for c in cells if c.status == retired),
        nodes=sum(node_counts.values()), by_status=tally(live),
        by_environment=by_environment, by_model=models(live), cells=cells)
