"""Reading alerts and their history, and acknowledging them.

Who sees what (docs/operations.md, "Alert lifecycle"): operators, admins and viewers see
every alert; a member sees the alerts naming one of their projects and the fleet-wide
alerts that name no project (a node unreachable, a fault on a free GPU), which reveal
nothing of another project. An alert a caller may not see is a 404, as if absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, false, or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, AuditSubject
from gpufleet.domain.errors import Conflict, NotFound
from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.domain.operations.matchers import LabelMatcher, all_match
from gpufleet.domain.operations.notifications import Severity
from gpufleet.domain.telemetry.durations import parse_duration
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.operations.silences import matchable_labels
from gpufleet.services.paging import SortSpec, apply_page, encode_cursor
from gpufleet.store.tables import Alert, AlertHistoryEntry
from gpufleet.wire.alerts import AlertAck, AlertHistoryView, AlertView
from gpufleet.wire.base import Page

_NEWEST_FIRST = SortSpec((Alert.id,), descending=True)
_BATCH_FACTOR = 4  # rows read per wanted row while label matchers filter in Python


@dataclass(frozen=True)
class AlertFilter:
    states: Sequence[AlertState] = ()
    rules: Sequence[str] = ()
    severities: Sequence[Severity] = ()
    projects: Sequence[str] = ()
    environments: Sequence[str] = ()
    matchers: Sequence[LabelMatcher] = ()


def _project_is(name: str):
    return Alert.projects_key.contains(f",{name},", autoescape=True)


def visible(query: Select, principal: Principal) -> Select:
    own = principal.visible_projects
    if own is None:
        return query
    return query.where(or_(Alert.projects_key.is_(None), *[_project_is(p) for p in own]))


def view(alert: Alert) -> AlertView:
    return AlertView(
        fingerprint=alert.fingerprint, rule=alert.rule, severity=alert.severity,
        state=AlertState(alert.state), labels=dict(alert.labels),
        annotations=dict(alert.annotations), owners=list(alert.owners),
        active_since=alert.active_since, fired_at=alert.fired_at,
        resolved_at=alert.resolved_at, last_seen_at=alert.last_seen_at,
        last_value=alert.last_value, evidence=alert.evidence, flapping=alert.flapping,
        silenced=alert.silenced, silenced_by=list(alert.silenced_by),
        acked_by=alert.acked_by, acked_at=alert.acked_at, acked_until=alert.ack_expires_at,
        ack_comment=alert.ack_comment, notified_state=alert.notified_state,
        notified_at=alert.notified_at)


def list_alerts(session: Session, principal: Principal, f: AlertFilter, cursor: str | None,
                limit: int) -> Page[AlertView]:
    """Alerts, newest first. Label matchers are applied to each row read (labels are
    JSON), reading further batches until the page is full or the table ends."""
    principal.require(Action.READ_ALERTS)
    query = visible(select(Alert), principal)
    if f.states:
        query = query.where(Alert.state.in_([s.value for s in f.states]))
    if f.rules:
        query = query.where(Alert.rule.in_(list(f.rules)))
    if f.severities:
        query = query.where(Alert.severity.in_([s.value for s in f.severities]))
    if f.environments:
        query = query.where(Alert.environment.in_(list(f.environments)))
    if f.projects:
        query = query.where(or_(false(), *[_project_is(p) for p in f.projects]))
    items: list[Alert] = []
    after = cursor
    batch = limit + 1 if not f.matchers else (limit + 1) * _BATCH_FACTOR
    while len(items) <= limit:
        rows = list(session.scalars(apply_page(query, _NEWEST_FIRST, after, batch - 1)))
        items.extend(a for a in rows
                     if not f.matchers or all_match(f.matchers, matchable_labels(a)))
        if len(rows) < batch:
            break
        after = encode_cursor([rows[-1].id])
    next_cursor = encode_cursor([items[limit - 1].id]) if len(items) > limit else None
    return Page[AlertView](items=[view(a) for a in items[:limit]], next_cursor=next_cursor)


def find(session: Session, principal: Principal, fingerprint: str) -> Alert:
    principal.require(Action.READ_ALERTS)
    alert = session.scalars(visible(select(Alert), principal)
                            .where(Alert.fingerprint == fingerprint)).one_or_none()
    if alert is None:
        raise NotFound(f"no alert {fingerprint}", code="alert_not_found",
                       details={"fingerprint": fingerprint})
    return alert


def history(session: Session, principal: Principal, *, fingerprint: str | None,
            rule: str | None, cursor: str | None, limit: int) -> Page[AlertHistoryView]:
    """What happened to alerts, newest first."""
    principal.require(Action.READ_ALERTS)
    query = visible(select(AlertHistoryEntry).join(Alert, Alert.id == AlertHistoryEntry.alert_id),
                    principal)
    if fingerprint:
        query = query.where(Alert.fingerprint == fingerprint)
    if rule:
        query = query.where(Alert.rule == rule)
    rows = list(session.scalars(apply_page(
        query, SortSpec((AlertHistoryEntry.id,), descending=True), cursor, limit)).unique())
    next_cursor = encode_cursor([rows[limit - 1].id]) if len(rows) > limit else None
    return Page[AlertHistoryView](items=[
        AlertHistoryView(id=h.id, fingerprint=h.alert.fingerprint, rule=h.alert.rule, at=h.at,
                         event=h.event, actor=h.actor, value=h.value, detail=h.detail)
        for h in rows[:limit]], next_cursor=next_cursor)


def acknowledge(session: Session, principal: Principal, fingerprint: str, body: AlertAck,
                now: datetime) -> AlertView:
    """Acknowledge a pending or firing alert: no repeat notifications until `duration`
    passes or, without one, until it resolves. A resolved alert is a 409."""
    principal.require(Action.MANAGE_ALERTS)
    alert = find(session, principal, fingerprint)
    if alert.state == AlertState.RESOLVED.value:
        raise Conflict(f"alert {fingerprint} is resolved; there is nothing to acknowledge",
                       code="alert_resolved", details={"fingerprint": fingerprint})
    until = now + parse_duration(body.duration, name="duration") if body.duration else None
    alert.acked_by, alert.acked_at, alert.ack_expires_at = principal.actor, now, until
    alert.ack_comment, alert.updated_at = body.comment, now
    detail = f"until {until.isoformat()}" if until else "until resolved"
    session.add(AlertHistoryEntry(alert_id=alert.id, at=now, event="acknowledged",
                                  actor=principal.actor, value=None,
                                  detail=f"{detail}{': ' + body.comment if body.comment else ''}"))
    audit.record(session, at=now, actor=principal.actor, action="alert.acknowledged",
                 subject_kind=AuditSubject.ALERT, subject=fingerprint, reason=body.comment,
                 rule=alert.rule, until=until.isoformat() if until else None)
    return view(alert)
