"""Bindings: the interval table that says which allocation holds which unit, and when.

Opening a binding claims its slots (docs/design.md, "Placement"): a whole GPU is slot -1, a MIG
instance the memory slices it covers; the claims' primary key refuses a second holder on SQLite and
PostgreSQL alike. A shared GPU is claimed by a conditional update of `used_milli` that cannot pass
1000. Slots and fractions only guard units of one kind, so every binding also passes the **binding
guard**: a conditional update of its GPU that counts the open bindings (`open_bindings`,
`bound_kind`) and matches only while the GPU is in the binding's sharing mode and holds no binding
of another kind — a whole GPU, MIG instances and fractions of one GPU are never held at once,
whatever the placement believed. A GPU's mode changes only when it holds nothing: a mode its node
reports meanwhile is kept pending (`pending_sharing_mode`), the GPU drains (the guard lets no new
binding onto it), and the mode is applied here when its last binding ends.

Granting also stamps the `allocation` / `project` labels and bumps the desired-state version
of every node involved, so its agent learns the change on its next heartbeat. Closing ends
the interval; the row stays as history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session, raiseload

from gpufleet.domain.errors import Conflict
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.inventory import OUT_OF_SERVICE, GpuHealth, GpuStatus, NodeStatus, gpu_status
from gpufleet.domain.mig import mig_unit_name
from gpufleet.domain.placement import Decision, UnitChoice, UnitKind
from gpufleet.domain.requests import FlavourKind, request_code
from gpufleet.services.access import audit
from gpufleet.services.lifecycle.placement_state import (
    MODE_OF_KIND,
    current_mig_layouts,
    quarantined_mig_instances,
)
from gpufleet.store.tables import (
    Binding,
    Gpu,
    GpuLabel,
    GpuRequest,
    MigInstance,
    MigPlan,
    Node,
    Project,
    SlotClaim,
)
from gpufleet.wire.agent import DesiredState, MigPlanInstance, UnitBinding
from gpufleet.wire.agent import MigPlan as MigPlanView
from gpufleet.wire.requests import UnitView

WHOLE_GPU_SLOT = -1
MIB = 1024**2
RELEASED_NODE_IDS = "gpufleet.released_node_ids"  # session.info key: nodes whose units freed
MODES_CHANGED = "gpufleet.sharing_modes_changed"  # session.info key: nodes where a pending
#   sharing mode applied (by name: a node whose GPUs all drained is not in the placement cache)
SYSTEM_ACTOR = "system:lifecycle"


class UnitTaken(Conflict):
    """A unit the placement chose was taken (or became unusable) before the commit."""

    default_code = "unit_taken"


def _slots(unit: UnitChoice, model: str) -> list[int]:
    """The slots a unit claims: the whole GPU, or the memory slices of its MIG instance."""
    if unit.kind is UnitKind.WHOLE:
        return [WHOLE_GPU_SLOT]
    found = catalogue_model(model)
    profile = found.mig.profile(unit.mig_profile_id) if found and found.mig else None
    if profile is None or unit.mig_start is None:
        raise UnitTaken(f"MIG profile {unit.mig_profile_id} is unknown on {model}")
    placement = profile.placement_at(unit.mig_start)
    if placement is None:
        raise UnitTaken(f"{profile.name} cannot start at slice {unit.mig_start} on {model}")
    return list(placement.slices)


@dataclass(frozen=True)
class Opening:
    """One granted request to write: its decision, on the fleet's keys."""

    request: GpuRequest
    decision: Decision
    project_name: str


def open_bindings(session: Session, openings: Sequence[Opening], gpu_ids: dict[str, int],
                  node_ids: dict[str, int], now: datetime) -> dict[int, list[Binding]]:
    """Write placement decisions: bindings, claims, usage, labels, MIG plans, versions.

    A batch of grants is written together, in a handful of statements whatever its size.
    The placement may have been decided on a cached fleet, so what it relied on is checked
    here, inside the transaction. Raises UnitTaken (409) when the database refuses a claim
    or a check fails; the caller's transaction then rolls back, so nothing is
    half-allocated. Returns each request's bindings.
    """
    placed = [(o, sorted(o.decision.units, key=lambda u: (gpu_ids[u.gpu], u.mig_start or 0)))
              for o in openings]
    gpus = {g.id: g for g in session.scalars(
        select(Gpu).options(raiseload(Gpu.labels), raiseload(Gpu.mig_instances))
        .where(Gpu.id.in_({gpu_ids[u.gpu] for _, units in placed for u in units})))}
    _check_usable(session, gpus.values(), placed, gpu_ids)
    opened = {o.request.id: [Binding(
        request_id=o.request.id, project_id=o.request.project_id, gpu_id=gpu_ids[u.gpu],
        node_id=node_ids[u.node], kind=u.kind.value, mig_profile_id=u.mig_profile_id,
        mig_start=u.mig_start, milli=u.milli, started_at=now) for u in units]
        for o, units in placed}
    session.add_all(b for bindings in opened.values() for b in bindings)
    session.flush()
    claims, shared_milli = [], defaultdict(int)
    for opening, units in placed:
        for unit, binding in zip(units, opened[opening.request.id], strict=True):
            gpu = gpus[binding.gpu_id]
            if unit.kind is UnitKind.SHARED:
                shared_milli[gpu.id] += unit.milli
            else:
                claims += [{"gpu_id": gpu.id, "slot": s, "binding_id": binding.id}
                           for s in _slots(unit, gpu.model)]
    if claims:  # the claims' primary key refuses a unit held twice, here
        session.execute(insert(SlotClaim), claims)
    for gpu_id, milli in shared_milli.items():
        _raise_shared_use(session, gpus[gpu_id], milli)
    _guard_binding_kinds(session, gpus, [b for bs in opened.values() for b in bs])
    _check_mig_health(session, placed, gpu_ids)
    _check_host_capacity(session, openings, node_ids)
    _stamp_labels(session, [(o.request.id, o.project_name,
                             {b.gpu_id for b in opened[o.request.id]}) for o in openings])
    _write_mig_plans(session, openings, gpu_ids, node_ids, now)
    bump_desired_state(session, {b.node_id for bs in opened.values() for b in bs})
    return opened


def _check_usable(session: Session, gpus: Iterable[Gpu],
                  placed: list[tuple[Opening, list[UnitChoice]]],
                  gpu_ids: dict[str, int]) -> None:
    """Re-check, inside the transaction, what the placement read: healthy GPUs in the
    sharing mode of their units, ready nodes, and MIG layouts as the decision saw them."""
    by_id = {gpu.id: gpu for gpu in gpus}
    for _, units in placed:
        for unit in units:
            gpu = by_id[gpu_ids[unit.gpu]]
            if gpu.health in OUT_OF_SERVICE:
                raise UnitTaken(f"GPU {gpu.uuid} was {gpu.health} meanwhile")
            if gpu.sharing_mode != MODE_OF_KIND[FlavourKind(unit.kind.value)].value:
                raise UnitTaken(f"GPU {gpu.uuid} is in {gpu.sharing_mode} mode now")
    not_ready = session.scalars(select(Node.name).where(
        Node.id.in_({gpu.node_id for gpu in by_id.values()}),
        Node.status != NodeStatus.READY.value)).all()
    if not_ready:
        raise UnitTaken(f"node {not_ready[0]} is no longer ready")
    _check_mig_layouts(session, placed, gpu_ids)


def sharing_mode_of_kind(kind: str) -> str:
    """The sharing mode a GPU must be in to hold a binding of `kind` (whole, mig, shared)."""
    return MODE_OF_KIND[FlavourKind(kind)].value


# A GPU that a retirement or quarantine took out: never bound, even by a grant racing it.
_GONE = (GpuStatus.RETIRED.value, GpuStatus.QUARANTINED.value)


def _guard_binding_kinds(session: Session, gpus: dict[int, Gpu],
                         opened: list[Binding]) -> None:
    """The binding guard (module docstring): count the new bindings on their GPUs, in one
    conditional update per (kind, bindings per GPU) — matching only GPUs in the kind's
    sharing mode, not draining, not retired or quarantined, that hold nothing or bindings of
    the same kind. A GPU it does not match raises UnitTaken, and the transaction rolls back.

    `_check_usable` reads without a lock, so on PostgreSQL an operator's retirement or
    quarantine can commit after it and before this grant; that transaction has already
    ended the bindings it saw and will not see this one. This update waits for the row lock
    and re-reads the row, so its status condition refuses such a GPU here."""
    kinds: dict[int, set[str]] = defaultdict(set)
    counts: dict[int, int] = defaultdict(int)
    for binding in opened:
        kinds[binding.gpu_id].add(binding.kind)
        counts[binding.gpu_id] += 1
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for gpu_id, found in kinds.items():
        if len(found) > 1:
            raise UnitTaken(f"GPU {gpus[gpu_id].uuid} would hold {' and '.join(sorted(found))} "
                            "units at once")
        groups[(found.pop(), counts[gpu_id])].append(gpu_id)
    for (kind, n), gpu_ids in groups.items():
        matched = session.execute(
            update(Gpu).where(Gpu.id.in_(gpu_ids),
                              Gpu.sharing_mode == sharing_mode_of_kind(kind),
                              Gpu.pending_sharing_mode.is_(None),
                              Gpu.status.not_in(_GONE),
                              or_(Gpu.open_bindings == 0, Gpu.bound_kind == kind))
            .values(open_bindings=Gpu.open_bindings + n, bound_kind=kind, allocated=True,
                    status=GpuStatus.ALLOCATED.value)
            .execution_options(synchronize_session=False)).rowcount
        if matched != len(gpu_ids):
            held = session.scalars(select(Gpu.uuid).where(
                Gpu.id.in_(gpu_ids), or_(Gpu.sharing_mode != sharing_mode_of_kind(kind),
                                         Gpu.pending_sharing_mode.is_not(None),
                                         Gpu.status.in_(_GONE),
                                         Gpu.bound_kind != kind))).first()
            raise UnitTaken(f"GPU {held} is no longer in {sharing_mode_of_kind(kind)} mode, "
                            f"is draining for another, was retired or quarantined meanwhile, "
                            f"or holds units of another kind")


def _check_mig_layouts(session: Session, placed: list[tuple[Opening, list[UnitChoice]]],
                       gpu_ids: dict[str, int]) -> None:
    """A MIG unit binds an instance the GPU has (or the batch plans), and a re-partition
    replaces the layout the GPU has now."""
    mig_gpus = {gpu_ids[u.gpu] for _, units in placed for u in units if u.kind is UnitKind.MIG}
    if not mig_gpus:
        return
    current = {gpu_id: set(layout)
               for gpu_id, layout in current_mig_layouts(session, mig_gpus).items()}
    for opening, units in placed:
        for key, previous in opening.decision.previous_mig_layouts.items():
            gpu_id = gpu_ids[key]
            if current.get(gpu_id, set()) != {(s.profile_id, s.start) for s in previous}:
                raise UnitTaken(f"the MIG layout of GPU {key} changed meanwhile")
            current[gpu_id] = {(spec.profile_id, spec.start)
                               for spec in opening.decision.mig_layouts[key]}
        for unit in units:
            if unit.kind is UnitKind.MIG and ((unit.mig_profile_id, unit.mig_start)
                                              not in current.get(gpu_ids[unit.gpu], set())):
                raise UnitTaken(f"MIG instance {unit.mig_profile_id}@{unit.mig_start} on "
                                f"{unit.gpu} does not exist (or is no longer planned)")


def _check_mig_health(session: Session, placed: list[tuple[Opening, list[UnitChoice]]],
                      gpu_ids: dict[str, int]) -> None:
    """No unit on a quarantined MIG instance, and no re-partition that drops one. Read
    after the binding guard took the GPUs' rows: a MIG instance's quarantine holds its
    GPU's row too, so one that committed meanwhile is seen here."""
    mig_gpus = {gpu_ids[u.gpu] for _, units in placed for u in units if u.kind is UnitKind.MIG}
    if not mig_gpus:
        return
    quarantined = quarantined_mig_instances(session, mig_gpus)
    if not quarantined:
        return
    for opening, units in placed:
        for unit in units:
            if (gpu_ids[unit.gpu], unit.mig_profile_id, unit.mig_start) in quarantined:
                raise UnitTaken(f"MIG instance {unit.mig_profile_id}@{unit.mig_start} on "
                                f"{unit.gpu} was quarantined meanwhile")
        for key, layout in opening.decision.mig_layouts.items():
            kept = {(gpu_ids[key], spec.profile_id, spec.start) for spec in layout}
            if any(q[0] == gpu_ids[key] and q not in kept for q in quarantined):
                raise UnitTaken(f"the MIG plan for {key} would drop a quarantined instance")


def _check_host_capacity(session: Session, openings: Sequence[Opening],
                         node_ids: dict[str, int]) -> None:
    """Host CPU and memory are not slots: sum what open bindings took on each node the
    batch asked host resources of, and refuse the batch if a node is over."""
    asking = {node_ids[name] for o in openings
              if o.request.cpu_milli_per_unit or o.request.memory_mib_per_unit
              for name in o.decision.nodes}
    if not asking:
        return
    rows = session.execute(
        select(Node.name, Node.cpu_cores, Node.memory_bytes,
               func.sum(GpuRequest.cpu_milli_per_unit), func.sum(GpuRequest.memory_mib_per_unit))
        .join(Binding, Binding.node_id == Node.id)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(Node.id.in_(asking), Binding.ended_at.is_(None))
        .group_by(Node.id, Node.name, Node.cpu_cores, Node.memory_bytes))
    for name, cores, memory_bytes, cpu_milli, memory_mib in rows:
        if (cpu_milli or 0) > cores * 1000 or (memory_mib or 0) > memory_bytes // MIB:
            raise UnitTaken(f"node {name} no longer has the host CPU or memory asked for")


def _raise_shared_use(session: Session, gpu: Gpu, milli: int) -> None:
    """The conditional update of docs/design.md, "Placement": it matches no row once the GPU is
    full."""
    result = session.execute(
        update(Gpu).where(Gpu.id == gpu.id, Gpu.used_milli + milli <= 1000)
        .values(used_milli=Gpu.used_milli + milli)
        .execution_options(synchronize_session=False))
    if result.rowcount != 1:
        raise UnitTaken(f"shared GPU {gpu.uuid} has no {milli} milli left")


def _stamp_labels(session: Session, grants: list[tuple[int, str, set[int]]]) -> None:
    """`allocation` and `project` labels on the GPUs of each (request id, project, GPUs)."""
    wanted = {(g, k, v) for request_id, project, gpu_ids in grants for g in gpu_ids
              for k, v in (("allocation", request_code(request_id)), ("project", project))}
    existing = set(session.execute(
        select(GpuLabel.gpu_id, GpuLabel.key, GpuLabel.value)
        .where(GpuLabel.gpu_id.in_({g for g, _, _ in wanted}),
               GpuLabel.key.in_(("allocation", "project")))))
    missing = [{"gpu_id": g, "key": k, "value": v} for g, k, v in sorted(wanted - existing)]
    if missing:
        session.execute(insert(GpuLabel), missing)


def _write_mig_plans(session: Session, openings: Sequence[Opening], gpu_ids: dict[str, int],
                     node_ids: dict[str, int], now: datetime) -> None:
    planned = [(o, key, layout) for o in openings
               for key, layout in o.decision.mig_layouts.items()]
    if not planned:
        return
    plans = {p.gpu_id: p for p in session.scalars(
        select(MigPlan).where(MigPlan.gpu_id.in_({gpu_ids[key] for _, key, _ in planned})))}
    for opening, key, layout in planned:
        node = next(u.node for u in opening.decision.units if u.gpu == key)
        instances = [[spec.profile_id, spec.start] for spec in layout]
        plan = plans.get(gpu_ids[key])
        if plan is None:
            plans[gpu_ids[key]] = plan = MigPlan(gpu_id=gpu_ids[key], node_id=node_ids[node],
                                                 layout=instances, created_at=now,
                                                 request_id=opening.request.id)
            session.add(plan)
        else:
            plan.layout, plan.created_at, plan.request_id = instances, now, opening.request.id


def retire_applied_mig_plans(session: Session, gpus: Iterable[Gpu]) -> None:
    """Drop the MIG plans a node now reports as done: its instances are the truth again."""
    by_id = {gpu.id: gpu for gpu in gpus}
    if not by_id:
        return
    for plan in session.scalars(select(MigPlan).where(MigPlan.gpu_id.in_(by_id))):
        reported = {(m.profile_id, m.placement_start) for m in by_id[plan.gpu_id].mig_instances}
        if reported == {(p, s) for p, s in plan.layout}:
            session.delete(plan)


def bump_desired_state(session: Session, node_ids: Iterable[int]) -> None:
    ids = list(set(node_ids))
    if ids:
        session.execute(update(Node).where(Node.id.in_(ids))
                        .values(desired_state_version=Node.desired_state_version + 1)
                        .execution_options(synchronize_session=False))


def close_bindings(session: Session, request: GpuRequest, project_name: str, now: datetime,
                   reason: str, *, on_gpu_ids: Iterable[int] | None = None,
                   on_mig_place: tuple[int, int] | None = None) -> list[Binding]:
    """End every open binding of the request (only those on `on_gpu_ids`, when given: the
    units a retirement or quarantine takes away; only those on the MIG instance at
    `on_mig_place` (profile id, start) of them, when given too); free their slots,
    fractions and labels."""
    query = select(Binding).where(Binding.request_id == request.id, Binding.ended_at.is_(None))
    if on_gpu_ids is not None:
        query = query.where(Binding.gpu_id.in_(list(on_gpu_ids)))
    if on_mig_place is not None:
        query = query.where(Binding.mig_profile_id == on_mig_place[0],
                            Binding.mig_start == on_mig_place[1])
    bindings = list(session.scalars(query))
    if not bindings:
        return []
    for binding in bindings:
        binding.ended_at, binding.end_reason = now, reason
    session.execute(delete(SlotClaim).where(SlotClaim.binding_id.in_([b.id for b in bindings])))
    shared = defaultdict(int)
    for binding in bindings:
        if binding.kind == UnitKind.SHARED.value:
            shared[binding.gpu_id] += binding.milli
    for gpu_id, milli in shared.items():
        session.execute(update(Gpu).where(Gpu.id == gpu_id)
                        .values(used_milli=Gpu.used_milli - milli)
                        .execution_options(synchronize_session=False))
    _release_binding_guard(session, bindings)
    session.flush()
    gpu_ids = {b.gpu_id for b in bindings}
    # a quarantined MIG instance ends one binding of several the request may hold on the
    # GPU: the GPU keeps the allocation's label while another of them stays open
    gpu_ids_freed = gpu_ids - set(session.scalars(select(Binding.gpu_id).where(
        Binding.gpu_id.in_(gpu_ids), Binding.request_id == request.id,
        Binding.ended_at.is_(None)))) if on_mig_place is not None else gpu_ids
    _unstamp_labels(session, gpu_ids_freed, request_code(request.id), request.project_id,
                    project_name)
    _refresh_allocated(session, gpu_ids)
    _apply_pending_modes(session, gpu_ids, request_code(request.id), now)
    bump_desired_state(session, {b.node_id for b in bindings})
    session.info.setdefault(RELEASED_NODE_IDS, set()).update(b.node_id for b in bindings)
    return bindings


def _release_binding_guard(session: Session, closed: list[Binding]) -> None:
    """Count the closed bindings off their GPUs; a GPU left holding nothing holds no kind.
    The new values come from the row as the update finds it, so concurrent grants and
    releases of one GPU never lose a count."""
    per_gpu: dict[int, int] = defaultdict(int)
    for binding in closed:
        per_gpu[binding.gpu_id] += 1
    by_count: dict[int, list[int]] = defaultdict(list)
    for gpu_id, n in per_gpu.items():
        by_count[n].append(gpu_id)
    for n, gpu_ids in by_count.items():
        session.execute(update(Gpu).where(Gpu.id.in_(gpu_ids)).values(
            open_bindings=case((Gpu.open_bindings > n, Gpu.open_bindings - n), else_=0),
            bound_kind=case((Gpu.open_bindings > n, Gpu.bound_kind), else_=None))
            .execution_options(synchronize_session=False))


def _apply_pending_modes(session: Session, gpu_ids: set[int], allocation: str,
                         now: datetime) -> None:
    """A GPU whose node reported another sharing mode while it was held takes that mode
    once it holds nothing (the update re-checks, so a grant that came first keeps it)."""
    rows = session.execute(select(Gpu.id, Gpu.uuid, Gpu.sharing_mode, Gpu.pending_sharing_mode,
                                  Node.name).join(Node, Node.id == Gpu.node_id)
                           .where(Gpu.id.in_(gpu_ids), Gpu.open_bindings == 0,
                                  Gpu.pending_sharing_mode.is_not(None))).all()
    for gpu_id, uuid, old_mode, new_mode, node_name in rows:
        applied = session.execute(
            update(Gpu).where(Gpu.id == gpu_id, Gpu.open_bindings == 0,
                              Gpu.pending_sharing_mode == new_mode)
            .values(sharing_mode=new_mode, pending_sharing_mode=None)
            .execution_options(synchronize_session=False)).rowcount
        if not applied:
            continue
        session.execute(delete(MigPlan).where(MigPlan.gpu_id == gpu_id))  # the old mode's
        session.info.setdefault(MODES_CHANGED, set()).add(node_name)
        audit.record(session, at=now, actor=SYSTEM_ACTOR, action="gpu.sharing_mode_changed",
                     subject_kind="gpu", subject=uuid, reason=f"its last binding ended "
                     f"({allocation}); the mode its node reported applies now",
                     **{"from": old_mode, "to": new_mode})


def _unstamp_labels(session: Session, gpu_ids: set[int], allocation: str, project_id: int,
                    project_name: str) -> None:
    session.execute(delete(GpuLabel).where(GpuLabel.gpu_id.in_(gpu_ids),
                                           GpuLabel.key == "allocation",
                                           GpuLabel.value == allocation))
    still_held = set(session.scalars(select(Binding.gpu_id).where(
        Binding.gpu_id.in_(gpu_ids), Binding.project_id == project_id,
        Binding.ended_at.is_(None))))
    freed = gpu_ids - still_held
    if freed:
        session.execute(delete(GpuLabel).where(GpuLabel.gpu_id.in_(freed),
                                               GpuLabel.key == "project",
                                               GpuLabel.value == project_name))


def _refresh_allocated(session: Session, gpu_ids: set[int]) -> None:
    held = set(session.scalars(select(Binding.gpu_id).where(
        Binding.gpu_id.in_(gpu_ids), Binding.ended_at.is_(None))))
    rows = session.execute(select(Gpu, Node.status).join(Node, Node.id == Gpu.node_id)
                           .where(Gpu.id.in_(gpu_ids))).all()
    for gpu, node_status in rows:
        gpu.allocated = gpu.id in held
        gpu.status = gpu_status(NodeStatus(node_status), GpuHealth(gpu.health),
                                gpu.allocated).value


# --- reading ----------------------------------------------------------------------------
def unit_views(session: Session, request_ids: Sequence[int], *, open_only: bool = True
               ) -> dict[int, list[UnitView]]:
    query = (select(Binding, Gpu.uuid, Gpu.index, Gpu.model, Node.name)
             .join(Gpu, Gpu.id == Binding.gpu_id).join(Node, Node.id == Binding.node_id)
             .where(Binding.request_id.in_(list(request_ids)))
             .order_by(Binding.request_id, Node.name, Gpu.index, Binding.mig_start))
    if open_only:
        query = query.where(Binding.ended_at.is_(None))
    rows = session.execute(query).all()
    mig_uuids = mig_uuids_of(session, [b for b, *_ in rows if b.kind == UnitKind.MIG.value])
    views: dict[int, list[UnitView]] = defaultdict(list)
    for binding, uuid, index, model, node in rows:
        views[binding.request_id].append(UnitView(
            gpu_uuid=uuid, gpu_index=index, node=node, kind=binding.kind, model=model,
            milli=binding.milli, mig_profile_id=binding.mig_profile_id,
            mig_profile=profile_name(model, binding.mig_profile_id),
            mig_start=binding.mig_start,
            mig_uuid=mig_uuids.get((binding.gpu_id, binding.mig_profile_id, binding.mig_start)),
            started_at=binding.started_at, ended_at=binding.ended_at))
    return views


def profile_name(model: str, profile_id: int | None) -> str | None:
    if profile_id is None:
        return None
    found = catalogue_model(model)
    profile = found.mig.profile(profile_id) if found and found.mig else None
    return profile.name if profile else None


def mig_uuids_of(session: Session, bindings: list[Binding]) -> dict[tuple, str | None]:
    if not bindings:
        return {}
    keys = {(b.gpu_id, b.mig_profile_id, b.mig_start) for b in bindings}
    rows = session.execute(select(MigInstance.gpu_id, MigInstance.profile_id,
                                  MigInstance.placement_start, MigInstance.mig_uuid)
                           .where(MigInstance.gpu_id.in_({k[0] for k in keys})))
    return {(g, p, s): u for g, p, s, u in rows if (g, p, s) in keys}


def exports(code: str, units: list[UnitView]) -> dict[str, str]:
    """What the workload exports to use its allocation (advisory; docs/design.md, "Concepts")."""
    if not units:
        return {}
    devices = [u.mig_uuid or (f"pending:{u.gpu_uuid}/{u.mig_profile}@{u.mig_start}"
                              if u.kind == UnitKind.MIG else u.gpu_uuid) for u in units]
    nodes = sorted({u.node for u in units})
    return {"GPUFLEET_ALLOCATION": code, "CUDA_VISIBLE_DEVICES": ",".join(devices),
            "GPUFLEET_NODE": ",".join(nodes)}


def desired_state(session: Session, node: Node) -> DesiredState:
    """The node's open bindings and MIG plans, at the node's desired-state version."""
    rows = session.execute(
        select(Binding, Gpu.uuid, GpuRequest.id, GpuRequest.project_id)
        .join(Gpu, Gpu.id == Binding.gpu_id)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(Binding.node_id == node.id, Binding.ended_at.is_(None))
        .order_by(Gpu.index, Binding.mig_start, Binding.id)).all()
    project_names = _project_names(session, {r[3] for r in rows})
    bindings = [UnitBinding(
        unit=_unit_name(uuid, b), gpu_uuid=uuid, allocation=request_code(request_id),
        project=project_names[project_id], milli=b.milli, mig_profile_id=b.mig_profile_id,
        placement_start=b.mig_start) for b, uuid, request_id, project_id in rows]
    plans = [MigPlanView(gpu_uuid=uuid, instances=[
        MigPlanInstance(profile_id=p, placement_start=s) for p, s in layout])
        for uuid, layout in session.execute(
            select(Gpu.uuid, MigPlan.layout).join(Gpu, Gpu.id == MigPlan.gpu_id)
            .where(MigPlan.node_id == node.id).order_by(Gpu.index))]
    return DesiredState(version=node.desired_state_version, bindings=bindings, mig_plans=plans)


def _unit_name(uuid: str, binding: Binding) -> str:
    if binding.kind == UnitKind.MIG.value:
        return mig_unit_name(uuid, binding.mig_profile_id, binding.mig_start)
    if binding.kind == UnitKind.SHARED.value:
        return f"{uuid}/shared/{binding.id}"
    return uuid


def _project_names(session: Session, project_ids: set[int]) -> dict[int, str]:
    if not project_ids:
        return {}
    rows = session.execute(select(Project.id, Project.name).where(Project.id.in_(project_ids)))
    return {project_id: name for project_id, name in rows}

