"""GPU health: apply the health rules to the fleet, move GPUs, keep the history, tell the
owners; and the operator's side (clear, read) (docs/operations.md, "GPU health and
quarantine").

Every move is one transition row, an audit event and, for a quarantine, the path the
trust issue chose for it: the bindings on the GPU end and each allocation that held one
is flagged `units_lost` (services/lifecycle/lost_units.py). Owners are told through the
outbox in the same transaction (services/operations/outbox.notify).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.inventory import GpuHealth, NodeStatus, canonical_gpu_uuid
from gpufleet.domain.operations.health import Finding, Move, check_clear, check_retire, decide
from gpufleet.domain.operations.health_rules import HealthRule, HealthThresholds, findings
from gpufleet.domain.operations.mig_health import MigXidRule
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.domain.requests import request_code
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.nodes import refresh_status
from gpufleet.services.inventory.registration import MISSING_REASON
from gpufleet.services.lifecycle import lost_units
from gpufleet.services.lookup import not_found
from gpufleet.services.operations import mig_health
from gpufleet.services.operations.health_signals import (
    contained_per_gpu,
    instance_xids,
    read_signals,
    stored_spellings,
)
from gpufleet.services.operations.health_text import cause_of, text_of
from gpufleet.services.operations.outbox import notify_all
from gpufleet.settings import Settings
from gpufleet.store.tables import (
    AuditEvent,
    Binding,
    Environment,
    Gpu,
    GpuHealthTransition,
    GpuRequest,
    MigInstance,
    Node,
    Project,
    User,
)
from gpufleet.tsdb import TelemetryStore
from gpufleet.wire.health import GpuHealthView, HealthTransitionView

EVALUATOR = "system:health"
REGISTRATION_ACTIONS = ("node.registered", "node.reregistered")
HISTORY_LIMIT = 100
# The GPU's own transitions; a MIG instance's name its place (mig_health.py).
GPU_OWN = GpuHealthTransition.mig_profile_id.is_(None)


def thresholds(settings: Settings) -> HealthThresholds:
    def seconds(value: float | None) -> timedelta | None:
        return None if value is None else timedelta(seconds=value)

    return HealthThresholds(
        xid_quarantine=frozenset(settings.health_xid_quarantine),
        xid_suspect=frozenset(settings.health_xid_suspect),
        ecc_uncorrected_min_increase=settings.health_ecc_uncorrected_min_increase,
        nvlink_suspect_per_s=settings.health_nvlink_suspect_per_s,
        nvlink_quarantine_per_s=settings.health_nvlink_quarantine_per_s,
        slowdown_min_share=settings.health_slowdown_min_share,
        slowdown_min_span=timedelta(seconds=settings.health_slowdown_min_span_s),
        missing_quarantine_after=seconds(settings.health_missing_quarantine_s))


def mig_rule(settings: Settings) -> MigXidRule:
    """The MIG instances' rule, as the settings name its XIDs."""
    return MigXidRule(frozenset(settings.health_mig_xid_quarantine),
                      frozenset(settings.health_mig_xid_suspect))


@dataclass(frozen=True)
class Holder:
    """An allocation with open bindings on a GPU, before the GPU is quarantined."""

    code: str
    project: str
    owner: str | None
    on_gpu: int
    held: int
    mig_instances: tuple[str, ...]


@dataclass
class EvaluationResult:
    """What one evaluation did: (GPU, from, to, rule) per move, and the nodes touched."""

    moves: list[tuple[str, str, str, str | None]] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class _Judged:
    gpu_id: int
    uuid: str
    health: GpuHealth
    node: str
    environment: str
    missing_since: datetime | None


def _judged(session: Session) -> list[_Judged]:
    """The GPUs the rules judge: healthy or suspect, on nodes not retired."""
    rows = session.execute(
        select(Gpu.id, Gpu.uuid, Gpu.health, Gpu.health_reason, Node.name, Environment.name)
        .join(Node, Node.id == Gpu.node_id).join(Environment, Environment.id == Gpu.environment_id)
        .where(Gpu.health.in_([GpuHealth.HEALTHY.value, GpuHealth.SUSPECT.value]),
               Node.status != NodeStatus.RETIRED.value).order_by(Gpu.id)).all()
    missing = _missing_since(session, {uuid: node for _, uuid, _, reason, node, _ in rows
                                       if reason == MISSING_REASON})
    return [_Judged(gpu_id, uuid, GpuHealth(health), node, env, missing.get(uuid))
            for gpu_id, uuid, health, _, node, env in rows]


def _missing_since(session: Session, node_of: dict[str, str]) -> dict[str, datetime]:
    """When each GPU went missing: the registration of its node that first lacked it, as
    the audit log has it (`missing_gpus`). A GPU with no such event is left out: the rule
    then sees it as not missing rather than missing since an unknown time."""
    if not node_of:
        return {}
    found: dict[str, datetime] = {}
    events = session.scalars(
        select(AuditEvent).where(AuditEvent.subject_kind == "node",
                                 AuditEvent.subject.in_(sorted(set(node_of.values()))),
                                 AuditEvent.action.in_(REGISTRATION_ACTIONS))
        .order_by(AuditEvent.id.desc()))
    for event in events:
        for uuid in (event.details or {}).get("missing_gpus") or ():
            if node_of.get(uuid) == event.subject:
                found.setdefault(uuid, event.at)
        if len(found) == len(node_of):
            break
    return found


def _latest_transitions(session: Session, gpu_ids: Iterable[int]
                        ) -> dict[int, GpuHealthTransition]:
    ids = list(gpu_ids)
    out: dict[int, GpuHealthTransition] = {}
    for lo in range(0, len(ids), 500):
        latest = (select(func.max(GpuHealthTransition.id))
                  .where(GpuHealthTransition.gpu_id.in_(ids[lo:lo + 500]), GPU_OWN)
                  .group_by(GpuHealthTransition.gpu_id))
        for t in session.scalars(select(GpuHealthTransition)
                                 .where(GpuHealthTransition.id.in_(latest))):
            out[t.gpu_id] = t
    return out


@dataclass(frozen=True)
class Planned:
    """A move one evaluation decided, and the state it decided it from (re-checked when
    applied: an operator may have acted in between)."""

    gpu_id: int
    uuid: str
    node: str
    was: GpuHealth
    move: Move


def _recently_cleared(session: Session, since: datetime) -> dict[int, datetime]:
    """GPUs an operator returned to healthy after `since`, and when (the latest)."""
    rows = session.execute(
        select(GpuHealthTransition.gpu_id, func.max(GpuHealthTransition.at))
        .where(GpuHealthTransition.at > since, GpuHealthTransition.rule.is_(None), GPU_OWN,
               GpuHealthTransition.to_state == GpuHealth.HEALTHY.value)
        .group_by(GpuHealthTransition.gpu_id))
    return dict(rows.all())


def plan(session: Session, telemetry: TelemetryStore, pack: tuple[HealthRule, ...],
         now: datetime, window: timedelta, suspect_hold: timedelta) -> list[Planned]:
    """Apply `pack` to every healthy or suspect GPU; the moves it calls for. Reads only (the
    telemetry queries run outside the write transaction)."""
    judged = _judged(session)
    if not judged:
        return []
    cleared = _recently_cleared(session, now - window)
    contained = contained_per_gpu(instance_xids(telemetry, now, window))
    signals = read_signals(telemetry, {j.uuid: j.missing_since for j in judged
                                       if j.gpu_id not in cleared}, now, window,
                           contained=contained)
    for j in judged:  # an operator cleared it: only what happened since counts
        if j.gpu_id in cleared:
            since, uuids = now - cleared[j.gpu_id], stored_spellings(j.uuid)
            signals.update(read_signals(
                telemetry, {j.uuid: j.missing_since}, now, since, uuids=uuids,
                contained=contained_per_gpu(instance_xids(telemetry, now, since,
                                                          uuids=uuids))))
    suspects = [j.gpu_id for j in judged if j.health is GpuHealth.SUSPECT]
    latest = _latest_transitions(session, suspects) if suspects else {}
    planned = []
    for j in judged:
        found = findings(pack, signals[j.uuid], now)
        last = latest.get(j.gpu_id)
        current_rule = last.rule if last is not None and last.to_state == j.health.value \
            else None
        move = decide(j.health, current_rule, last.at if last else None, found, now,
                      suspect_hold)
        if move is not None:
            planned.append(Planned(j.gpu_id, j.uuid, j.node, j.health, move))
    return planned


def apply(session: Session, planned: Iterable[Planned], now: datetime) -> EvaluationResult:
    """Make the planned moves in the caller's transaction, skipping a GPU whose health
    changed since the plan read it. Idempotent: a second evaluation over the same data
    finds the GPUs already moved (a quarantine is never undone here) and queues nothing."""
    result = EvaluationResult()
    for p in planned:
        gpu = session.scalar(select(Gpu).where(Gpu.id == p.gpu_id).with_for_update())
        if gpu is None or gpu.health != p.was.value:
            continue
        apply_move(session, gpu, p.move, EVALUATOR, None, now)
        result.moves.append((p.uuid, p.was.value, p.move.to.value,
                             p.move.finding.rule if p.move.finding else None))
        result.nodes.add(p.node)
    return result


def apply_move(session: Session, gpu: Gpu, move: Move, actor: str, reason: str | None,
               now: datetime) -> GpuHealthTransition:
    """Move `gpu` to `move.to`: the GPU row, its node's status, the transition, the audit
    event; for a quarantine the lost units and the owners told."""
    previous = GpuHealth(gpu.health)
    finding = move.finding
    holders = _holders(session, gpu) if move.to is GpuHealth.QUARANTINED else []
    gpu.health = move.to.value
    gpu.health_reason = None if move.to is GpuHealth.HEALTHY else \
        (f"{finding.rule}: {finding.evidence.line}" if finding else reason)
    refresh_status(session, session.get(Node, gpu.node_id))
    transition = _record(session, gpu, previous, move.to, finding, actor, reason, now)
    audit.record(session, at=now, actor=actor, action="gpu.health_changed",
                 subject_kind="gpu", subject=gpu.uuid,
                 reason=reason or (finding.evidence.line if finding else None),
                 previous=previous.value, health=move.to.value,
                 rule=finding.rule if finding else None,
                 evidence=finding.evidence.as_dict() if finding else None)
    if move.to is GpuHealth.QUARANTINED:
        why = reason or (finding.evidence.line if finding else None)
        lost_units.gpu_quarantined(session, gpu.uuid, actor, now, why)
    _tell(session, gpu, transition, holders, now)
    return transition


def _record(session: Session, gpu: Gpu, previous: GpuHealth, to: GpuHealth,
            finding: Finding | None, actor: str, reason: str | None,
            now: datetime) -> GpuHealthTransition:
    transition = GpuHealthTransition(
        gpu_id=gpu.id, at=now, from_state=previous.value, to_state=to.value,
        rule=finding.rule if finding else None,
        evidence=finding.evidence.as_dict() if finding else None, actor=actor, reason=reason)
    session.add(transition)
    session.flush()
    return transition


def _holders(session: Session, gpu: Gpu) -> list[Holder]:
    """The allocations with open bindings on `gpu`, with how many units each holds there
    and in all, read before the quarantine ends those bindings."""
    rows = session.execute(
        select(Binding.request_id, Binding.mig_profile_id, Binding.mig_start, Project.name,
               User.name)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .join(Project, Project.id == GpuRequest.project_id)
        .outerjoin(User, User.id == GpuRequest.requester_user_id)
        .where(Binding.gpu_id == gpu.id, Binding.ended_at.is_(None))
        .order_by(Binding.request_id)).all()
    if not rows:
        return []
    mig_uuids = {(m.profile_id, m.placement_start): m.mig_uuid for m in session.scalars(
        select(MigInstance).where(MigInstance.gpu_id == gpu.id))}
    ids = sorted({r[0] for r in rows})
    held = dict(session.execute(
        select(Binding.request_id, func.count()).where(
            Binding.request_id.in_(ids), Binding.ended_at.is_(None))
        .group_by(Binding.request_id)).all())
    by_request: dict[int, list] = {}
    for row in rows:
        by_request.setdefault(row[0], []).append(row)
    holders = []
    for request_id, bound in by_request.items():
        _, _, _, project, owner = bound[0]
        migs = tuple(sorted({mig_uuids.get((p, s)) or "" for _, p, s, _, _ in bound
                             if p is not None} - {""}))
        holders.append(Holder(request_code(request_id), project, owner, len(bound),
                              held.get(request_id, len(bound)), migs))
    return holders


def _tell(session: Session, gpu: Gpu, transition: GpuHealthTransition,
          holders: list[Holder], now: datetime) -> None:
    """Quarantined: a critical notification per allocation that held units on the GPU (to
    its owner and the broadcast receivers), or one for the GPU if none did. Suspect: a
    warning to broadcast receivers. Back to healthy: nobody."""
    to = GpuHealth(transition.to_state)
    if to is GpuHealth.HEALTHY:
        return
    node = session.get(Node, gpu.node_id)
    environment = session.get(Environment, gpu.environment_id)
    cause = cause_of(transition)
    base = {"environment": environment.name, "node": node.name, "gpu": gpu.uuid,
            "mig_instance": ""}
    key = f"health.{to.value}|{gpu.uuid}|{transition.id}"
    if to is GpuHealth.SUSPECT:
        notify_all(session, [Notification(
            kind="health.suspect", severity=Severity.WARNING, dedup_key=key,
            summary=f"{gpu.uuid} on {node.name} is suspect ({cause})",
            text=text_of(transition), labels={**base, "allocation": "", "project": "",
                                            "owner": ""})], now)
        return
    notifications = [Notification(
        kind="health.quarantined", severity=Severity.CRITICAL, dedup_key=f"{key}|{h.code}",
        summary=f"{h.code}: {gpu.uuid} on {node.name} quarantined ({cause}); "
                f"{h.on_gpu} of {h.held} units lost",
        text=text_of(transition),
        labels={**base, "mig_instance": ",".join(h.mig_instances), "allocation": h.code,
                "project": h.project, "owner": h.owner or ""},
        owners=(h.owner,) if h.owner else ()) for h in holders]
    if not notifications:
        notifications.append(Notification(
            kind="health.quarantined", severity=Severity.CRITICAL, dedup_key=key,
            summary=f"{gpu.uuid} on {node.name} quarantined ({cause}); no allocation held it",
            text=text_of(transition),
            labels={**base, "allocation": "", "project": "", "owner": ""}))
    notify_all(session, notifications, now)


# --- by hand ------------------------------------------------------------------------------
def record_manual(session: Session, uuid: str, previous: GpuHealth, holders: list[Holder],
                  actor: str, reason: str | None, now: datetime) -> None:
    """Keep the history of a change made through `gpu quarantine | unquarantine` (the
    inventory's `set_health` made it; the bindings already ended): the transition and, for
    a quarantine, the owners told."""
    gpu = session.scalar(select(Gpu).where(Gpu.uuid == canonical_gpu_uuid(uuid)))
    to = GpuHealth(gpu.health)
    if to is previous:
        return
    transition = _record(session, gpu, previous, to, None, actor, reason, now)
    _tell(session, gpu, transition, holders, now)


def holders_of(session: Session, uuid: str) -> list[Holder]:
    gpu = session.scalar(select(Gpu).where(Gpu.uuid == canonical_gpu_uuid(uuid)))
    return [] if gpu is None else _holders(session, gpu)


def health_of(session: Session, uuid: str) -> GpuHealth | None:
    value = session.scalar(select(Gpu.health).where(Gpu.uuid == canonical_gpu_uuid(uuid)))
    return None if value is None else GpuHealth(value)


def clear(session: Session, principal: Principal, uuid: str, reason: str,
          now: datetime) -> str:
    """An operator returns a suspect or quarantined GPU to healthy (409 when it is healthy
    already); audited, and the transition records who cleared it. Returns the GPU's node."""
    principal.require(Action.MANAGE_INVENTORY)
    gpu = session.scalar(select(Gpu).where(Gpu.uuid == canonical_gpu_uuid(uuid))
                         .with_for_update())
    if gpu is None:
        raise not_found("gpu", uuid, label="GPU")
    check_clear(GpuHealth(gpu.health), gpu.uuid)
    previous = GpuHealth(gpu.health)
    gpu.health, gpu.health_reason = GpuHealth.HEALTHY.value, None
    node = session.get(Node, gpu.node_id)
    refresh_status(session, node)
    _record(session, gpu, previous, GpuHealth.HEALTHY, None, principal.actor, reason, now)
    audit.record(session, at=now, actor=principal.actor, action="gpu.health_cleared",
                 subject_kind="gpu", subject=gpu.uuid, reason=reason,
                 previous=previous.value, health=GpuHealth.HEALTHY.value)
    return node.name


def retire(session: Session, principal: Principal, uuid: str, reason: str,
           now: datetime) -> str:
    """An operator retires a quarantined GPU for good (409 for any other state); placement
    never uses it again and nothing returns it. Returns the GPU's node."""
    principal.require(Action.MANAGE_INVENTORY)
    gpu = session.scalar(select(Gpu).where(Gpu.uuid == canonical_gpu_uuid(uuid))
                         .with_for_update())
    if gpu is None:
        raise not_found("gpu", uuid, label="GPU")
    previous = GpuHealth(gpu.health)
    check_retire(previous, gpu.uuid)
    gpu.health, gpu.health_reason = GpuHealth.RETIRED.value, reason
    node = session.get(Node, gpu.node_id)
    refresh_status(session, node)
    _record(session, gpu, previous, GpuHealth.RETIRED, None, principal.actor, reason, now)
    audit.record(session, at=now, actor=principal.actor, action="gpu.retired",
                 subject_kind="gpu", subject=gpu.uuid, reason=reason,
                 previous=previous.value, health=GpuHealth.RETIRED.value)
    return node.name


def read(session: Session, principal: Principal, uuid: str) -> GpuHealthView:
    """A GPU's health, the rule and evidence behind it, and its history. Members see only
    GPUs their projects hold a unit on (others are 404, as if absent)."""
    principal.require(Action.READ_INVENTORY)
    row = session.execute(
        select(Gpu, Node.name, Environment.name).join(Node, Node.id == Gpu.node_id)
        .join(Environment, Environment.id == Gpu.environment_id)
        .where(Gpu.uuid == canonical_gpu_uuid(uuid))).first()
    if row is None or not _may_read(session, principal, row[0]):
        raise not_found("gpu", uuid, label="GPU")
    gpu, node, environment = row
    history = list(session.scalars(
        select(GpuHealthTransition).where(GpuHealthTransition.gpu_id == gpu.id, GPU_OWN)
        .order_by(GpuHealthTransition.id.desc()).limit(HISTORY_LIMIT)))
    current = history[0] if history and history[0].to_state == gpu.health else None
    cleared = next((t.actor for t in history
                    if t.to_state == GpuHealth.HEALTHY.value and t.rule is None), None)
    return GpuHealthView(
        gpu=gpu.uuid, node=node, environment=environment, health=GpuHealth(gpu.health),
        health_reason=gpu.health_reason, rule=current.rule if current else None,
        evidence=current.evidence if current else None,
        since=current.at if current else None, cleared_by=cleared,
        history=[HealthTransitionView.model_validate(t) for t in history],
        mig_instances=mig_health.views(session, gpu))


def _may_read(session: Session, principal: Principal, gpu: Gpu) -> bool:
    if principal.visible_projects is None:
        return True
    if not principal.project_names:
        return False
    return session.scalar(
        select(Binding.id).join(Project, Project.id == Binding.project_id)
        .where(Binding.gpu_id == gpu.id, Binding.ended_at.is_(None),
               Project.name.in_(sorted(principal.project_names))).limit(1)) is not None
