"""Quotas and what a project holds against them (docs/design.md, "Concepts").

Everything is counted in milli-units of a flavour: a whole GPU or a MIG instance is 1000, a
shared unit its fraction. What a project holds of a flavour is its active pools (reserved
whether used or not) plus its open bindings outside pools.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.admission import QuotaFact
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.requests import Flavour, FlavourKind, parse_flavour
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import not_found
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


def held_outside_pools(session: Session, project_ids: Iterable[int]
                       ) -> dict[int, dict[str, int]]:
    """Per project, milli held per flavour by its open bindings that no pool covers."""
    units = func.sum(Binding.milli).label("milli")
    count = func.count().label("count")
    rows = session.execute(
        select(Binding.project_id, Gpu.model, Binding.kind, Binding.mig_profile_id, units,
               count)
        .join(Gpu, Gpu.id == Binding.gpu_id)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(Binding.project_id.in_(list(project_ids)), Binding.ended_at.is_(None),
               GpuRequest.pool_id.is_(None))
        .group_by(Binding.project_id, Gpu.model, Binding.kind, Binding.mig_profile_id))
    held: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for project_id, model, kind, profile_id, milli, n in rows:
        flavour = binding_flavour(kind, model, profile_id)
        held[project_id][flavour.key] += milli if flavour.kind is FlavourKind.SHARED else n * 1000
    return held


def pooled(session: Session, project_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """Per project, milli reserved per flavour by its active pools."""
    rows = session.execute(
        select(Pool.project_id, Pool.flavour, func.sum(Pool.count * Pool.unit_milli))
        .where(Pool.project_id.in_(list(project_ids)), Pool.state == "active")
        .group_by(Pool.project_id, Pool.flavour))
    reserved: dict[int, dict[str, int]] = defaultdict(dict)
    for project_id, flavour, milli in rows:
        reserved[project_id][flavour] = int(milli)
    return reserved


def limits(session: Session, project_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    rows = session.execute(select(Quota.project_id, Quota.flavour, Quota.limit_milli)
                           .where(Quota.project_id.in_(list(project_ids))))
    found: dict[int, dict[str, int]] = defaultdict(dict)
    for project_id, flavour, limit in rows:
        found[project_id][flavour] = limit
    return found


@dataclass
class QuotaLedger:
    """Some projects' quotas and holdings, read once. A batch of grants keeps it current
    (`add`), so each grant in the batch sees the ones before it without another read."""

    limits: dict[int, dict[str, int]]
    held: dict[int, dict[str, int]]  # open bindings outside pools
    pooled: dict[int, dict[str, int]]  # active pools, used or not

    @classmethod
    def read(cls, session: Session, project_ids: Iterable[int]) -> QuotaLedger:
        ids = set(project_ids)
        return cls(limits(session, ids), held_outside_pools(session, ids), pooled(session, ids))

    def used(self, project_id: int, flavour_key: str) -> int:
        return (self.held.get(project_id, {}).get(flavour_key, 0)
                + self.pooled.get(project_id, {}).get(flavour_key, 0))

    def facts(self, project_id: int, flavours: list[Flavour]) -> list[QuotaFact]:
        limit_by_flavour = self.limits.get(project_id, {})
        return [QuotaFact(flavour=f.key, limit_milli=limit_by_flavour.get(f.key),
                          used_milli=self.used(project_id, f.key)) for f in flavours]

    def add(self, project_id: int, flavour_key: str, milli: int) -> None:
        """A grant outside any pool now holds `milli` more of the flavour."""
        held = self.held.setdefault(project_id, {})
        held[flavour_key] = held.get(flavour_key, 0) + milli


def quota_facts(session: Session, project_id: int, flavours: list[Flavour]) -> list[QuotaFact]:
    return QuotaLedger.read(session, [project_id]).facts(project_id, flavours)


def quota_views(session: Session, project: Project) -> list[QuotaView]:
    """Every flavour the project has a quota for or holds, with usage against it."""
    ledger = QuotaLedger.read(session, [project.id])
    limit_by_flavour = ledger.limits.get(project.id, {})
    held, reserved = ledger.held.get(project.id, {}), ledger.pooled.get(project.id, {})
    views = []
    for key in sorted(set(limit_by_flavour) | set(held) | set(reserved)):
        limit = limit_by_flavour.get(key)
        used = ledger.used(project.id, key)
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
