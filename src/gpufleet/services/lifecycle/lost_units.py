"""Units an allocation loses when an operator retires their node or quarantines their GPU.

A retired node never comes back and a quarantined GPU is not fit to compute on, so the
binding cannot stay open: gpufleet would keep saying that the allocation holds a unit it
cannot use, bill it, and keep the unit's slots claimed. In the operator's transaction the
bindings on those GPUs end (end reason `node_retired` / `gpu_quarantined`); each allocation
that held one stays `active` with what it has left and is flagged: `wait_code`
`units_lost` and a `wait_message` naming the units and why, shown by `request show`,
`request why` and the API. The owner sees it there and in `request history`
(`request.units_lost`, by the operator, with the operator's reason); to get replacement
units the owner asks again (docs/lifecycle.md, "When units are lost").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from gpufleet.domain.inventory import canonical_gpu_uuid
from gpufleet.domain.requests import request_code
from gpufleet.services.access import audit
from gpufleet.services.lifecycle import bindings
from gpufleet.store.tables import Binding, Gpu, GpuRequest, Node

UNITS_LOST = "units_lost"
CAUSES = {"node_retired": "node retired", "gpu_quarantined": "GPU quarantined",
          "mig_instance_quarantined": "MIG instance quarantined"}
MigPlace = tuple[int, int]  # a MIG instance's key on its GPU: (profile id, placement start)


def node_retired(session: Session, node_id: int, actor: str, now: datetime,
                 reason: str | None) -> list[str]:
    gpu_ids = session.scalars(select(Gpu.id).where(Gpu.node_id == node_id))
    return end_units_on(session, gpu_ids, "node_retired", actor, now, reason)


def gpu_quarantined(session: Session, uuid: str, actor: str, now: datetime,
                    reason: str | None) -> list[str]:
    gpu_ids = session.scalars(select(Gpu.id).where(Gpu.uuid == uuid))
    return end_units_on(session, gpu_ids, "gpu_quarantined", actor, now, reason)


def mig_instance_quarantined(session: Session, gpu_id: int, place: MigPlace, actor: str,
                             now: datetime, reason: str | None) -> list[str]:
    """A quarantined MIG instance: only the bindings on it end; the GPU's other instances
    keep serving (docs/operations.md, "MIG instances")."""
    return end_units_on(session, [gpu_id], "mig_instance_quarantined", actor, now, reason,
                        mig_place=place)


def holding(*, node: str | None = None, gpu_uuid: str | None = None) -> Select:
    """The ids of the requests with an open binding on the node or GPU named, as a subquery:
    what retiring the node or quarantining the GPU would take units from."""
    query = (select(Binding.request_id).join(Gpu, Gpu.id == Binding.gpu_id)
             .join(Node, Node.id == Binding.node_id).where(Binding.ended_at.is_(None)))
    if node is not None:
        query = query.where(Node.name == node)
    if gpu_uuid is not None:
        query = query.where(Gpu.uuid == canonical_gpu_uuid(gpu_uuid))
    return query


def affected_request_ids(session: Session, gpu_ids: Iterable[int],
                         mig_place: MigPlace | None = None) -> list[int]:
    """Requests holding an open binding on any of these GPUs (on that MIG instance of
    them, when `mig_place` is given), oldest first."""
    query = select(Binding.request_id).where(Binding.gpu_id.in_(list(gpu_ids)),
                                             Binding.ended_at.is_(None))
    if mig_place is not None:
        query = query.where(Binding.mig_profile_id == mig_place[0],
                            Binding.mig_start == mig_place[1])
    return list(session.scalars(query.distinct().order_by(Binding.request_id)))


def end_units_on(session: Session, gpu_ids: Iterable[int], cause: str, actor: str,
                 now: datetime, reason: str | None,
                 mig_place: MigPlace | None = None) -> list[str]:
    """End every open binding on `gpu_ids` (only those on the MIG instance at `mig_place`,
    when given) and flag the allocations that held them; returns their codes. `cause` is
    a key of `CAUSES`."""
    gpu_ids = list(gpu_ids)
    codes = []
    for request_id in affected_request_ids(session, gpu_ids, mig_place):
        request = session.get(GpuRequest, request_id)
        held_before = _open_count(session, request_id)
        closed = bindings.close_bindings(session, request, request.project.name, now, cause,
                                         on_gpu_ids=gpu_ids, on_mig_place=mig_place)
        lost = _describe(session, closed, cause)
        code = request_code(request_id)
        request.wait_message = _append(request, f"lost {len(closed)} of {held_before} "
                                       f"units at {now.isoformat(timespec='seconds')}: {lost}")
        request.wait_code = UNITS_LOST
        audit.record(session, at=now, actor=actor, action="request.units_lost",
                     subject_kind="request", subject=code, reason=reason, cause=cause,
                     units_lost=len(closed), units_left=held_before - len(closed))
        codes.append(code)
    return codes


def _open_count(session: Session, request_id: int) -> int:
    return len(session.scalars(select(Binding.id).where(
        Binding.request_id == request_id, Binding.ended_at.is_(None))).all())


def _describe(session: Session, closed: list[Binding], cause: str) -> str:
    """`GPU-…, GPU-… on gpu-17 (node retired)`, one group per node."""
    rows = session.execute(select(Gpu.id, Gpu.uuid, Node.name).join(Node, Node.id == Gpu.node_id)
                           .where(Gpu.id.in_({b.gpu_id for b in closed}))).all()
    uuid_of = {gpu_id: uuid for gpu_id, uuid, _ in rows}
    node_of = {gpu_id: node for gpu_id, _, node in rows}
    per_node: dict[str, list[str]] = defaultdict(list)
    for binding in closed:
        unit = uuid_of[binding.gpu_id]
        if cause == "mig_instance_quarantined":
            unit = f"MIG {binding.mig_profile_id}@{binding.mig_start} of {unit}"
        per_node[node_of[binding.gpu_id]].append(unit)
    return "; ".join(f"{', '.join(sorted(set(uuids)))} on {node} ({CAUSES[cause]})"
                     for node, uuids in sorted(per_node.items()))


def _append(request: GpuRequest, message: str) -> str:
    """A second loss adds to the first: the flag keeps every loss until the request ends."""
    if request.wait_code == UNITS_LOST and request.wait_message:
        return f"{request.wait_message}; {message}"
    return message
