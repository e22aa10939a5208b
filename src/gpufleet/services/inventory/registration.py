"""Node registration and heartbeat: how agents enter and stay in the inventory.

Registration is idempotent: the node is found by its credential (or, when joining with a
join token, by its machine id), and its reported inventory replaces what was known. A join
token takes over an existing node by its machine id only when that node is unreachable (its
old agent has gone silent) and in the join token's environment; a live node and a retired
one (retired stays retired) are refused with 409 and the refusal is audited, so a leaked
join token cannot revoke a working agent's credential or read a node's bindings. A GPU
UUID already on another node moves only when that node is unreachable or retired, or an
operator approved the move; otherwise the whole registration is refused (409), the GPU is
marked `suspect`, and the refusal is audited — the audit and the mark are written in their
own transaction after the refused one rolled back, so nothing of the registration is
half-written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, Role
from gpufleet.domain.errors import Conflict, Forbidden
from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.gpu_models import normalise_model
from gpufleet.domain.inventory import (
    GpuHealth,
    NodeAdminState,
    NodeStatus,
    SharingMode,
    canonical_gpu_uuid,
)
from gpufleet.services.access import audit, tokens
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.nodes import refresh_status
from gpufleet.services.lifecycle import bindings
from gpufleet.store.tables import (
    ApiToken,
    Environment,
    Gpu,
    GpuMoveApproval,
    JoinToken,
    MigInstance,
    Node,
    NodeLabel,
)
from gpufleet.wire.agent import (
    DesiredState,
    GpuReport,
    Heartbeat,
    HeartbeatReply,
    NodeRegistration,
    RegistrationReply,
    applies_mig_plans,
    mig_instance_key,
)


@dataclass
class GpuClaimConflict(Exception):
    """Raised inside the registration transaction; turned into 409 after rollback."""

    node_name: str
    claims: list[tuple[str, str]] = field(default_factory=list)  # (gpu uuid, current node)


@dataclass
class JoinRefused(Exception):
    """A join token presented for a machine id it may not take over; raised inside the
    registration transaction, audited and turned into `error` (409) after rollback."""

    error: Conflict
    node_name: str
    details: dict


@dataclass(frozen=True)
class RegistrationCaller:
    """Who presented what: a join token (new node) or a node credential (re-registration)."""

    join_token_id: int | None = None
    agent_node_id: int | None = None


def identify_caller(session: Session, raw_token: str, now: datetime) -> RegistrationCaller:
    if tokens.is_join_token(raw_token):
        return RegistrationCaller(join_token_id=tokens.find_join_token(session, raw_token, now).id)
    token = tokens.find_api_token(session, raw_token, now)
    if Role(token.role) is not Role.AGENT or token.node_id is None:
        raise Forbidden("only a join token or a node's own credential may register a node",
                        code="wrong_token_kind", details={"role": token.role})
    return RegistrationCaller(agent_node_id=token.node_id)


def register(session: Session, caller: RegistrationCaller, body: NodeRegistration,
             now: datetime, token_ttl: timedelta | None,
             heartbeat_interval_s: float) -> RegistrationReply:
    """Apply one registration inside the caller's transaction (see module docstring)."""
    join_token = session.get(JoinToken, caller.join_token_id) if caller.join_token_id else None
    node = _find_node(session, caller, body, join_token)
    _free_hostname(session, body.hostname, node)
    created = node is None
    if node is None:
        node = Node(machine_id=body.machine_id, registered_at=now, admin_state="active",
                    desired_state_version=1, reachable=True, status=NodeStatus.READY.value,
                    environment_id=join_token.environment_id, name=body.hostname,
                    cpu_cores=body.cpu_cores, memory_bytes=body.memory_bytes)
        session.add(node)
    environment_id = join_token.environment_id if join_token else node.environment_id
    environment = session.get(Environment, environment_id)
    node.environment_id = environment.id
    node.name = body.hostname
    node.cpu_cores = body.cpu_cores
    node.memory_bytes = body.memory_bytes
    node.agent_version = body.agent_version
    node.os_name = body.os_name
    node.driver_version = body.driver_version
    node.cuda_version = body.cuda_version
    node.applies_mig_plans = applies_mig_plans(body)
    node.last_seen_at = now
    node.reachable = True
    _replace_labels(node, body.labels)
    session.flush()

    moves, missing, added, gpus = _apply_gpus(session, node, environment, body.gpus, now)
    refresh_status(session, node, gpus)
    session.flush()
    bindings.retire_applied_mig_plans(session, gpus)

    credential = None
    if join_token is not None:
        credential = _issue_credential(session, node, now, token_ttl, first=created)
        join_token.used_at = now
        join_token.used_by_node_id = node.id
    action = "node.registered" if created else "node.reregistered"
    if created or join_token is not None or moves or missing or added:
        audit.record(session, at=now, actor=f"node:{node.name}", action=action,
                     subject_kind="node", subject=node.name, machine_id=node.machine_id,
                     environment=environment.name, gpus=len(body.gpus),
                     added_gpus=added, moved_gpus=moves, missing_gpus=missing)
    reply = RegistrationReply(
        node=node.name, node_status=NodeStatus(node.status), environment=environment.name,
        credential=credential, heartbeat_interval_s=heartbeat_interval_s,
        desired_state=desired_state(session, node), gpus_registered=len(body.gpus))
    return reply


def _find_node(session: Session, caller: RegistrationCaller, body: NodeRegistration,
               join_token: JoinToken | None) -> Node | None:
    if caller.agent_node_id is not None:
        node = session.get(Node, caller.agent_node_id)
        if node.machine_id != body.machine_id:
            raise Forbidden(f"this credential belongs to node '{node.name}' (machine id "
                            f"{node.machine_id}); another machine must join with its own "
                            "join token", code="machine_id_mismatch",
                            details={"node": node.name})
        if node.admin_state == NodeAdminState.RETIRED.value:
            raise Conflict(f"node '{node.name}' is retired", code="node_retired")
        return node
    node = session.scalar(select(Node).where(Node.machine_id == body.machine_id))
    if node is not None:
        _check_takeover(node, join_token, body)
    return node


def _check_takeover(node: Node, join_token: JoinToken, body: NodeRegistration) -> None:
    """A join token may take over `node` (the node already holding the machine id) only
    when the node is unreachable and in the token's environment; otherwise JoinRefused."""
    details = {"node": node.name, "status": node.status}
    if node.status == NodeStatus.RETIRED.value:
        error = Conflict(
            f"machine id {body.machine_id} is node '{node.name}', which an operator retired; "
            "retired nodes stay retired. To bring this machine back, give it a new machine id "
            "(regenerate /etc/machine-id) and join again", code="node_retired",
            details={"node": node.name})
    elif node.environment_id != join_token.environment_id:
        details.update(environment=node.environment.name,
                       join_token_environment=join_token.environment.name)
        error = Conflict(
            f"machine id {body.machine_id} is node '{node.name}' in environment "
            f"'{node.environment.name}'; a join token for '{join_token.environment.name}' "
            "cannot move it. Retire the node first, or join with a token of its environment",
            code="environment_mismatch",
            details={k: details[k] for k in ("node", "environment", "join_token_environment")})
    elif node.status != NodeStatus.UNREACHABLE.value:
        error = Conflict(
            f"machine id {body.machine_id} is node '{node.name}', which is {node.status} with "
            "a working agent; a join token takes over a node only once it is unreachable. "
            "Restart the node's agent with its credential, or stop that agent and wait for "
            "the node to become unreachable", code="node_live",
            details={"node": node.name, "status": node.status})
    else:
        return
    raise JoinRefused(error, node.name, {**details, "machine_id": body.machine_id,
                                         "hostname": body.hostname, "code": error.code})


def _free_hostname(session: Session, hostname: str, node: Node | None) -> None:
    """A hostname belongs to one live node; a retired holder gives it up (cloud VMs are
    replaced under the same name), a live one makes the registration a conflict."""
    holder = session.scalar(select(Node).where(Node.name == hostname))
    if holder is None or holder is node:
        return
    if holder.admin_state != NodeAdminState.RETIRED.value:
        raise Conflict(f"hostname '{hostname}' belongs to another live node (machine id "
                       f"{holder.machine_id})", code="hostname_taken",
                       details={"node": hostname})
    holder.name = f"{holder.name}~retired-{holder.id}"
    session.flush()


def _replace_labels(node: Node, labels: dict[str, str]) -> None:
    current = {label.key: label for label in node.labels}
    for key in set(current) - set(labels):
        node.labels.remove(current[key])
    for key, value in labels.items():
        if key in current:
            current[key].value = value
        else:
            node.labels.append(NodeLabel(key=key, value=value))


def _apply_gpus(session: Session, node: Node, environment: Environment,
                reports: list[GpuReport],
                now: datetime) -> tuple[list[dict], list[str], list[str], list[Gpu]]:
    """Apply the reported GPUs; returns (moved from other nodes, missing, new to gpufleet,
    every GPU now on the node — so the caller need not read them again)."""
    by_uuid = {canonical_gpu_uuid(r.uuid): r for r in reports}
    existing = {gpu.uuid: gpu for gpu in session.scalars(  # locked: grants count on them
        select(Gpu).where(Gpu.uuid.in_(by_uuid)).with_for_update()
        .execution_options(populate_existing=True))} if by_uuid else {}
    moves = _check_claims(session, node, existing, now)
    gone = session.scalars(select(Gpu).where(Gpu.node_id == node.id,
                                             Gpu.uuid.not_in(by_uuid))).all()
    added, gpus = [], list(gone)
    moved = {move["gpu"] for move in moves}
    for uuid, report in by_uuid.items():
        gpu = existing.get(uuid)
        if gpu is None:
            gpu = Gpu(uuid=uuid, first_seen_at=now, health=GpuHealth.HEALTHY.value,
                      allocated=False, status="free")
            session.add(gpu)
            added.append(uuid)
        _update_gpu(gpu, node, environment, report)
        _take_reported_mode(session, gpu, _sharing_mode(report, environment), node, now)
        _clear_registration_suspicion(gpu, moved=uuid in moved)
        _replace_mig_instances(gpu, report)
        gpus.append(gpu)
    missing = []
    for gpu in gone:
        if gpu.health == GpuHealth.HEALTHY.value:
            gpu.health = GpuHealth.SUSPECT.value
            gpu.health_reason = MISSING_REASON
            missing.append(gpu.uuid)
    return moves, missing, added, gpus


def _check_claims(session: Session, node: Node, existing: dict[str, Gpu],
                  now: datetime) -> list[dict]:
    moves, conflict = [], GpuClaimConflict(node.name)
    for uuid, gpu in existing.items():
        if gpu.node_id == node.id:
            continue
        old = session.get(Node, gpu.node_id)
        approval = session.scalar(select(GpuMoveApproval).where(
            GpuMoveApproval.gpu_uuid == uuid, GpuMoveApproval.to_node_name == node.name,
            GpuMoveApproval.used_at.is_(None)))
        if old.status in (NodeStatus.UNREACHABLE.value, NodeStatus.RETIRED.value):
            moves.append({"gpu": uuid, "from": old.name, "because": f"old node {old.status}"})
        elif approval is not None:
            approval.used_at = now
            moves.append({"gpu": uuid, "from": old.name, "because": "operator approved"})
        else:
            conflict.claims.append((uuid, old.name))
    if conflict.claims:
        raise conflict
    for move in moves:
        audit.record(session, at=now, actor=f"node:{node.name}", action="gpu.moved",
                     subject_kind="gpu", subject=move["gpu"], reason=move["because"],
                     from_node=move["from"], to_node=node.name)
    return moves


def _sharing_mode(report: GpuReport, environment: Environment) -> str:
    if report.sharing_mode is not None:
        return report.sharing_mode.value
    if report.mig_enabled:
        return SharingMode.MIG.value
    if environment.default_sharing_mode == SharingMode.MIG.value:
        return SharingMode.EXCLUSIVE.value  # MIG mode is off: the GPU can only go whole
    return environment.default_sharing_mode


CLAIM_REFUSED_ACTION = "gpu.claim_refused"
MISSING_REASON = "missing from its node's latest inventory"
CLAIM_REASON_PREFIX = "claimed by node"


def _clear_registration_suspicion(gpu: Gpu, moved: bool) -> None:
    """Undo what registration itself concluded once the facts changed: a GPU reported
    again is no longer missing, and one that moved by the rules is no longer contested.
    Suspicion from anywhere else (an operator, telemetry) stays."""
    if gpu.health != GpuHealth.SUSPECT.value or not gpu.health_reason:
        return
    if gpu.health_reason == MISSING_REASON or (
            moved and gpu.health_reason.startswith(CLAIM_REASON_PREFIX)):
        gpu.health, gpu.health_reason = GpuHealth.HEALTHY.value, None


def _update_gpu(gpu: Gpu, node: Node, environment: Environment, report: GpuReport) -> None:
    resolved = normalise_model(report.name, report.pci_device_id)
    gpu.node_id = node.id
    gpu.environment_id = environment.id
    gpu.index = report.index
    gpu.model = resolved.key
    gpu.model_known = resolved.known
    gpu.reported_name = report.name
    gpu.pci_device_id = report.pci_device_id
    gpu.pci_bus_id = report.pci_bus_id
    gpu.memory_bytes = report.memory_bytes
    gpu.driver_version = report.driver_version
    gpu.nvlink_peers = ([canonical_gpu_uuid(p) for p in report.nvlink_peers]
                        if report.nvlink_peers is not None else None)
    gpu.mig_instances_unread = report.mig_instances_unread


def _take_reported_mode(session: Session, gpu: Gpu, reported: str, node: Node,
                        now: datetime) -> None:
    """A GPU holding open bindings keeps the sharing mode they were made in, so placement
    never offers its capacity twice (services/lifecycle/bindings.py, the binding guard);
    the reported mode waits in `pending_sharing_mode`, flagged on the GPU and audited, and
    applies when the last binding ends. Refusing the registration instead would leave the
    node's whole inventory stale for one GPU's sake."""
    if not gpu.open_bindings or gpu.bound_kind is None:
        gpu.sharing_mode, gpu.pending_sharing_mode = reported, None
        return
    bound_mode = bindings.sharing_mode_of_kind(gpu.bound_kind)
    pending = None if reported == bound_mode else reported
    if pending != gpu.pending_sharing_mode:
        audit.record(session, at=now, actor=f"node:{node.name}",
                     action="gpu.sharing_mode_pending" if pending
                     else "gpu.sharing_mode_pending_cleared",
                     subject_kind="gpu", subject=gpu.uuid,
                     reason="held by open bindings: the change waits until they end" if pending
                     else "its node reports the mode its bindings hold again",
                     reported=reported, kept=bound_mode, open_bindings=gpu.open_bindings)
    gpu.sharing_mode, gpu.pending_sharing_mode = bound_mode, pending


def _replace_mig_instances(gpu: Gpu, report: GpuReport) -> None:
    geometry = None
    known = catalogue_model(gpu.model) if gpu.model_known else None
    if known is not None:
        geometry = known.mig
    wanted = {m.key: m for m in report.mig_instances}
    current = {mig_instance_key(m.profile_id, m.placement_start, m.gpu_instance_id): m
               for m in gpu.mig_instances}
    for key in set(current) - set(wanted):
        gpu.mig_instances.remove(current[key])
    for key, m in wanted.items():
        row = current.get(key)
        if row is None:
            row = MigInstance(profile_id=m.profile_id, placement_start=m.placement_start)
            gpu.mig_instances.append(row)
        profile = geometry.profile(m.profile_id) if geometry else None
        row.placement_size = m.placement_size or (
            profile.memory_slices if profile and m.placement_start is not None else None)
        fallback_name = profile.name if profile else f"profile-{m.profile_id}"
        row.profile_name = m.profile_name or fallback_name
        row.mig_uuid = m.mig_uuid
        row.gpu_instance_id = m.gpu_instance_id
        row.compute_instance_id = m.compute_instance_id
        row.memory_bytes = m.memory_bytes


def _issue_credential(session: Session, node: Node, now: datetime,
                      ttl: timedelta | None, first: bool) -> str:
    """A fresh agent token for the node; any earlier credential of the node is revoked."""
    if not first:
        for old in session.scalars(select(ApiToken).where(ApiToken.node_id == node.id,
                                                          ApiToken.revoked_at.is_(None))):
            old.revoked_at = now
    raw, _ = tokens.issue_api_token(session, name=f"node:{node.name}", role=Role.AGENT,
                                    created_by="join", now=now, ttl=ttl, node_id=node.id)
    return raw


def mark_claims_suspect(session: Session, conflict: GpuClaimConflict, machine_id: str,
                        now: datetime) -> None:
    """The refused registration's lasting trace: the GPUs are suspect, and it is audited."""
    for uuid, current_node in conflict.claims:
        gpu = session.scalar(select(Gpu).where(Gpu.uuid == uuid))
        if gpu is None:
            continue
        gpu.health = GpuHealth.SUSPECT.value
        gpu.health_reason = (f"{CLAIM_REASON_PREFIX} '{conflict.node_name}' while registered "
                             f"on '{current_node}'")
        node = session.get(Node, gpu.node_id)
        refresh_status(session, node)
        audit.record(session, at=now, actor=f"node:{conflict.node_name}",
                     action=CLAIM_REFUSED_ACTION, subject_kind="gpu", subject=uuid,
                     reason="GPU registered on another live node; approve the move or retire "
                            "the old node", current_node=current_node,
                     claiming_node=conflict.node_name, claiming_machine_id=machine_id)


def record_join_refusal(session: Session, refused: JoinRefused, join_token_id: int,
                        now: datetime) -> None:
    """The refused join's lasting trace, written after the registration rolled back."""
    join_token = session.get(JoinToken, join_token_id)
    audit.record(session, at=now, actor=f"join-token:{join_token.prefix}",
                 action="node.join_refused", subject_kind="node", subject=refused.node_name,
                 reason=refused.error.message, **refused.details)


def claim_conflict_error(conflict: GpuClaimConflict) -> Conflict:
    listed = ", ".join(f"{uuid} (on {node})" for uuid, node in conflict.claims)
    return Conflict(
        f"node '{conflict.node_name}' claims GPUs registered on other live nodes: {listed}; "
        "they are now marked suspect. An operator may approve the move "
        "(POST /api/v1/gpus/{uuid}/move-approvals) or retire the old node",
        code="gpu_claimed_by_other_node",
        details={"gpus": [{"uuid": u, "current_node": n} for u, n in conflict.claims]})


def desired_state(session: Session, node: Node) -> DesiredState:
    """What the node should be: its open bindings and MIG plans (services/lifecycle/bindings.py)."""
    session.flush()
    return bindings.desired_state(session, node)


def heartbeat(session: Session, principal: Principal, body: Heartbeat, now: datetime,
              heartbeat_interval_s: float) -> HeartbeatReply:
    principal.require(Action.AGENT_HEARTBEAT)
    node = session.get(Node, principal.node_id)
    if node is None or node.admin_state == NodeAdminState.RETIRED.value:
        raise Conflict("this node is retired; its agent should stop", code="node_retired")
    node.last_seen_at = now
    if body.agent_version:
        node.agent_version = body.agent_version
    if not node.reachable:
        node.reachable = True
        refresh_status(session, node)
        audit.record(session, at=now, actor=principal.actor, action="node.reachable",
                     subject_kind="node", subject=node.name)
    return HeartbeatReply(node=node.name, node_status=NodeStatus(node.status),
                          heartbeat_interval_s=heartbeat_interval_s,
                          desired_state=desired_state(session, node))
