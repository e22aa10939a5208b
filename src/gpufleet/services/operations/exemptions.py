"""Exemptions from reclamation: an allocation kept, with a reason, until a time.

Only operators grant them (`reclaim:manage`): an exemption takes an allocation out of the
pool's reach, which is the operators' trade-off to make. An owner may *ask* — the same call
by someone who may only request GPUs records the ask (audited, and told to the receivers
that take `reclaim.exemption_asked`), which protects nothing until an operator grants it
(docs/operations.md, "Exemptions"). The latest grant decides, so an operator can shorten
one as well as lengthen it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, AuditSubject, is_allowed
from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.domain.requests import RequestState, request_code
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.lifecycle.requests import get_request
from gpufleet.services.operations import outbox
from gpufleet.store.tables import GpuRequest, ReclaimExemption
from gpufleet.wire.reclaim import ExemptCreate, ExemptionView

GRANTED = "granted"
ASKED = "asked"
MAX_EXEMPTION = timedelta(days=90)


def exempt(session: Session, principal: Principal, code: str, body: ExemptCreate,
           now: datetime) -> ReclaimExemption:
    """Grant (operators) or ask for (the allocation's own project) an exemption."""
    granting = is_allowed(principal.role, Action.MANAGE_RECLAIM)
    if not granting:
        principal.require(Action.REQUEST_GPUS)  # viewers neither grant nor ask
    request = get_request(session, principal, code)  # members: their projects' only
    if RequestState(request.state).is_final:
        raise InvalidInput(f"{code} is {request.state}; only an open allocation can be "
                           "exempted", code="invalid_transition",
                           details={"state": request.state})
    expires_at = body.until if body.until is not None else now + timedelta(hours=body.hours)
    if expires_at <= now:
        raise InvalidInput("the exemption's end has passed already", code="exemption_in_past",
                           details={"until": expires_at.isoformat()})
    if expires_at - now > MAX_EXEMPTION:
        raise InvalidInput(f"an exemption lasts at most {MAX_EXEMPTION.days} days; ask "
                           "again when it ends", code="exemption_too_long",
                           details={"max_days": MAX_EXEMPTION.days})
    row = ReclaimExemption(request_id=request.id, state=GRANTED if granting else ASKED,
                           reason=body.reason, expires_at=expires_at, asked_by=principal.actor,
                           asked_at=now, granted_by=principal.actor if granting else None,
                           granted_at=now if granting else None)
    session.add(row)
    audit.record(session, at=now, actor=principal.actor,
                 action="reclaim.exempted" if granting else "reclaim.exemption_asked",
                 subject_kind=AuditSubject.REQUEST, subject=code, reason=body.reason,
                 until=expires_at.isoformat())
    if not granting:
        outbox.notify(session, Notification(
            kind="reclaim.exemption_asked", severity=Severity.INFO,
            summary=f"{code}: {principal.actor} asks to keep it from reclamation until "
                    f"{expires_at:%Y-%m-%d %H:%M} UTC: {body.reason} — an operator grants "
                    f"it with `gpufleet request exempt {code} --reason … --until …`",
            dedup_key=f"reclaim.exemption_asked:{code}:{now.isoformat()}",
            labels={"allocation": code, "project": request.project.name}), now)
    session.flush()
    return row


def exempt_now(session: Session, request_ids: Iterable[int], now: datetime) -> set[int]:
    """Of `request_ids`, those whose latest granted exemption has not expired."""
    ids = list(request_ids)
    latest: dict[int, ReclaimExemption] = {}
    for lo in range(0, len(ids), 500):
        for row in session.scalars(select(ReclaimExemption).where(
                ReclaimExemption.request_id.in_(ids[lo:lo + 500]),
                ReclaimExemption.state == GRANTED).order_by(ReclaimExemption.id)):
            latest[row.request_id] = row
    return {rid for rid, row in latest.items() if row.expires_at > now}


def view(row: ReclaimExemption, request: GpuRequest) -> ExemptionView:
    return ExemptionView(allocation=request_code(row.request_id), project=request.project.name,
                         state=row.state, reason=row.reason, expires_at=row.expires_at,
                         asked_by=row.asked_by, asked_at=row.asked_at,
                         granted_by=row.granted_by, granted_at=row.granted_at)


def list_exemptions(session: Session, principal: Principal, now: datetime,
                    *, include_expired: bool = False) -> list[ExemptionView]:
    principal.require(Action.READ_RECLAIM)
    query = (select(ReclaimExemption, GpuRequest)
             .join(GpuRequest, GpuRequest.id == ReclaimExemption.request_id)
             .order_by(ReclaimExemption.id.desc()).limit(1000))
    if not include_expired:
        query = query.where(ReclaimExemption.expires_at > now)
    return [view(row, request) for row, request in session.execute(query).all()
            if principal.sees_project(request.project.name)]
