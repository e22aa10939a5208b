"""MIG instance health: judge each instance on the XIDs its events named, move it, keep
its history beside the GPU's, tell the owners; and the operator's clear and read
(docs/operations.md, "MIG instances").

The GPU's own health still rules: the health loop moves GPUs first, and an instance whose
GPU is (or has just been) quarantined or retired is not judged — the GPU's quarantine
already ended every binding on it. An instance's quarantine ends only the bindings on
that instance (`lost_units.mig_instance_quarantined`), and the placement loads it as held,
so nobody is given it and no re-partition removes it until an operator clears it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.inventory import OUT_OF_SERVICE, GpuHealth, NodeStatus, canonical_gpu_uuid
from gpufleet.domain.operations.health import Finding, Move, decide
from gpufleet.domain.operations.mig_health import (
    MigSignals,
    MigXidRule,
    check_mig_clear,
    mig_findings,
)
from gpufleet.domain.operations.notifications import Notification, Severity
from gpufleet.domain.requests import request_code
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.lifecycle import lost_units
from gpufleet.services.lookup import not_found
from gpufleet.services.operations.health_signals import instance_xids, stored_spellings
from gpufleet.services.operations.health_text import cause_of, text_of
from gpufleet.services.operations.outbox import notify_all
from gpufleet.store.tables import (
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
from gpufleet.wire.health import HealthTransitionView, MigInstanceHealthView

JUDGED = (GpuHealth.HEALTHY.value, GpuHealth.SUSPECT.value)
HISTORY_LIMIT = 20


@dataclass(frozen=True)
class PlannedInstance:
    """A move one evaluation decided for a MIG instance, and the states it read (re-checked
    when applied)."""

    instance_id: int
    gpu_id: int
    mig_uuid: str
    node: str
    was: GpuHealth
    move: Move


def _place(t: GpuHealthTransition | MigInstance) -> tuple[int, int, int | None]:
    if isinstance(t, MigInstance):
        return (t.gpu_id, t.profile_id, t.placement_start)
    return (t.gpu_id, t.mig_profile_id, t.mig_start)


def _instances(session: Session) -> list[tuple[MigInstance, str, str]]:
    """Healthy or suspect instances with a MIG UUID, on healthy or suspect GPUs of nodes
    not retired: (instance, GPU UUID, node)."""
    return [(m, uuid, node) for m, uuid, node in session.execute(
        select(MigInstance, Gpu.uuid, Node.name).join(Gpu, Gpu.id == MigInstance.gpu_id)
        .join(Node, Node.id == Gpu.node_id)
        .where(MigInstance.health.in_(JUDGED), MigInstance.mig_uuid.is_not(None),
               Gpu.health.in_(JUDGED), Node.status != NodeStatus.RETIRED.value)
        .order_by(MigInstance.id))]


def _instance_rows(gpu_ids: Iterable[int]) -> Select:
    return select(GpuHealthTransition).where(GpuHealthTransition.gpu_id.in_(list(gpu_ids)),
                                             GpuHealthTransition.mig_profile_id.is_not(None))


def _recently_cleared(session: Session, since: datetime, gpu_ids: Iterable[int]
                      ) -> dict[tuple[int, int, int | None], datetime]:
    """Instances an operator returned to healthy after `since`, and when (the latest)."""
    found: dict[tuple[int, int, int | None], datetime] = {}
    for t in session.scalars(_instance_rows(gpu_ids).where(
            GpuHealthTransition.at > since, GpuHealthTransition.rule.is_(None),
            GpuHealthTransition.to_state == GpuHealth.HEALTHY.value)):
        found[_place(t)] = max(t.at, found.get(_place(t), t.at))
    return found


def _latest(session: Session, instances: list[MigInstance]
            ) -> dict[tuple[int, int, int | None], GpuHealthTransition]:
    """The latest transition of each of these instances."""
    if not instances:
        return {}
    wanted = {_place(m) for m in instances}
    out: dict[tuple[int, int, int | None], GpuHealthTransition] = {}
    for t in session.scalars(_instance_rows({m.gpu_id for m in instances})
                             .order_by(GpuHealthTransition.id)):
        if _place(t) in wanted:
            out[_place(t)] = t
    return out


def plan(session: Session, telemetry: TelemetryStore, rule: MigXidRule, now: datetime,
         window: timedelta, suspect_hold: timedelta) -> list[PlannedInstance]:
    """Apply `rule` to every healthy or suspect instance of a healthy or suspect GPU; the
    moves it calls for. Reads only."""
    rows = _instances(session)
    if not rows:
        return []
    xids = instance_xids(telemetry, now, window)
    cleared = _recently_cleared(session, now - window, {m.gpu_id for m, _, _ in rows})
    suspects = [m for m, _, _ in rows if m.health == GpuHealth.SUSPECT.value]
    latest = _latest(session, suspects)
    planned = []
    for instance, gpu_uuid, node in rows:
        key = canonical_gpu_uuid(gpu_uuid)
        seen, span = xids.get((key, instance.mig_uuid), {}), window
        if _place(instance) in cleared:  # an operator cleared it: only what came since
            span = now - cleared[_place(instance)]
            seen = instance_xids(telemetry, now, span, uuids=stored_spellings(gpu_uuid)).get(
                (key, instance.mig_uuid), {})
        signals = MigSignals(gpu_uuid, instance.mig_uuid, span, seen)
        found = mig_findings(rule, signals, now)
        last = latest.get(_place(instance))
        health = GpuHealth(instance.health)
        current_rule = last.rule if last is not None and last.to_state == health.value \
            else None
        move = decide(health, current_rule, last.at if last else None, found, now,
                      suspect_hold)
        if move is not None:
            planned.append(PlannedInstance(instance.id, instance.gpu_id, instance.mig_uuid,
                                           node, health, move))
    return planned


def apply(session: Session, planned: Iterable[PlannedInstance], actor: str,
          now: datetime) -> tuple[list[tuple[str, str, str, str | None]], set[str]]:
    """Make the planned moves in the caller's transaction (after the GPUs' own): an
    instance whose GPU is out of service now, or whose state changed since the plan, is
    skipped. Returns the moves, as (MIG UUID, from, to, rule), and the nodes touched."""
    moves, nodes = [], set()
    for p in planned:
        gpu = session.scalar(select(Gpu).where(Gpu.id == p.gpu_id).with_for_update())
        if gpu is None or gpu.health in OUT_OF_SERVICE:
            continue
        instance = session.get(MigInstance, p.instance_id, with_for_update=True)
        if instance is None or instance.health != p.was.value or \
                instance.mig_uuid != p.mig_uuid:
            continue
        apply_move(session, gpu, instance, p.move, actor, None, now)
        moves.append((p.mig_uuid, p.was.value, p.move.to.value,
                      p.move.finding.rule if p.move.finding else None))
        nodes.add(p.node)
    return moves, nodes


def apply_move(session: Session, gpu: Gpu, instance: MigInstance, move: Move, actor: str,
               reason: str | None, now: datetime) -> GpuHealthTransition:
    """Move `instance` to `move.to`: the row, the transition, the audit event; for a
    quarantine the bindings on the instance end and their owners are told. The caller
    holds the GPU's row (grants re-check instances after taking it)."""
    previous = GpuHealth(instance.health)
    finding = move.finding
    place = (instance.profile_id, instance.placement_start)
    holders = _holders(session, gpu, instance) if move.to is GpuHealth.QUARANTINED else []
    instance.health = move.to.value
    instance.health_reason = None if move.to is GpuHealth.HEALTHY else \
        (f"{finding.rule}: {finding.evidence.line}" if finding else reason)
    transition = _record(session, instance, previous, move.to, finding, actor, reason, now)
    why = reason or (finding.evidence.line if finding else None)
    audit.record(session, at=now, actor=actor, action="gpu.mig_health_changed",
                 subject_kind="gpu", subject=gpu.uuid, reason=why,
                 mig_instance=instance.mig_uuid, mig_profile=instance.profile_name,
                 previous=previous.value, health=move.to.value,
                 rule=finding.rule if finding else None,
                 evidence=finding.evidence.as_dict() if finding else None)
    if move.to is GpuHealth.QUARANTINED and place[1] is not None:
        lost_units.mig_instance_quarantined(session, gpu.id, place, actor, now, why)
    _tell(session, gpu, instance, transition, holders, now)
    return transition


def _record(session: Session, instance: MigInstance, previous: GpuHealth, to: GpuHealth,
            finding: Finding | None, actor: str, reason: str | None,
            now: datetime) -> GpuHealthTransition:
    transition = GpuHealthTransition(
        gpu_id=instance.gpu_id, mig_profile_id=instance.profile_id,
        mig_start=instance.placement_start, mig_uuid=instance.mig_uuid, at=now,
        from_state=previous.value, to_state=to.value,
        rule=finding.rule if finding else None,
        evidence=finding.evidence.as_dict() if finding else None, actor=actor, reason=reason)
    session.add(transition)
    session.flush()
    return transition


@dataclass(frozen=True)
class _Holder:
    code: str
    project: str
    owner: str | None
    on_instance: int
    held: int


def _holders(session: Session, gpu: Gpu, instance: MigInstance) -> list[_Holder]:
    """The allocations with an open binding on the instance, read before they end."""
    rows = session.execute(
        select(Binding.request_id, Project.name, User.name)
        .join(GpuRequest, GpuRequest.id == Binding.request_id)
        .join(Project, Project.id == GpuRequest.project_id)
        .outerjoin(User, User.id == GpuRequest.requester_user_id)
        .where(Binding.gpu_id == gpu.id, Binding.ended_at.is_(None),
               Binding.mig_profile_id == instance.profile_id,
               Binding.mig_start == instance.placement_start)
        .order_by(Binding.request_id)).all()
    if not rows:
        return []
    ids = sorted({r[0] for r in rows})
    held = dict(session.execute(
        select(Binding.request_id, func.count()).where(
            Binding.request_id.in_(ids), Binding.ended_at.is_(None))
        .group_by(Binding.request_id)).all())
    on: dict[int, int] = {}
    for request_id, _, _ in rows:
        on[request_id] = on.get(request_id, 0) + 1
    first = {r[0]: r for r in reversed(rows)}
    return [_Holder(request_code(i), first[i][1], first[i][2], on[i], held.get(i, on[i]))
            for i in ids]


def _tell(session: Session, gpu: Gpu, instance: MigInstance, transition: GpuHealthTransition,
          holders: list[_Holder], now: datetime) -> None:
    """As for a GPU (health._tell): quarantined, a critical message per allocation that held
    the instance (to its owner and broadcast), or one for the instance; suspect, a warning
    to broadcast receivers; back to healthy, nobody."""
    to = GpuHealth(transition.to_state)
    if to is GpuHealth.HEALTHY:
        return
    node = session.get(Node, gpu.node_id)
    environment = session.get(Environment, gpu.environment_id)
    what = f"MIG instance {instance.mig_uuid} ({instance.profile_name}) of {gpu.uuid} " \
           f"on {node.name}"
    base = {"environment": environment.name, "node": node.name, "gpu": gpu.uuid,
            "mig_instance": instance.mig_uuid or ""}
    key = f"health.{to.value}|{gpu.uuid}|{instance.mig_uuid}|{transition.id}"
    nobody = {"allocation": "", "project": "", "owner": ""}
    if to is GpuHealth.SUSPECT:
        notify_all(session, [Notification(
            kind="health.suspect", severity=Severity.WARNING, dedup_key=key,
            summary=f"{what} is suspect ({cause_of(transition)})",
            text=text_of(transition), labels={**base, **nobody})], now)
        return
    notifications = [Notification(
        kind="health.quarantined", severity=Severity.CRITICAL, dedup_key=f"{key}|{h.code}",
        summary=f"{h.code}: {what} quarantined ({cause_of(transition)}); "
                f"{h.on_instance} of {h.held} units lost",
        text=text_of(transition),
        labels={**base, "allocation": h.code, "project": h.project, "owner": h.owner or ""},
        owners=(h.owner,) if h.owner else ()) for h in holders]
    if not notifications:
        notifications.append(Notification(
            kind="health.quarantined", severity=Severity.CRITICAL, dedup_key=key,
            summary=f"{what} quarantined ({cause_of(transition)}); no allocation held it",
            text=text_of(transition), labels={**base, **nobody}))
    notify_all(session, notifications, now)


# --- by hand ------------------------------------------------------------------------------
def clear(session: Session, principal: Principal, uuid: str, mig_uuid: str, reason: str,
          now: datetime) -> str:
    """An operator returns a suspect or quarantined instance of GPU `uuid` to healthy (404
    for an instance the GPU does not have, 409 when it is healthy); audited. Returns the
    GPU's node."""
    principal.require(Action.MANAGE_INVENTORY)
    gpu = session.scalar(select(Gpu).where(Gpu.uuid == canonical_gpu_uuid(uuid))
                         .with_for_update())
    if gpu is None:
        raise not_found("gpu", uuid, label="GPU")
    instance = session.scalar(select(MigInstance).where(MigInstance.gpu_id == gpu.id,
                                                        MigInstance.mig_uuid == mig_uuid)
                              .with_for_update())
    if instance is None:
        raise not_found("mig_instance", mig_uuid, label=f"MIG instance of GPU {gpu.uuid}")
    previous = GpuHealth(instance.health)
    check_mig_clear(previous, gpu.uuid, mig_uuid)
    instance.health, instance.health_reason = GpuHealth.HEALTHY.value, None
    _record(session, instance, previous, GpuHealth.HEALTHY, None, principal.actor, reason, now)
    audit.record(session, at=now, actor=principal.actor, action="gpu.mig_health_cleared",
                 subject_kind="gpu", subject=gpu.uuid, reason=reason,
                 mig_instance=mig_uuid, previous=previous.value,
                 health=GpuHealth.HEALTHY.value)
    return session.get(Node, gpu.node_id).name


def views(session: Session, gpu: Gpu) -> list[MigInstanceHealthView]:
    """The GPU's instances with their own health, the rule behind it and their history."""
    instances = list(session.scalars(select(MigInstance).where(MigInstance.gpu_id == gpu.id)
                                     .order_by(MigInstance.placement_start,
                                               MigInstance.profile_id)))
    if not instances:
        return []
    history: dict[tuple[int, int, int | None], list[GpuHealthTransition]] = {}
    for t in session.scalars(_instance_rows([gpu.id])
                             .order_by(GpuHealthTransition.id.desc())):
        rows = history.setdefault(_place(t), [])
        if len(rows) < HISTORY_LIMIT:
            rows.append(t)
    gpu_in_service = gpu.health not in OUT_OF_SERVICE
    out = []
    for m in instances:
        rows = history.get(_place(m), [])
        current = rows[0] if rows and rows[0].to_state == m.health else None
        cleared = next((t.actor for t in rows
                        if t.to_state == GpuHealth.HEALTHY.value and t.rule is None), None)
        out.append(MigInstanceHealthView(
            mig_uuid=m.mig_uuid, profile=m.profile_name, placement_start=m.placement_start,
            health=GpuHealth(m.health),
            in_service=gpu_in_service and m.health != GpuHealth.QUARANTINED.value,
            health_reason=m.health_reason, rule=current.rule if current else None,
            evidence=current.evidence if current else None,
            since=current.at if current else None, cleared_by=cleared,
            history=[HealthTransitionView.model_validate(t) for t in rows]))
    return out
