"""Quotas and what a project holds against them (DESIGN.md §2).

Everything is counted in milli-units of a flavour: a whole GPU or a MIG instance is 1000, a
shared unit its fraction. What a project holds of a flavour is its active pools (reserved
whether used or not) plus its open bindings outside pools.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.admission import QuotaFact
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.requests import Flavour, FlavourKind, parse_flavour
from gpufleet.services import audit
from gpufleet.services.lookup import not_found
from gpufleet.services.principal import Principal
from gpufleet.store.tables import (
    AutoApprovePolicy,
    Binding,
    Gpu,
    GpuRequest,
    Pool,
    Project,
    Quota,
)
from gpufleet.wire.requests import AutoApproveView, QuotaView


def binding_flavour(kind: str, model: str, mig_profile_id: int | None) -> Flavour:
    """The flavour an open binding counts against."""
    flavour_kind = FlavourKind(kind)
    if flavour_kind is FlavourKind.MIG:
        found = catalogue_model(model)
        profile = found.mig.profile(mig_profile_id) if found and found.mig else None
        name = profile.name if profile else f"profile-{mig_profile_id}"
        return Flavour(flavour_kind, model, name)
    return Flavour(flavour_kind, model)


def held_outside_pools(session: Session, project_id: int) -> dict[str, int]:
    """Milli held per flavour by the project's open bindings that no pool covers."""
    units = func.sum(Binding.milli).label("milli")
    count = func.count().label("count")
    rows = session.execute(
        select(Gpu.model, Binding.kind, Binding.mig_profile_id, units, count)
        .join(Gpu, Gpu.id == Binding.gpu_id)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(Binding.project_id == project_id, Binding.ended_at.is_(None),
               GpuRequest.pool_id.is_(None))
        .group_by(Gpu.model, Binding.kind, Binding.mig_profile_id))
    held: dict[str, int] = defaultdict(int)
    for model, kind, profile_id, milli, n in rows:
        flavour = binding_flavour(kind, model, profile_id)
        held[flavour.key] += milli if flavour.kind is FlavourKind.SHARED else n * 1000
    return held


def pooled(session: Session, project_id: int) -> dict[str, int]:
    """Milli reserved per flavour by the project's active pools."""
    rows = session.execute(
        select(Pool.flavour, func.sum(Pool.count * Pool.unit_milli))
        .where(Pool.project_id == project_id, Pool.state == "active")
        .group_by(Pool.flavour))
    return {flavour: int(milli) for flavour, milli in rows}


def limits(session: Session, project_id: int) -> dict[str, int]:
    rows = session.execute(select(Quota.flavour, Quota.limit_milli)
                           .where(Quota.project_id == project_id))
    return {flavour: limit for flavour, limit in rows}


def quota_facts(session: Session, project_id: int, flavours: list[Flavour]) -> list[QuotaFact]:
    limit_by_flavour = limits(session, project_id)
    held = held_outside_pools(session, project_id)
    reserved = pooled(session, project_id)
    return [QuotaFact(flavour=f.key, limit_milli=limit_by_flavour.get(f.key),
                      used_milli=held.get(f.key, 0) + reserved.get(f.key, 0))
            for f in flavours]


def quota_views(session: Session, project: Project) -> list[QuotaView]:
    """Every flavour the project has a quota for or holds, with usage against it."""
    limit_by_flavour = limits(session, project.id)
    held = held_outside_pools(session, project.id)
    reserved = pooled(session, project.id)
    views = []
    for key in sorted(set(limit_by_flavour) | set(held) | set(reserved)):
        limit = limit_by_flavour.get(key)
        used = held.get(key, 0) + reserved.get(key, 0)
        views.append(QuotaView(
            project=project.name, flavour=key,
            limit=None if limit is None else limit / 1000, used=used / 1000,
            pooled=reserved.get(key, 0) / 1000,
            available=None if limit is None else max(limit - used, 0) / 1000))
    return views


def set_quota(session: Session, principal: Principal, project: Project, flavour_key: str,
              limit: float, now: datetime) -> Flavour:
    flavour = parse_flavour(flavour_key)
    limit_milli = round(limit * 1000)
    row = session.get(Quota, (project.id, flavour.key))
    before = None if row is None else row.limit_milli
    if row is None:
        row = Quota(project_id=project.id, flavour=flavour.key, limit_milli=limit_milli,
                    updated_at=now, updated_by=principal.actor)
        session.add(row)
    else:
        row.limit_milli, row.updated_at, row.updated_by = limit_milli, now, principal.actor
    audit.record(session, at=now, actor=principal.actor, action="quota.set",
                 subject_kind="project", subject=project.name, flavour=flavour.key,
                 limit_milli=limit_milli, previous_limit_milli=before)
    return flavour


def remove_quota(session: Session, principal: Principal, project: Project, flavour_key: str,
                 now: datetime) -> None:
    flavour = parse_flavour(flavour_key)
    row = session.get(Quota, (project.id, flavour.key))
    if row is None:
        raise not_found("quota", flavour.key)
    session.delete(row)
    audit.record(session, at=now, actor=principal.actor, action="quota.removed",
                 subject_kind="project", subject=project.name, flavour=flavour.key,
                 previous_limit_milli=row.limit_milli)


def auto_approve_view(session: Session, project: Project) -> AutoApproveView | None:
    policy = session.get(AutoApprovePolicy, project.id)
    if policy is None:
        return None
    return AutoApproveView(project=project.name, max_gpus=policy.max_milli / 1000,
                           max_hours=policy.max_duration_s / 3600)


def set_auto_approve(session: Session, principal: Principal, project: Project,
                     max_gpus: float, max_hours: float, now: datetime) -> None:
    policy = session.get(AutoApprovePolicy, project.id)
    max_milli, max_duration_s = round(max_gpus * 1000), round(max_hours * 3600)
    if policy is None:
        session.add(AutoApprovePolicy(project_id=project.id, max_milli=max_milli,
                                      max_duration_s=max_duration_s, updated_at=now,
                                      updated_by=principal.actor))
    else:
        policy.max_milli, policy.max_duration_s = max_milli, max_duration_s
        policy.updated_at, policy.updated_by = now, principal.actor
    audit.record(session, at=now, actor=principal.actor, action="auto_approve.set",
                 subject_kind="project", subject=project.name, max_milli=max_milli,
                 max_duration_s=max_duration_s)


def remove_auto_approve(session: Session, principal: Principal, project: Project,
                        now: datetime) -> bool:
    policy = session.get(AutoApprovePolicy, project.id)
    if policy is None:
        return False
    session.delete(policy)
    audit.record(session, at=now, actor=principal.actor, action="auto_approve.removed",
                 subject_kind="project", subject=project.name)
    return True
