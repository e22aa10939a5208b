"""What a statement is computed from, read from the state store into the domain's inputs
(docs/billing.md, "Statements from the store"): bindings as `BindingInterval`s, approved
pools as `PoolInterval`s, projects as `ProjectInfo`s, and the change marker that says when
any of them (or the rate card) changed for a window, so its statement can be kept until
then.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.billing.charges import BindingInterval, PoolInterval
from gpufleet.domain.billing.rates import unit_weight
from gpufleet.domain.billing.statements import ProjectInfo
from gpufleet.services.lifecycle.quotas import binding_flavour
from gpufleet.store.tables import (
    BillingRate,
    Binding,
    Environment,
    Gpu,
    GpuRequest,
    Pool,
    Project,
)


def binding_intervals(session: Session, start: datetime, end: datetime
                      ) -> list[BindingInterval]:
    """Every binding that overlaps [start, end), with its flavour as the lifecycle counts
    it (quotas' `binding_flavour`), its GPU's environment, its request's pool, and its
    weight computed exactly from the flavour and milli (bindings do not record one)."""
    rows = session.execute(
        select(Binding.id, Project.name, Binding.kind, Gpu.model, Binding.mig_profile_id,
               Binding.milli, Environment.name, Binding.started_at, Binding.ended_at,
               GpuRequest.pool_id, Gpu.uuid)
        .join(Gpu, Gpu.id == Binding.gpu_id)
        .join(Environment, Environment.id == Gpu.environment_id)
        .join(Project, Project.id == Binding.project_id)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .where(Binding.started_at < end,
               or_(Binding.ended_at.is_(None), Binding.ended_at > start)))
    # One flavour per kind, model and profile, one Fraction per flavour and milli: asked
    # once each, not per row (100,000s).
    flavours: dict[tuple[str, str, int | None], str] = {}
    weights: dict[tuple[str, int], object] = {}
    found = []
    for (binding_id, project, kind, model, profile_id, milli, environment, started, ended,
         pool_id, uuid) in rows:
        key = flavours.get((kind, model, profile_id))
        if key is None:
            key = flavours[kind, model, profile_id] = binding_flavour(kind, model,
                                                                      profile_id).key
        weight = weights.get((key, milli))
        if weight is None:
            weight = weights[key, milli] = unit_weight(key, milli)
        found.append(BindingInterval(binding_id, project, key, environment, weight, started,
                                     ended, pool_id, uuid))
    return found


def pool_ended_at(row: Pool) -> datetime | None:
    """When the pool's charge stops: its end (docs/lifecycle.md, "Ending a pool"); a pool
    not ended is open and charged to the window's end."""
    return row.ended_at


def pool_intervals(session: Session) -> list[PoolInterval]:
    """Every approved pool, charged from approval to end (docs/billing.md, "What is
    charged"). Pools are few (one per project and flavour, at most), so all are read and
    the domain clips them to the window. Pools have no environment: rates for any
    environment price them."""
    rows = session.scalars(select(Pool).where(Pool.approved_at.is_not(None)))
    return [PoolInterval(row.id, row.project.name, row.flavour, row.count,
                         unit_weight(row.flavour, row.unit_milli), row.approved_at,
                         pool_ended_at(row))
            for row in rows]


def project_infos(session: Session) -> dict[str, ProjectInfo]:
    return {name: ProjectInfo(name, organisation, department, cost_centre)
            for name, organisation, department, cost_centre in session.execute(
                select(Project.name, Project.organisation, Project.department,
                       Project.cost_centre))}


def change_marker(session: Session, before: datetime) -> tuple:
    """What changes whenever the inputs of a window ending at `before` do (its activity
    aside). Bindings are only added or ended, so the count, newest id and ended count of
    those that started (or ended) before then move with every write that touches the
    window — and a binding started or ended later, which cannot, leaves a closed window's
    statement kept. Rates and pools are few and change rarely: any change of theirs counts
    (a rate may be set retroactively); projects' columns are the marker itself."""
    bindings = session.execute(
        select(func.count(), func.max(Binding.id),
               func.count(Binding.ended_at).filter(Binding.ended_at < before))
        .where(Binding.started_at < before)).one()
    pools = session.execute(select(func.count(), func.max(Pool.id),
                                   func.count(Pool.approved_at),
                                   func.count(Pool.ended_at))).one()
    rates = session.execute(select(func.count(), func.max(BillingRate.id),
                                   func.count(BillingRate.effective_to))).one()
    projects = tuple(sorted(project_infos(session).items()))
    return tuple(bindings), tuple(pools), tuple(rates), projects
