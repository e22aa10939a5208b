"""GPU requests, from creation to release: each function is one use case in one transaction.

Every transition goes through `_transition`, which checks it against the domain's table and
writes its audit event; nothing else changes a request's state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain import admission
from gpufleet.domain.access import Action, AuditSubject, Role
from gpufleet.domain.admission import AdmissionFacts, Outcome, Verdict
from gpufleet.domain.errors import Forbidden, InvalidInput
from gpufleet.domain.gpu_models import catalogue
from gpufleet.domain.placement import Decision, UnitKind
from gpufleet.domain.requests import (
    Flavour,
    FlavourKind,
    RequestState,
    pool_code,
    request_code,
    request_id_from_code,
    transition_event,
)
from gpufleet.services.access import audit, people
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.fleet_shape import FleetShape
from gpufleet.services.lifecycle import bindings, feasibility, granting, lost_units, quotas
from gpufleet.services.lifecycle.placement_state import MODE_OF_KIND
from gpufleet.services.lookup import not_found
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import AuditEvent, AutoApprovePolicy, GpuRequest, Project
from gpufleet.wire.requests import (
    Extend,
    PlacementPreview,
    PlacementUnit,
    QuotaView,
    RequestCreate,
    RequestPreview,
    RequestView,
    RequestWhy,
    VerdictView,
)

SYSTEM_ACTOR = "system:lifecycle"
AUTO_APPROVER = "policy:auto-approve"
AUTO_APPROVED = "auto_approved"  # the preview's approval verdict when the policy covers it
_EVENTS_OLDEST_FIRST = SortSpec((AuditEvent.id,))


# --- finding and showing -----------------------------------------------------------------
def get_request(session: Session, principal: Principal, code: str) -> GpuRequest:
    """The request, if the caller may see it (a member sees their projects' requests only)."""
    request_id = request_id_from_code(code)
    request = session.get(GpuRequest, request_id) if request_id is not None else None
    if request is None or not _visible(principal, request):
        raise not_found("request", code)
    return request


def _visible(principal: Principal, request: GpuRequest) -> bool:
    return principal.sees_project(request.project.name)


def view(session: Session, request: GpuRequest, *, with_history_units: bool = False
         ) -> RequestView:
    return views(session, [request], with_history_units=with_history_units)[0]


def views(session: Session, requests: list[GpuRequest], *, with_history_units: bool = False
          ) -> list[RequestView]:
    units = bindings.unit_views(session, [r.id for r in requests],
                                open_only=not with_history_units)
    result = []
    for r in requests:
        code = request_code(r.id)
        held = units.get(r.id, [])
        result.append(RequestView(
            code=code, project=r.project.name, requested_by=r.requested_by, state=r.state,
            kind=r.kind, count=r.count, models=r.models, mig_profile=r.mig_profile,
            milli=r.milli, cpu_milli_per_unit=r.cpu_milli_per_unit,
            memory_mib_per_unit=r.memory_mib_per_unit, same_node=r.same_node, nvlink=r.nvlink,
            environment=r.environment, starts_at=r.starts_at, ends_at=r.ends_at,
            duration_s=r.duration_s, justification=r.justification, wait_code=r.wait_code,
            wait_message=r.wait_message, needs_operator=r.needs_operator,
            pool=pool_code(r.pool_id) if r.pool_id else None,
            created_at=r.created_at, decided_by=r.decided_by, decided_at=r.decided_at,
            activated_at=r.activated_at, closed_at=r.closed_at, units=held,
            exports=bindings.exports(code, [u for u in held if u.ended_at is None])))
    return result


def list_requests(session: Session, principal: Principal, *, state: str | None = None,
                  project: str | None = None, node: str | None = None,
                  gpu: str | None = None, before: int | None = None,
                  limit: int = 100) -> tuple[list[GpuRequest], int | None]:
    """Newest first; the second value is the id to pass as `before` for the next page.
    `node`, `gpu`: only requests holding a unit there now (what a retirement or a
    quarantine would take away)."""
    query = (select(GpuRequest).join(Project, Project.id == GpuRequest.project_id)
             .order_by(GpuRequest.id.desc()).limit(limit + 1))
    if state:
        query = query.where(GpuRequest.state == RequestState(state).value)
    if project:
        query = query.where(Project.name == project)
    if principal.visible_projects is not None:
        query = query.where(Project.name.in_(principal.visible_projects or {""}))
    if node is not None or gpu is not None:
        query = query.where(GpuRequest.id.in_(lost_units.holding(node=node, gpu_uuid=gpu)))
    if before is not None:
        query = query.where(GpuRequest.id < before)
    rows = list(session.scalars(query))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1].id if more and rows else None)


# --- creating ----------------------------------------------------------------------------
def create(session: Session, principal: Principal, body: RequestCreate, now: datetime,
           max_request_days: float, shape: FleetShape,
           default_request_days: float | None = None) -> GpuRequest:
    """`default_request_days`: how long a request that names no end lasts (capped at
    `max_request_days`); None leaves it open-ended."""
    request, verdicts = _proposed(session, principal, body, now, max_request_days, shape,
                                  default_request_days)
    session.add(request)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="request.created",
                 subject_kind="request", subject=request_code(request.id),
                 reason=body.reason, project=request.project.name, kind=request.kind,
                 count=request.count, models=request.models, mig_profile=request.mig_profile,
                 milli=request.milli)
    if _auto_approvable(session, request, verdicts, now):
        _transition(session, request, RequestState.APPROVED, AUTO_APPROVER, now,
                    "within the project's auto-approve policy")
    return request


def _proposed(session: Session, principal: Principal, body: RequestCreate, now: datetime,
              max_request_days: float, shape: FleetShape,
              default_request_days: float | None) -> tuple[GpuRequest, list[Verdict]]:
    """The request `body` asks for, checked as creation checks it, not yet in the session
    (`create` adds it; `preview` only looks), with its admission verdicts. Raises what
    creation refuses."""
    principal.require(Action.REQUEST_GPUS)
    project = people.get_project(session, body.project)
    people.require_member(principal, project)
    feasibility.check_environment(session, body)
    try:
        feasibility.check_feasible(body, shape.cells(session))
    except InvalidInput:  # the memo may predate GPUs that make it feasible: ask again
        feasibility.check_feasible(body, shape.cells(session, fresh=True))
    fleet_models = shape.models(session, MODE_OF_KIND[body.kind].value)
    request = GpuRequest(
        project_id=project.id, project=project, requested_by=principal.actor,
        requester_user_id=principal.user_id, kind=body.kind.value,
        models=sorted(set(body.models)) if body.models else None,
        mig_profile=body.mig_profile, milli=body.milli, count=body.count,
        cpu_milli_per_unit=round(body.cpu_cores_per_unit * 1000),
        memory_mib_per_unit=round(body.memory_gib_per_unit * 1024),
        same_node=body.same_node or body.nvlink, nvlink=body.nvlink,
        environment=body.environment, starts_at=body.starts_at, ends_at=body.ends_at,
        duration_s=_duration_s(body, max_request_days, default_request_days),
        justification=body.reason, state=RequestState.PENDING.value, created_at=now)
    verdicts = _admission(session, request, now, max_request_days, admission.ON_CREATE,
                          fleet_models=fleet_models)
    rejected = admission.first(verdicts, Outcome.REJECT)
    if rejected is not None:
        raise InvalidInput(rejected.message, code=rejected.code, details=rejected.details)
    request.needs_operator = admission.needs_operator(verdicts)
    request.wait_code, request.wait_message = "awaiting_approval", "waiting for an operator"
    return request, verdicts


def preview(session: Session, principal: Principal, body: RequestCreate, now: datetime,
            max_request_days: float, shape: FleetShape, default_request_days: float | None,
            fleet: granting.FleetSource) -> RequestPreview:
    """What creating `body` now would come to, writing nothing: the checks and admission
    verdicts `create` applies, whether the auto-approve policy would approve it at once,
    and what the granter's plan (`grant_outcome`) would give it on `fleet` (the placement
    cache, dry: `Granter.dry_run`) if it were approved now."""
    request, verdicts = _proposed(session, principal, body, now, max_request_days, shape,
                                  default_request_days)
    auto = _auto_approvable(session, request, verdicts, now)
    if auto:
        approval = Verdict.accept(AUTO_APPROVED, "within the project's auto-approve policy: "
                                  "approved at once")
    else:  # what `why` will say of it while it is pending
        approval = admission.Approval().check(AdmissionFacts(
            now=now, demand_milli=0, starts_at=None, ends_at=None,
            max_duration=timedelta(days=max_request_days), awaiting_approval=True,
            needs_operator=request.needs_operator))
    steps = [*zip([rule.name for rule in admission.ON_CREATE], verdicts, strict=True),
             ("approval", approval)]
    outcome = grant_outcome(session, request, now, fleet=fleet,
                            quota=quotas.QuotaLedger.read(session, [request.project_id]),
                            pools=granting.PoolLedger.read(session))
    return RequestPreview(
        project=request.project.name, kind=request.kind, count=request.count,
        models=request.models, mig_profile=request.mig_profile, milli=request.milli,
        state=(RequestState.APPROVED if auto else RequestState.PENDING).value,
        needs_operator=request.needs_operator,
        admission=[_verdict_view(name, v) for name, v in steps],
        placement=_placement_preview(request, outcome),
        quotas=_quota_views_for(session, request))


def _verdict_view(rule: str, verdict: Verdict) -> VerdictView:
    return VerdictView(rule=rule, outcome=verdict.outcome.value, code=verdict.code,
                       message=verdict.message, details=verdict.details)


def _placement_preview(request: GpuRequest, outcome: granting.Grant | granting.NoGrant
                       ) -> PlacementPreview:
    steps = [_verdict_view(name, v) for name, v in _grant_steps(request, outcome)]
    if isinstance(outcome, granting.NoGrant):
        return PlacementPreview(placed=False, wait_code=outcome.code,
                                message=outcome.message, steps=steps)
    decision, state = outcome.decision, outcome.live.state
    units = [PlacementUnit(node=u.node, gpu_uuid=u.gpu, gpu_index=u.gpu_index,
                           model=state.gpu(u.gpu).model, kind=u.kind.value, milli=u.milli,
                           mig_profile=request.mig_profile if u.kind is UnitKind.MIG else None,
                           creates_mig_instance=u.creates_mig_instance)
             for u in decision.units]
    pool = pool_code(outcome.pool_id) if outcome.pool_id is not None else None
    where = f"from {pool}" if pool else "from free capacity"
    n_units, n_nodes = len(units), len(decision.nodes)
    said = (f"{n_units} unit{'' if n_units == 1 else 's'} on {n_nodes} "
            f"node{'' if n_nodes == 1 else 's'}, {where}")
    return PlacementPreview(
        placed=True, message=said,
        pool=pool, nodes=list(decision.nodes), units=units,
        mig_plans=len(decision.mig_layouts), steps=steps)


def _duration_s(body: RequestCreate, max_request_days: float,
                default_request_days: float | None) -> int | None:
    """How long the request is held once active; a request that names no end gets the
    default, so none waits or holds forever and none escapes `max_request_days`."""
    if body.ends_at is not None:
        return None
    if body.duration_hours is not None:
        return round(body.duration_hours * 3600)
    if default_request_days is None:
        return None
    return round(min(default_request_days, max_request_days) * 86400)


def _admission(session: Session, request: GpuRequest, now: datetime, max_request_days: float,
               rules: tuple[admission.Rule, ...], capacity=None,
               fleet_models: list[str] | None = None) -> list[Verdict]:
    if fleet_models is None:
        fleet_models = granting.fleet_models(session, FlavourKind(request.kind))
    flavours = granting.candidate_flavours(request, fleet_models)
    facts = quotas.quota_facts(session, request.project_id, flavours)
    pooled = granting.PoolLedger.read(session, request.project_id).matching(request, flavours)
    ends_at = request.ends_at
    if ends_at is None and request.duration_s:
        ends_at = max(request.starts_at or now, now) + timedelta(seconds=request.duration_s)
    return admission.evaluate(rules, AdmissionFacts(
        now=now, demand_milli=granting.demand_milli(request), starts_at=request.starts_at,
        ends_at=ends_at, max_duration=timedelta(days=max_request_days),
        quotas=granting.governing_quotas(facts), capacity=capacity,
        served_by_pool=pool_code(pooled[0].id) if pooled else None,
        awaiting_approval=request.state == RequestState.PENDING.value,
        needs_operator=request.needs_operator))


def _auto_approvable(session: Session, request: GpuRequest, verdicts: list[Verdict],
                     now: datetime) -> bool:
    policy = session.get(AutoApprovePolicy, request.project_id)
    if policy is None or request.needs_operator:
        return False
    if any(v.outcome is not Outcome.ACCEPT for v in verdicts if v.code != "waiting_for_start"):
        return False
    gpus_milli = _gpu_share_milli(request)
    start = max(request.starts_at or now, now)
    end = request.ends_at or (start + timedelta(seconds=request.duration_s)
                              if request.duration_s else None)
    if end is None:
        return False  # an open-ended request is never approved without a person
    return (gpus_milli <= policy.max_milli
            and (end - start).total_seconds() <= policy.max_duration_s)


def _gpu_share_milli(request: GpuRequest) -> int:
    """The request's size in GPUs (milli): MIG instances by their weight, fractions as is."""
    if request.kind == FlavourKind.SHARED.value:
        return request.count * request.milli
    if request.kind == FlavourKind.MIG.value:
        models = request.models or list(catalogue())
        weights = [granting.physical_milli(Flavour(FlavourKind.MIG, m, request.mig_profile),
                                           1, request.milli)
                   for m in models if granting.has_mig_profile(m, request.mig_profile)]
        return request.count * (max(weights) if weights else 1000)
    return request.count * 1000


# --- transitions -------------------------------------------------------------------------
def _transition(session: Session, request: GpuRequest, target: RequestState, actor: str,
                now: datetime, reason: str | None, **details: Any) -> None:
    code = request_code(request.id)
    event = transition_event(RequestState(request.state), target, code)
    previous = request.state
    request.state = target.value
    if target in (RequestState.APPROVED, RequestState.REJECTED):
        request.decided_by, request.decided_at = actor, now
    if target is RequestState.APPROVED:
        request.wait_code, request.wait_message = "queued", "approved; not yet placed"
    if target is RequestState.ACTIVE or target.is_final:
        request.wait_code = request.wait_message = None
    if target.is_final:
        request.closed_at = now
    audit.record(session, at=now, actor=actor, action=event, subject_kind="request",
                 subject=code, reason=reason, **{"from": previous, "to": target.value},
                 **details)


def approve(session: Session, principal: Principal, code: str, now: datetime,
            reason: str | None) -> GpuRequest:
    principal.require(Action.APPROVE_REQUESTS)
    request = get_request(session, principal, code)
    if principal.role is not Role.ADMIN and _is_own(principal, request):
        raise Forbidden("nobody approves their own request (an admin may)",
                        code="self_approval", details={"request": code})
    _transition(session, request, RequestState.APPROVED, principal.actor, now, reason)
    return request


def _is_own(principal: Principal, request: GpuRequest) -> bool:
    """The same person, or the same user-less token, asked for it. The actor is compared as
    pools do; the user id as well, so a user's request stays theirs across their tokens."""
    same_user = (principal.user_id is not None
                 and request.requester_user_id == principal.user_id)
    return same_user or request.requested_by == principal.actor


def reject(session: Session, principal: Principal, code: str, now: datetime,
           reason: str | None) -> GpuRequest:
    principal.require(Action.APPROVE_REQUESTS)
    request = get_request(session, principal, code)
    _transition(session, request, RequestState.REJECTED, principal.actor, now, reason)
    return request


def cancel(session: Session, principal: Principal, code: str, now: datetime,
           reason: str | None) -> GpuRequest:
    principal.require(Action.REQUEST_GPUS)  # get_request hides other projects' requests
    request = get_request(session, principal, code)
    _transition(session, request, RequestState.CANCELLED, principal.actor, now, reason)
    return request


def release(session: Session, principal: Principal, code: str, now: datetime,
            reason: str | None) -> GpuRequest:
    principal.require(Action.REQUEST_GPUS)
    request = get_request(session, principal, code)
    _close(session, request, RequestState.RELEASED, principal.actor, now, reason)
    return request


def release_for(session: Session, request: GpuRequest, actor: str, now: datetime,
                reason: str) -> GpuRequest:
    """Release on the server's own decision (`system:reclaim`): the owner's release path —
    bindings end, labels come off, the transition is audited — with `actor` named."""
    _close(session, request, RequestState.RELEASED, actor, now, reason)
    return request


def _close(session: Session, request: GpuRequest, target: RequestState, actor: str,
           now: datetime, reason: str | None) -> None:
    transition_event(RequestState(request.state), target, request_code(request.id))
    closed = bindings.close_bindings(session, request, request.project.name, now, target.value)
    _transition(session, request, target, actor, now, reason, units_released=len(closed))


def extend(session: Session, principal: Principal, code: str, body: Extend, now: datetime,
           max_request_days: float) -> GpuRequest:
    principal.require(Action.REQUEST_GPUS)
    request = get_request(session, principal, code)
    if RequestState(request.state).is_final:
        raise InvalidInput(f"{code} is {request.state}; only an open request can be extended",
                           code="invalid_transition", details={"state": request.state})
    current_end = granting.end_time(request, request.activated_at or now)
    if body.ends_at is not None:
        new_end = body.ends_at
    elif current_end is not None:
        new_end = current_end + timedelta(hours=body.hours)
    else:
        raise InvalidInput(f"{code} has no end to extend; give `ends_at`", code="no_end")
    if current_end is not None and new_end <= current_end:
        raise InvalidInput("the new end is not later than the current one",
                           code="not_an_extension", details={"ends_at": current_end.isoformat()})
    start = request.activated_at or request.starts_at or now
    if new_end - start > timedelta(days=max_request_days):
        raise InvalidInput(f"a request may last at most {max_request_days:g} days",
                           code="duration_too_long")
    request.ends_at, request.duration_s = new_end, None
    audit.record(session, at=now, actor=principal.actor, action="request.extended",
                 subject_kind="request", subject=code, reason=body.reason,
                 previous_ends_at=current_end.isoformat() if current_end else None,
                 ends_at=new_end.isoformat())
    return request


# --- granting and expiry (the lifecycle loop and approval call these) ---------------------
def activate(session: Session, batch: Sequence[GpuRequest], now: datetime,
             fleet: granting.FleetSource, cache_commit: Callable[[Decision], None]
             ) -> set[int]:
    """Place and bind the approved requests of `batch` whose start has come, in order;
    record why for the others. Each placement is applied to the fleet (`cache_commit`) as
    it is decided, so the next request sees it; the batch is written together. Returns
    the ids that became active."""
    projects = {r.project_id for r in batch}
    quota = quotas.QuotaLedger.read(session, projects)
    pools = granting.PoolLedger.read(session)
    openings, pool_of = [], {}
    for request in batch:
        if request.state != RequestState.APPROVED.value:
            continue
        outcome = grant_outcome(session, request, now, fleet=fleet, quota=quota, pools=pools)
        if isinstance(outcome, granting.NoGrant):
            _set_wait(request, outcome.code, outcome.message)
            continue
        cache_commit(outcome.decision)
        if outcome.pool_id is not None:
            pools.add(outcome.pool_id, outcome.decision)
        else:
            for key, milli in granting.quota_use(request, outcome.decision,
                                                 fleet.live).items():
                quota.add(request.project_id, key, milli)
        openings.append(bindings.Opening(request, outcome.decision, request.project.name))
        pool_of[request.id] = outcome.pool_id
    granting.lock_pools_drawn_on(session, {p for p in pool_of.values() if p is not None})
    opened = bindings.open_bindings(session, openings, fleet.live.gpu_ids,
                                    fleet.live.node_ids, now)
    for opening in openings:
        request, decision = opening.request, opening.decision
        request.pool_id = pool_of[request.id]
        request.activated_at = now
        request.ends_at = granting.end_time(request, now)
        request.duration_s = None if request.ends_at else request.duration_s
        _transition(session, request, RequestState.ACTIVE, SYSTEM_ACTOR, now, None,
                    units=len(opened[request.id]), nodes=sorted(decision.nodes),
                    pool=pool_code(request.pool_id) if request.pool_id else None,
                    mig_plans=len(decision.mig_layouts))
    return {o.request.id for o in openings}


def grant_outcome(session: Session, request: GpuRequest, now: datetime, *,
                  fleet: granting.FleetSource, quota: quotas.QuotaLedger,
                  pools: granting.PoolLedger) -> granting.Grant | granting.NoGrant:
    """What granting an approved request now comes to: the one answer the granter acts on
    and `why` explains, so the two never disagree."""
    if request.starts_at is not None and request.starts_at > now:
        return granting.NoGrant("waiting_for_start",
                                f"reserved from {request.starts_at.isoformat()}")
    return granting.plan(session, request, fleet=fleet, quota=quota, pools=pools)


def _set_wait(request: GpuRequest, code: str, message: str) -> None:
    if (request.wait_code, request.wait_message) != (code, message):
        request.wait_code, request.wait_message = code, message


def expire_due(session: Session, now: datetime, limit: int = 500) -> list[str]:
    """Expire active and approved requests whose end has passed; their codes."""
    due = list(session.scalars(select(GpuRequest).where(
        GpuRequest.state.in_((RequestState.ACTIVE.value, RequestState.APPROVED.value)),
        GpuRequest.ends_at <= now).order_by(GpuRequest.ends_at).limit(limit)))
    for request in due:
        _close(session, request, RequestState.EXPIRED, SYSTEM_ACTOR, now, "its end time passed")
    return [request_code(r.id) for r in due]


def waiting_ids(session: Session, now: datetime, limit: int = 200) -> list[int]:
    """Approved requests that may be granted now, oldest first (first come, first served)."""
    return list(session.scalars(select(GpuRequest.id).where(
        GpuRequest.state == RequestState.APPROVED.value,
        (GpuRequest.starts_at.is_(None)) | (GpuRequest.starts_at <= now))
        .order_by(GpuRequest.id).limit(limit)))


# --- explaining --------------------------------------------------------------------------
def why(session: Session, principal: Principal, code: str, now: datetime,
        max_request_days: float, policy: str) -> RequestWhy:
    request = get_request(session, principal, code)
    state = RequestState(request.state)
    if state is RequestState.APPROVED:
        outcome = grant_outcome(session, request, now,
                                fleet=granting.FreshFleet(session, request, policy),
                                quota=quotas.QuotaLedger.read(session, [request.project_id]),
                                pools=granting.PoolLedger.read(session))
        steps = _grant_steps(request, outcome)
    else:
        rules = admission.WHILE_PENDING if state is RequestState.PENDING else ()
        steps = list(zip([rule.name for rule in rules],
                         _admission(session, request, now, max_request_days, rules),
                         strict=True))
    waiting_on = [v for _, v in steps if v.outcome is not Outcome.ACCEPT]
    position = length = None
    if state in (RequestState.PENDING, RequestState.APPROVED):
        ahead = session.scalar(select(func.count()).select_from(GpuRequest).where(
            GpuRequest.state == state.value, GpuRequest.id < request.id))
        length = session.scalar(select(func.count()).select_from(GpuRequest).where(
            GpuRequest.state == state.value))
        position = int(ahead) + 1
    views_ = [VerdictView(rule=name, outcome=v.outcome.value, code=v.code,
                          message=v.message, details=v.details) for name, v in steps]
    summary = _summary(request, state, waiting_on, position, length)
    return RequestWhy(code=code, state=state.value, waiting=bool(waiting_on),
                      wait_code=waiting_on[0].code if waiting_on else request.wait_code
                      if state is RequestState.ACTIVE else None, summary=summary,
                      queue_position=position, queue_length=length, verdicts=views_,
                      quotas=_quota_views_for(session, request))


# The granter's steps, in its order, and the step each of its wait codes stops at. An
# active or closed request waits on nothing (its own units count against its quota then,
# which is no reason to wait), so it lists none.
GRANT_STEPS = ("time_window", "quota", "pool_reservation", "capacity")
STEP_OF_WAIT = {"waiting_for_start": "time_window", "quota_exhausted": "quota",
                "pool_reserved": "pool_reservation", "waiting_for_capacity": "capacity"}


def _grant_steps(request: GpuRequest, outcome: granting.Grant | granting.NoGrant
                 ) -> list[tuple[str, Verdict]]:
    """The granter's outcome as `why` shows it: each step it passed, and the one it
    stopped at (nothing after: the granter did not get there)."""
    if isinstance(outcome, granting.Grant):
        quota = (admission.within_pool(pool_code(outcome.pool_id))
                 if outcome.pool_id is not None else Verdict.accept())
        return [(step, quota if step == "quota" else Verdict.accept()) for step in GRANT_STEPS]
    stop = STEP_OF_WAIT[outcome.code]
    steps = [(step, Verdict.accept()) for step in GRANT_STEPS[:GRANT_STEPS.index(stop)]]
    if outcome.code == "quota_exhausted":
        stopped = admission.quota_exhausted(outcome.quotas, granting.demand_milli(request))
    elif outcome.code == "waiting_for_capacity" and outcome.capacity is not None:
        stopped = admission.capacity_wait(outcome.capacity)
    else:
        stopped = Verdict(Outcome.WAIT, outcome.code, outcome.message)
    return [*steps, (stop, stopped)]


def _summary(request: GpuRequest, state: RequestState, waiting_on: list[Verdict],
             position: int | None, length: int | None) -> str:
    code = request_code(request.id)
    if state is RequestState.ACTIVE and request.wait_code == "units_lost":
        return f"{code} is active but degraded: {request.wait_message}"
    if state is RequestState.ACTIVE:
        return f"{code} is active: its units are bound"
    if state.is_final:
        return f"{code} is {state.value}; it waits for nothing"
    queue = f" (position {position} of {length} {state.value} requests)" if position else ""
    if not waiting_on:
        return f"{code} is {state.value} and can be granted now{queue}"
    return f"{code} is {state.value}, waiting: {waiting_on[0].code}{queue}"


def _quota_views_for(session: Session, request: GpuRequest) -> list[QuotaView]:
    keys = {f.key for f in granting.candidate_flavours(
        request, granting.fleet_models(session, FlavourKind(request.kind)))}
    return [q for q in quotas.quota_views(session, request.project) if q.flavour in keys]


def history(session: Session, principal: Principal, code: str, cursor: str | None,
            limit: int) -> tuple[list[AuditEvent], str | None]:
    """The request's audit events, oldest first, one page (a long-lived request that is
    extended and re-queued has no bound on its history)."""
    request = get_request(session, principal, code)
    query = select(AuditEvent).where(AuditEvent.subject_kind == AuditSubject.REQUEST.value,
                                     AuditEvent.subject == request_code(request.id))
    rows, next_cursor = keyset_page(session, query, _EVENTS_OLDEST_FIRST, cursor, limit)
    return [event for (event,) in rows], next_cursor

