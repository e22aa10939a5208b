"""Reclamation policies in the state store: set, list, remove, and resolve the effective
policy of an allocation (docs/operations.md, "Reclamation"; the merging rule is
domain/operations/reclaim_policy.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, AuditSubject
from gpufleet.domain.operations.reclaim_policy import (
    IdleHeld,
    PolicyFields,
    ReclaimAction,
    ReclaimPolicy,
    Scope,
    resolve,
)
from gpufleet.services.access import audit
from gpufleet.services.access.people import get_project
from gpufleet.services.access.principal import Principal
from gpufleet.services.inventory.environments import get_environment
from gpufleet.services.lookup import not_found
from gpufleet.settings import Settings
from gpufleet.store.tables import ReclaimPolicyRow
from gpufleet.wire.reclaim import EffectivePolicyView, PolicyList, PolicySet, PolicyView

# Wire field → (column, seconds per wire unit); the wire speaks hours and minutes, the
# store seconds.
_SPANS = {"idle_window_hours": ("idle_window_s", 3600),
          "grace_minutes": ("grace_s", 60),
          "end_warning_lead_hours": ("end_warning_lead_s", 3600)}
_PLAIN = {"idle_held": "idle_held", "action": "action", "enabled": "enabled",
          "dry_run": "dry_run"}


def default_policy(settings: Settings) -> ReclaimPolicy:
    """The server's default: the `reclaim_*` settings; the idle window is the telemetry's
    own (`idle_window_hours`), so `gpufleet idle` and reclamation agree by default."""
    return ReclaimPolicy(
        idle_window=timedelta(hours=settings.idle_window_hours),
        idle_held=IdleHeld(settings.reclaim_idle_held),
        grace=timedelta(minutes=settings.reclaim_grace_minutes),
        end_warning_lead=timedelta(hours=settings.reclaim_end_warning_lead_hours),
        action=ReclaimAction(settings.reclaim_action),
        enabled=settings.reclaim_enabled, dry_run=settings.reclaim_dry_run)


def fields_of(row: ReclaimPolicyRow) -> PolicyFields:
    def span(seconds: int | None) -> timedelta | None:
        return None if seconds is None else timedelta(seconds=seconds)
    return PolicyFields(idle_window=span(row.idle_window_s),
                        idle_held=IdleHeld(row.idle_held) if row.idle_held else None,
                        grace=span(row.grace_s), end_warning_lead=span(row.end_warning_lead_s),
                        action=ReclaimAction(row.action) if row.action else None,
                        enabled=row.enabled, dry_run=row.dry_run)


class PolicyBook:
    """Every policy row, read once per round: the effective policy of any (project,
    environment) without another query."""

    def __init__(self, session: Session, default: ReclaimPolicy):
        self.default = default
        self.projects: dict[str, PolicyFields] = {}
        self.environments: dict[str, PolicyFields] = {}
        for row in session.scalars(select(ReclaimPolicyRow)):
            if row.project is not None:
                self.projects[row.project.name] = fields_of(row)
            elif row.environment is not None:
                self.environments[row.environment.name] = fields_of(row)

    def policy_for(self, project: str, environment: str | None) -> ReclaimPolicy:
        """Project over environment over the server's default, field by field."""
        return resolve(self.default,
                       (f"environment:{environment}", self.environments.get(environment or "")),
                       (f"project:{project}", self.projects.get(project)))


def _find(session: Session, scope: Scope, name: str) -> tuple[ReclaimPolicyRow | None, dict]:
    """The row of `name` (404 when the project or environment does not exist) and the
    column that keys it."""
    if scope is Scope.PROJECT:
        key = {"project_id": get_project(session, name).id}
    else:
        key = {"environment_id": get_environment(session, name).id}
    row = session.scalars(select(ReclaimPolicyRow).filter_by(**key)).one_or_none()
    return row, key


def set_policy(session: Session, principal: Principal, scope: Scope, name: str,
               body: PolicySet, now: datetime) -> ReclaimPolicyRow:
    principal.require(Action.MANAGE_RECLAIM)
    row, key = _find(session, scope, name)
    if row is None:
        row = ReclaimPolicyRow(**key, updated_at=now, updated_by=principal.actor)
        session.add(row)
    changes = body.model_dump(exclude_unset=True, exclude={"unset"})
    for field, value in changes.items():
        if field in _SPANS:
            column, unit_s = _SPANS[field]
            # Clamped so an absurd value reaches the domain's check (a 400 naming the
            # field), not an overflow; the check refuses anything near the clamp.
            seconds = None if value is None else round(max(-1e9, min(1e9, value * unit_s)))
            setattr(row, column, seconds)
        else:
            setattr(row, _PLAIN[field], None if value is None else getattr(value, "value", value))
    for field in body.unset:
        setattr(row, _SPANS[field][0] if field in _SPANS else _PLAIN[field], None)
    fields_of(row)  # a negative or over-long span is a 400 here, before anything is written
    row.updated_at, row.updated_by = now, principal.actor
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="reclaim_policy.set",
                 subject_kind=AuditSubject.RECLAIM_POLICY, subject=f"{scope}:{name}",
                 changes={k: getattr(v, "value", v) for k, v in changes.items()},
                 unset=list(body.unset))
    return row


def remove_policy(session: Session, principal: Principal, scope: Scope, name: str,
                  now: datetime) -> None:
    principal.require(Action.MANAGE_RECLAIM)
    row, _ = _find(session, scope, name)
    if row is None:
        raise not_found("reclaim_policy", f"{scope}:{name}", label="reclamation policy")
    session.delete(row)
    audit.record(session, at=now, actor=principal.actor, action="reclaim_policy.removed",
                 subject_kind=AuditSubject.RECLAIM_POLICY, subject=f"{scope}:{name}")


def policy_view(row: ReclaimPolicyRow) -> PolicyView:
    def span(seconds: int | None, unit_s: int) -> float | None:
        return None if seconds is None else seconds / unit_s
    scope, name = ((Scope.PROJECT, row.project.name) if row.project is not None
                   else (Scope.ENVIRONMENT, row.environment.name))
    return PolicyView(scope=scope, name=name, idle_window_hours=span(row.idle_window_s, 3600),
                      idle_held=row.idle_held, grace_minutes=span(row.grace_s, 60),
                      end_warning_lead_hours=span(row.end_warning_lead_s, 3600),
                      action=row.action, enabled=row.enabled, dry_run=row.dry_run,
                      updated_at=row.updated_at, updated_by=row.updated_by)


def effective_view(policy: ReclaimPolicy) -> EffectivePolicyView:
    return EffectivePolicyView(
        idle_window_hours=policy.idle_window.total_seconds() / 3600,
        idle_held=policy.idle_held, grace_minutes=policy.grace.total_seconds() / 60,
        end_warning_lead_hours=policy.end_warning_lead.total_seconds() / 3600,
        action=policy.action, enabled=policy.enabled, dry_run=policy.dry_run,
        decided_by=dict(policy.source))


def list_policies(session: Session, principal: Principal, default: ReclaimPolicy,
                  *, scope: Scope | None = None) -> PolicyList:
    principal.require(Action.READ_RECLAIM)
    rows = [policy_view(r) for r in session.scalars(select(ReclaimPolicyRow))]
    rows = [r for r in rows if scope is None or r.scope is scope]
    # Members see the environments' policies and their own projects' ones.
    rows = [r for r in rows if r.scope is Scope.ENVIRONMENT or principal.sees_project(r.name)]
    rows.sort(key=lambda r: (r.scope.value, r.name))
    return PolicyList(default=effective_view(default), items=rows)
