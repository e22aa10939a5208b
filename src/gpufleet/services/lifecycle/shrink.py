"""Shrink an active allocation: end some of its units and keep the rest.

What reclamation's `shrink` action does with a multi-unit allocation whose units are only
partly used (docs/operations.md, "Reclamation"). The units go back through the release
path (`bindings.close_bindings`: slots, fractions and labels freed, the nodes told), the
allocation stays `active` with what is left, and the audit log says `request.shrunk` with
how many units went and how many are left. Its quota is freed with the units (quotas count
open bindings). Ending every unit is a release, not a shrink: the caller releases instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.requests import RequestState, request_code
from gpufleet.services.access import audit
from gpufleet.services.lifecycle import bindings
from gpufleet.store.tables import Binding, GpuRequest

SHRUNK = "shrunk"  # the end reason of the bindings a shrink ends


def release_units(session: Session, request: GpuRequest, gpu_ids: Iterable[int], actor: str,
                  now: datetime, reason: str) -> list[Binding]:
    """End the request's open bindings on `gpu_ids`; the bindings ended. Refused (400)
    unless the request is active and keeps at least one unit."""
    code = request_code(request.id)
    if request.state != RequestState.ACTIVE.value:
        raise InvalidInput(f"{code} is {request.state}; only an active allocation shrinks",
                           code="invalid_transition", details={"state": request.state})
    wanted = set(gpu_ids)
    held = dict(session.execute(
        select(Binding.gpu_id, func.count()).where(Binding.request_id == request.id,
                                                   Binding.ended_at.is_(None))
        .group_by(Binding.gpu_id)).all())
    if not wanted & held.keys():
        return []
    if held.keys() <= wanted:
        raise InvalidInput(f"shrinking {code} by every unit it holds is a release",
                           code="shrink_to_nothing")
    closed = bindings.close_bindings(session, request, request.project.name, now, SHRUNK,
                                     on_gpu_ids=wanted & held.keys())
    audit.record(session, at=now, actor=actor, action="request.shrunk", subject_kind="request",
                 subject=code, reason=reason, units_released=len(closed),
                 units_left=sum(held.values()) - len(closed))
    return closed
