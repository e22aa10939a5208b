"""The labels an alert gets from the state store: where its unit is and who holds it.

An observation names its unit (`gpu` = GPU UUID, `mig_instance` = MIG UUID, as telemetry
names them); the alert adds `environment` and `node` from the inventory and — from the open
binding intervals, the truth of who holds a unit (docs/design.md, "Concepts") —
`allocation`, `project` and `owner` (the allocation's requester). A shared GPU held by
several allocations names them all, comma-separated and sorted; `owners` lists each
owner for the notification. A label the observation already carries is kept (a project
rule names its project itself). Read once per evaluation for every unit it observed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.requests import request_code
from gpufleet.store.tables import (
    Binding,
    Environment,
    Gpu,
    GpuRequest,
    MigInstance,
    Node,
    Project,
    User,
)

GPU_LABEL = "gpu"
MIG_LABEL = "mig_instance"
# Telemetry's own names for the same units, accepted where an observation carries them.
_GPU_ALIASES = (GPU_LABEL, "gpu_uuid")
_MIG_ALIASES = (MIG_LABEL, "mig_uuid")


def unit_of(labels: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(GPU UUID, MIG UUID) an observation names, by either vocabulary."""
    gpu = next((labels[k] for k in _GPU_ALIASES if labels.get(k)), None)
    mig = next((labels[k] for k in _MIG_ALIASES if labels.get(k)), None)
    return gpu, mig


@dataclass(frozen=True)
class Holder:
    allocation: str
    project: str
    owner: str
    owner_is_user: bool  # a requester that is a token, not a person, is told nothing
    mig_key: tuple[int, int] | None  # (profile id, placement start) of a MIG binding


@dataclass(frozen=True)
class UnitPlace:
    environment: str
    node: str
    holders: tuple[Holder, ...]
    mig_keys: Mapping[str, tuple[int, int]]  # MIG UUID → (profile id, placement start)


@dataclass(frozen=True)
class Enriched:
    labels: dict[str, str]
    owners: tuple[str, ...]
    projects: tuple[str, ...]


def read_places(session: Session, gpu_uuids: Iterable[str]) -> dict[str, UnitPlace]:
    """Where each GPU is and who holds it now, by GPU UUID (unknown UUIDs are left out)."""
    wanted = sorted(set(gpu_uuids))
    gpus: dict[int, tuple[str, str, str]] = {}
    for lo in range(0, len(wanted), 500):
        rows = session.execute(
            select(Gpu.id, Gpu.uuid, Node.name, Environment.name)
            .join(Node, Node.id == Gpu.node_id)
            .join(Environment, Environment.id == Gpu.environment_id)
            .where(Gpu.uuid.in_(wanted[lo:lo + 500])))
        gpus.update({gid: (uuid, node, env) for gid, uuid, node, env in rows})
    holders: dict[int, list[Holder]] = defaultdict(list)
    migs: dict[int, dict[str, tuple[int, int]]] = defaultdict(dict)
    ids = sorted(gpus)
    for lo in range(0, len(ids), 500):
        chunk = ids[lo:lo + 500]
        rows = session.execute(
            select(Binding.gpu_id, Binding.request_id, Binding.kind, Binding.mig_profile_id,
                   Binding.mig_start, Project.name, User.name, GpuRequest.requested_by)
            .join(Project, Project.id == Binding.project_id)
            .join(GpuRequest, GpuRequest.id == Binding.request_id)
            .outerjoin(User, User.id == GpuRequest.requester_user_id)
            .where(Binding.gpu_id.in_(chunk), Binding.ended_at.is_(None)))
        for gpu_id, request_id, kind, profile, start, project, user, requested_by in rows:
            mig_key = (profile, start) if kind == "mig" else None
            holders[gpu_id].append(Holder(request_code(request_id), project,
                                          user or requested_by, user is not None, mig_key))
        for gpu_id, profile, start, mig_uuid in session.execute(
                select(MigInstance.gpu_id, MigInstance.profile_id,
                       MigInstance.placement_start, MigInstance.mig_uuid)
                .where(MigInstance.gpu_id.in_(chunk), MigInstance.mig_uuid.is_not(None))):
            migs[gpu_id][mig_uuid] = (profile, start)
    return {uuid: UnitPlace(env, node, tuple(holders[gid]), migs[gid])
            for gid, (uuid, node, env) in gpus.items()}


def enrich(labels: Mapping[str, str], places: Mapping[str, UnitPlace]) -> Enriched:
    """The observation's labels plus where its unit is and who holds it."""
    out = dict(labels)
    gpu, mig_uuid = unit_of(labels)
    place = places.get(gpu or "")
    if place is None:
        owners = tuple(filter(None, [out.get("owner")]))
        return Enriched(out, owners, tuple(filter(None, out.get("project", "").split(","))))
    out.setdefault("environment", place.environment)
    out.setdefault("node", place.node)
    held = place.holders
    if mig_uuid:
        key = place.mig_keys.get(mig_uuid)
        held = tuple(h for h in held if h.mig_key is not None and h.mig_key == key)
    for name, values in (("allocation", [h.allocation for h in held]),
                         ("project", [h.project for h in held]),
                         ("owner", [h.owner for h in held])):
        if values:
            out.setdefault(name, ",".join(sorted(set(values))))
    owners = tuple(sorted({h.owner for h in held if h.owner_is_user})) if held else \
        tuple(filter(None, [out.get("owner")]))
    projects = tuple(filter(None, out.get("project", "").split(",")))
    return Enriched(out, owners, projects)
