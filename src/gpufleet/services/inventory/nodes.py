"""Nodes: their derived status, operator actions, and the silent-node sweep."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import Conflict
from gpufleet.domain.inventory import (
    GpuHealth,
    NodeAdminState,
    NodeStatus,
    gpu_status,
    node_status,
    silence_cutoff,
)
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import one_where
from gpufleet.store.tables import ApiToken, Gpu, Node


def get_node(session: Session, name: str) -> Node:
    return one_where(session, Node, Node.name == name, "node", name)


def refresh_status(session: Session, node: Node, gpus: Iterable[Gpu] | None = None) -> None:
    """Recompute the cached status of a node and of every GPU on it.

    `gpus`, when the caller already holds all of the node's GPUs, saves reading them again.
    """
    node.status = node_status(NodeAdminState(node.admin_state), node.reachable).value
    status = NodeStatus(node.status)
    if gpus is None:
        gpus = session.scalars(select(Gpu).where(Gpu.node_id == node.id))
    for gpu in gpus:
        gpu.status = gpu_status(status, GpuHealth(gpu.health), gpu.allocated).value


def _set_admin_state(session: Session, principal: Principal, name: str, target: NodeAdminState,
                     action: str, now: datetime, reason: str | None) -> Node:
    principal.require(Action.MANAGE_INVENTORY)
    node = get_node(session, name)
    current = NodeAdminState(node.admin_state)
    if current is NodeAdminState.RETIRED and target is not NodeAdminState.RETIRED:
        raise Conflict(f"node '{name}' is retired, and retired nodes stay retired; its "
                       "machine returns only as a new node, under a new machine id",
                       code="node_retired", details={"node": name})
    if current is target:
        return node
    node.admin_state = target.value
    node.status_reason = reason
    refresh_status(session, node)
    if target is NodeAdminState.RETIRED:
        # A retired node's credential must not keep writing.
        for token in session.scalars(select(ApiToken).where(ApiToken.node_id == node.id,
                                                            ApiToken.revoked_at.is_(None))):
            token.revoked_at = now
    audit.record(session, at=now, actor=principal.actor, action=action, subject_kind="node",
                 subject=name, reason=reason, previous=current.value)
    return node


def cordon(session: Session, principal: Principal, name: str, now: datetime,
           reason: str | None) -> Node:
    return _set_admin_state(session, principal, name, NodeAdminState.CORDONED, "node.cordoned",
                            now, reason)


def uncordon(session: Session, principal: Principal, name: str, now: datetime,
             reason: str | None) -> Node:
    return _set_admin_state(session, principal, name, NodeAdminState.ACTIVE, "node.uncordoned",
                            now, reason)


def retire(session: Session, principal: Principal, name: str, now: datetime,
           reason: str | None) -> Node:
    return _set_admin_state(session, principal, name, NodeAdminState.RETIRED, "node.retired",
                            now, reason)


def mark_silent_nodes_unreachable(session: Session, now: datetime, heartbeat_interval_s: float,
                                  missed_heartbeats: int) -> list[str]:
    """Nodes whose agents missed `missed_heartbeats` intervals in a row become unreachable."""
    cutoff = silence_cutoff(now, heartbeat_interval_s, missed_heartbeats)
    silent = session.scalars(select(Node).where(
        Node.reachable.is_(True),
        Node.admin_state != NodeAdminState.RETIRED.value,
        Node.last_seen_at < cutoff)).all()
    for node in silent:
        node.reachable = False
        refresh_status(session, node)
        audit.record(session, at=now, actor="system", action="node.unreachable",
                     subject_kind="node", subject=node.name,
                     reason=f"no heartbeat for {missed_heartbeats} intervals",
                     last_seen_at=node.last_seen_at.isoformat() if node.last_seen_at else None)
    return [node.name for node in silent]
