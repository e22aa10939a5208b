"""Operator actions on single GPUs: health (quarantine) and approving a move between nodes."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import Conflict, InvalidInput
from gpufleet.domain.inventory import GpuHealth, canonical_gpu_uuid
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.nodes import refresh_status
from gpufleet.services.inventory.registration import CLAIM_REFUSED_ACTION
from gpufleet.services.lookup import not_found, one_where
from gpufleet.store.tables import AuditEvent, Gpu, GpuMoveApproval, Node
from gpufleet.wire.inventory import GpuHealthChange, GpuMoveApprovalCreate, GpuMoveApprovalView


def _get_gpu(session: Session, uuid: str) -> Gpu:
    return one_where(session, Gpu, Gpu.uuid == canonical_gpu_uuid(uuid), "gpu", uuid,
                     label="GPU")


def _is_known_claimant(session: Session, gpu_uuid: str, node_name: str) -> bool:
    """Is `node_name` a node of the inventory, or a host refused for claiming the GPU?"""
    if session.scalar(select(Node.id).where(Node.name == node_name)) is not None:
        return True
    return session.scalar(select(AuditEvent.id).where(
        AuditEvent.subject_kind == "gpu", AuditEvent.subject == gpu_uuid,
        AuditEvent.action == CLAIM_REFUSED_ACTION,
        AuditEvent.actor == f"node:{node_name}").limit(1)) is not None


def set_health(session: Session, principal: Principal, uuid: str, body: GpuHealthChange,
               now: datetime) -> str:
    """Quarantine a GPU (placement skips it) or return it to service; audited."""
    principal.require(Action.MANAGE_INVENTORY)
    gpu = _get_gpu(session, uuid)
    if body.health is GpuHealth.RETIRED:
        raise InvalidInput("a GPU is retired with `gpufleet gpu retire` (POST "
                           "/api/v1/gpus/{uuid}/retire), once quarantined",
                           code="use_gpu_retire", details={"health": body.health.value})
    if gpu.health == GpuHealth.RETIRED.value:
        raise Conflict(f"GPU {gpu.uuid} is retired: a retired GPU does not return to "
                       "service", code="gpu_retired",
                       details={"gpu": gpu.uuid, "health": gpu.health})
    previous = gpu.health
    gpu.health = body.health.value
    # The reason says why a GPU is unhealthy; why it returned to service is in the audit log.
    gpu.health_reason = None if body.health is GpuHealth.HEALTHY else body.reason
    refresh_status(session, session.get(Node, gpu.node_id))
    audit.record(session, at=now, actor=principal.actor, action="gpu.health_changed",
                 subject_kind="gpu", subject=gpu.uuid, reason=body.reason,
                 previous=previous, health=body.health.value)
    return gpu.uuid


def approve_move(session: Session, principal: Principal, uuid: str, body: GpuMoveApprovalCreate,
                 now: datetime) -> GpuMoveApprovalView:
    """Allow the next registration of `to_node` to take this GPU from its current node.

    `to_node` must be a node the inventory has, or the host whose registration was refused
    for claiming this very GPU (a new host is not in the inventory until the move is
    approved); any other name is 404 `node_not_found`. An approval for a name nothing
    answers to would wait, unseen, for whichever host first registers under it: a typo
    must not quietly become a standing permission."""
    principal.require(Action.MANAGE_INVENTORY)
    gpu = _get_gpu(session, uuid)
    if not _is_known_claimant(session, gpu.uuid, body.to_node):
        raise not_found("node", body.to_node)
    approval = GpuMoveApproval(gpu_uuid=gpu.uuid, to_node_name=body.to_node,
                               approved_by=principal.actor, reason=body.reason, created_at=now)
    session.add(approval)
    audit.record(session, at=now, actor=principal.actor, action="gpu.move_approved",
                 subject_kind="gpu", subject=gpu.uuid, reason=body.reason, to_node=body.to_node)
    session.flush()
    return GpuMoveApprovalView.model_validate(approval)
