"""Pools: capacity dedicated to one project (docs/design.md, "Concepts"), created by an approved
request.

A pool is logical — flavour × count — not a set of pinned GPUs: approving it reserves that
much of the fleet's free capacity of its flavour, which other projects' requests may then
not take (`granting.PoolLedger.unused_reservations`). Billing starts at approval (`approved_at`)
and stops at the end (`ended_at`): an active pool is ended by a member of its project (it is
their money) or an operator, only once no request holds its units — a binding of a pool's
own request is charged as the pool's usage, at no cost of its own (docs/billing.md), so a
pool that ended under it would hand out GPUs for free. Waiting requests are untouched: with
the pool gone from the ledger they are granted, if at all, as ordinary requests.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import Conflict, Forbidden, InvalidInput
from gpufleet.domain.requests import (
    FlavourKind,
    PoolState,
    RequestState,
    parse_flavour,
    pool_code,
    pool_id_from_code,
    request_code,
)
from gpufleet.services.access import audit, people
from gpufleet.services.access.principal import Principal
from gpufleet.services.lifecycle import granting, quotas
from gpufleet.services.lookup import not_found
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import Binding, GpuRequest, Pool, Project
from gpufleet.wire.requests import PoolCreate, PoolView

PENDING, ACTIVE, REJECTED, ENDED = (PoolState.PENDING.value, PoolState.ACTIVE.value,
                                    PoolState.REJECTED.value, PoolState.ENDED.value)
_BY_ID = SortSpec((Pool.id,))


def pool_view(session: Session, pool: Pool) -> PoolView:
    return PoolView(
        code=pool_code(pool.id), project=pool.project.name, flavour=pool.flavour,
        count=pool.count, unit_milli=pool.unit_milli, state=pool.state,
        justification=pool.justification, requested_by=pool.requested_by,
        requested_at=pool.requested_at, decided_by=pool.decided_by,
        decided_at=pool.decided_at, decision_reason=pool.decision_reason,
        approved_at=pool.approved_at, ended_at=pool.ended_at, ended_by=pool.ended_by,
        end_reason=pool.end_reason,
        used=granting.pool_units_used(session, pool) if pool.state == ACTIVE else 0)


def get_pool(session: Session, principal: Principal, code: str) -> Pool:
    pool_id = pool_id_from_code(code)
    pool = session.get(Pool, pool_id) if pool_id is not None else None
    if pool is None or not principal.sees_project(pool.project.name):
        raise not_found("pool", code)
    return pool


def list_pools(session: Session, principal: Principal, *, project: str | None = None,
               state: str | None = None, cursor: str | None = None,
               limit: int = 100) -> tuple[list[Pool], str | None]:
    """Oldest first (by id); the second value is the next page's cursor."""
    principal.require(Action.READ_REQUESTS)
    query = select(Pool).join(Project, Project.id == Pool.project_id)
    if project:
        query = query.where(Project.name == project)
    if state:
        query = query.where(Pool.state == state)
    if principal.visible_projects is not None:
        query = query.where(Project.name.in_(principal.visible_projects or {""}))
    rows, next_cursor = keyset_page(session, query, _BY_ID, cursor, limit)
    return [pool for (pool,) in rows], next_cursor


def request_pool(session: Session, principal: Principal, body: PoolCreate,
                 now: datetime) -> Pool:
    principal.require(Action.REQUEST_GPUS)
    project = people.get_project(session, body.project)
    people.require_member(principal, project)
    flavour = parse_flavour(body.flavour)
    if body.fraction is not None and flavour.kind is not FlavourKind.SHARED:
        raise InvalidInput("a fraction only applies to a shared flavour (`MODEL/shared`)",
                           code="invalid_fraction")
    if body.fraction is not None and not 0 < body.fraction <= 1:
        raise InvalidInput("fraction must be in (0, 1]", code="invalid_fraction")
    unit_milli = round((body.fraction or 1.0) * 1000) if flavour.kind is FlavourKind.SHARED \
        else 1000
    pool = Pool(project_id=project.id, project=project, flavour=flavour.key, count=body.count,
                unit_milli=unit_milli, state=PENDING, justification=body.reason,
                requested_by=principal.actor, requested_at=now)
    session.add(pool)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="pool.requested",
                 subject_kind="pool", subject=pool_code(pool.id), reason=body.reason,
                 project=project.name, flavour=flavour.key, count=body.count)
    return pool


def approve_pool(session: Session, principal: Principal, code: str, now: datetime,
                 reason: str | None) -> Pool:
    principal.require(Action.APPROVE_REQUESTS)
    pool = _pending(session, principal, code)
    flavour = parse_flavour(pool.flavour)
    need = granting.physical_milli(flavour, pool.count, pool.unit_milli)
    free = granting.free_capacity(session, flavour.kind, flavour.model)
    reservations = granting.PoolLedger.read(session).unused_reservations()
    reserved = reservations.get((flavour.kind.value, flavour.model), 0)
    if free - reserved < need:
        raise Conflict(f"the fleet has {max(free - reserved, 0) / 1000:g} GPUs' worth of free, "
                       f"unreserved {flavour.key} capacity; the pool needs {need / 1000:g}",
                       code="insufficient_capacity",
                       details={"free_milli": free, "reserved_milli": reserved,
                                "needed_milli": need})
    fact = quotas.quota_facts(session, pool.project_id, [flavour])[0]
    size = pool.count * pool.unit_milli
    if fact.limit_milli is not None and fact.used_milli + size > fact.limit_milli:
        raise Conflict(f"project '{pool.project.name}' would hold "
                       f"{(fact.used_milli + size) / 1000:g} of {flavour.key}, over its quota "
                       f"of {fact.limit_milli / 1000:g}", code="quota_exceeded",
                       details={"limit_milli": fact.limit_milli, "used_milli": fact.used_milli})
    _decide(session, principal, pool, ACTIVE, now, reason)
    pool.approved_at = now
    return pool


def reject_pool(session: Session, principal: Principal, code: str, now: datetime,
                reason: str | None) -> Pool:
    principal.require(Action.APPROVE_REQUESTS)
    pool = _pending(session, principal, code)
    _decide(session, principal, pool, REJECTED, now, reason)
    return pool


def _pending(session: Session, principal: Principal, code: str) -> Pool:
    pool = get_pool(session, principal, code)
    if pool.state != PENDING:
        raise Conflict(f"{code} is {pool.state}; only a pending pool can be decided",
                       code="invalid_transition", details={"state": pool.state})
    return pool


def _decide(session: Session, principal: Principal, pool: Pool, state: str, now: datetime,
            reason: str | None) -> None:
    if principal.role is not Role.ADMIN and pool.requested_by == principal.actor:
        raise Forbidden("nobody approves their own pool request (an admin may)",
                        code="self_approval")
    pool.state, pool.decided_by, pool.decided_at = state, principal.actor, now
    pool.decision_reason = reason
    audit.record(session, at=now, actor=principal.actor,
                 action="pool.approved" if state == ACTIVE else "pool.rejected",
                 subject_kind="pool", subject=pool_code(pool.id), reason=reason,
                 project=pool.project.name, flavour=pool.flavour, count=pool.count)


def end_pool(session: Session, principal: Principal, code: str, now: datetime,
             reason: str | None) -> Pool:
    """End an active pool now: its reservation and quota are freed and its charge stops.

    The pool's row is locked first, so of two ends at once one ends it and the other finds
    it ended (409), with one audit event; the granter locks the pools it draws on
    (`requests.activate`), so no grant slips into a pool between the check and the end.
    """
    principal.require(Action.REQUEST_GPUS)
    pool = get_pool(session, principal, code)
    people.require_member(principal, pool.project)
    session.scalar(select(Pool.id).where(Pool.id == pool.id).with_for_update())
    session.refresh(pool)
    if pool.state != ACTIVE:
        hint = (" (a pending pool is not yet reserved: an operator rejects it)"
                if pool.state == PENDING else "")
        raise Conflict(f"{code} is {pool.state}; only an active pool can be ended{hint}",
                       code="invalid_transition",
                       details={"pool": code, "state": pool.state, "target": ENDED})
    holding = _requests_holding(session, pool.id)
    if holding:
        raise Conflict(f"{code} still has units held by {', '.join(holding)}; release them "
                       f"before ending the pool", code="pool_in_use",
                       details={"pool": code, "requests": holding})
    pool.state, pool.ended_at, pool.ended_by, pool.end_reason = (ENDED, now, principal.actor,
                                                                 reason)
    audit.record(session, at=now, actor=principal.actor, action="pool.ended",
                 subject_kind="pool", subject=pool_code(pool.id), reason=reason,
                 project=pool.project.name, flavour=pool.flavour, count=pool.count,
                 approved_at=pool.approved_at.isoformat() if pool.approved_at else None)
    return pool


def _requests_holding(session: Session, pool_id: int) -> list[str]:
    """Codes of the requests that hold units of the pool now (open bindings), oldest first."""
    ids = session.scalars(
        select(GpuRequest.id).where(GpuRequest.pool_id == pool_id,
                                    GpuRequest.state == RequestState.ACTIVE.value)
        .where(select(Binding.id).where(Binding.request_id == GpuRequest.id,
                                        Binding.ended_at.is_(None)).exists())
        .order_by(GpuRequest.id))
    return [request_code(i) for i in ids]
