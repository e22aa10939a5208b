"""Apply one evaluation of the alert rules to the stored alerts, in one transaction.

`apply_evaluation` is the one entry point from the rule evaluator: it moves each alert
through the state machine (`domain/operations/alert_state.py`), labels it from the
inventory and the binding intervals (`alert_labels`), marks it silenced or not, writes
its history, and queues the notifications it owes through the outbox — all in the
caller's write transaction, so an alert's state and what people were told commit together
(docs/operations.md, "Alert lifecycle", "Routing").

It also serves rounds with nothing evaluated (`AlertEvaluation()`): repeats fall due,
acknowledgements and silences expire, and those need telling too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.operations import alert_state as sm
from gpufleet.domain.operations.alert_state import AlertRule, AlertState, AlertStatus
from gpufleet.domain.operations.observations import Observation
from gpufleet.services.operations import alert_labels, alert_notifications, silences
from gpufleet.services.operations.outbox import notify_all
from gpufleet.store.tables import Alert, AlertHistoryEntry

SYSTEM_ACTOR = "system:alerts"


@dataclass(frozen=True)
class AlertEvaluation:
    """What one round of rule evaluation saw.

    `rules`: the rules evaluated or known (their `for`, severity, group_by);
    `evaluated`: the names of the rules whose data was available this round — an alert of
    a rule not in it keeps its state; `observations`: the series whose condition holds."""

    rules: Sequence[AlertRule] = ()
    evaluated: frozenset[str] = frozenset()
    observations: Sequence[Observation] = ()


@dataclass(frozen=True)
class AlertPolicy:
    flap: sm.FlapPolicy
    repeat_interval_s: float


@dataclass
class EvaluationOutcome:
    """What a round did: state changes by kind, and notifications queued."""

    changes: dict[str, int] = field(default_factory=dict)
    notifications: int = 0


def _status(alert: Alert) -> AlertStatus:
    return AlertStatus(
        fingerprint=alert.fingerprint, rule=alert.rule, state=AlertState(alert.state),
        active_since=alert.active_since, fired_at=alert.fired_at,
        resolved_at=alert.resolved_at, last_seen_at=alert.last_seen_at,
        state_changes=tuple(datetime.fromisoformat(t) for t in alert.state_changes),
        flapping=alert.flapping, acked_by=alert.acked_by, acked_at=alert.acked_at,
        ack_expires_at=alert.ack_expires_at,
        notified_state=AlertState(alert.notified_state) if alert.notified_state else None,
        notified_at=alert.notified_at)


def _store_status(alert: Alert, status: AlertStatus, now: datetime) -> None:
    alert.state = status.state.value
    alert.active_since, alert.fired_at = status.active_since, status.fired_at
    alert.resolved_at, alert.last_seen_at = status.resolved_at, status.last_seen_at
    alert.state_changes = [t.isoformat() for t in status.state_changes]
    alert.flapping = status.flapping
    alert.acked_by, alert.acked_at = status.acked_by, status.acked_at
    alert.ack_expires_at = status.ack_expires_at
    if status.acked_by is None:
        alert.ack_comment = None
    alert.notified_state = status.notified_state.value if status.notified_state else None
    alert.notified_at = status.notified_at
    alert.updated_at = now


def _load(session: Session, fingerprints: list[str]) -> dict[str, Alert]:
    """Every alert that is live or owes people a resolution, and those observed now."""
    found = {a.fingerprint: a for a in session.scalars(select(Alert).where(
        (Alert.state != AlertState.RESOLVED.value)
        | (Alert.notified_state == AlertState.FIRING.value)))}
    missing = [f for f in fingerprints if f not in found]
    for lo in range(0, len(missing), 500):
        found.update((a.fingerprint, a) for a in session.scalars(
            select(Alert).where(Alert.fingerprint.in_(missing[lo:lo + 500]))))
    return found


def _describe(alert: Alert, rule: AlertRule, o: Observation,
              enriched: alert_labels.Enriched) -> None:
    alert.rule, alert.severity = rule.name, str(rule.severity)
    alert.labels = {**dict(rule.labels), **enriched.labels}
    annotations = {"summary": rule.summary, "description": rule.description}
    alert.annotations = {k: v for k, v in {**annotations, **o.annotations}.items() if v}
    group = sm.group_key(rule, alert.fingerprint, alert.labels)
    alert.group_key = group if len(group) <= 255 else \
        f"{group[:190]}#{hashlib.sha256(group.encode()).hexdigest()}"
    alert.environment = alert.labels.get("environment")
    alert.projects_key = f",{','.join(enriched.projects)}," if enriched.projects else None
    alert.owners = list(enriched.owners)
    alert.last_value, alert.evidence = o.value, o.evidence


def apply_evaluation(session: Session, evaluation: AlertEvaluation, now: datetime,
                     policy: AlertPolicy) -> EvaluationOutcome:
    """Move every alert by what `evaluation` saw at `now`; queue what people must hear."""
    rules = {r.name: r for r in evaluation.rules}
    seen: dict[str, Observation] = {}
    for o in evaluation.observations:
        if o.rule in rules:  # an observation of a rule nobody defined is dropped
            seen[o.fingerprint] = o
    evaluated = set(evaluation.evaluated) | {o.rule for o in seen.values()}
    alerts = _load(session, list(seen))
    places = alert_labels.read_places(
        session, {gpu for o in seen.values()
                  if (gpu := alert_labels.unit_of(o.labels)[0]) is not None})
    outcome = EvaluationOutcome()
    history: list[tuple[Alert, str, float | None, str]] = []
    for fp, o in seen.items():
        rule = rules[o.rule]
        alert = alerts.get(fp)
        if alert is None:
            alert = Alert(fingerprint=fp, state_changes=[], silenced_by=[], silenced=False,
                          flapping=False, updated_at=now)
            session.add(alert)
            alerts[fp] = alert
        step = sm.observed(_status(alert) if alert.state else None, fp, rule, now,
                           policy.flap)
        _describe(alert, rule, o, alert_labels.enrich(o.labels, places))
        _store_status(alert, step.status, now)
        history.extend((alert, change, o.value, o.evidence) for change in step.changes)
    for fp, alert in alerts.items():
        if fp in seen or alert.rule not in evaluated:
            continue  # observed above, or its rule's data was unavailable: unchanged
        step = sm.not_observed(_status(alert), now, policy.flap)
        if step.changes:
            _store_status(alert, step.status, now)
            history.extend((alert, change, None, "") for change in step.changes)
    _mark_silenced(session, alerts.values(), now)
    owed = _owed(alerts.values(), now, policy)
    notes = alert_notifications.build(owed, now)
    outcome.notifications = len(notify_all(session, notes, now)) if notes else 0
    for o in owed:
        _store_status(o.alert, sm.told(_status(o.alert), o.tell, now), now)
        history.append((o.alert, f"notified.{o.tell.value}", None, ""))
    session.flush()  # new alerts need their ids for the history rows
    for alert, change, value, detail in history:
        outcome.changes[change] = outcome.changes.get(change, 0) + 1
        session.add(AlertHistoryEntry(alert_id=alert.id, at=now, event=change,
                                      actor=SYSTEM_ACTOR, value=value, detail=detail))
    return outcome


def _mark_silenced(session: Session, alerts, now: datetime) -> None:
    active = silences.active_silences(session, now)
    for alert in alerts:
        ids = silences.silencing(active, silences.matchable_labels(alert))
        if ids != list(alert.silenced_by or []):
            alert.silenced_by, alert.silenced = ids, bool(ids)


def _owed(alerts, now: datetime, policy: AlertPolicy) -> list[alert_notifications.Owed]:
    owed = []
    for alert in alerts:
        tell = sm.to_tell(_status(alert), now, silenced=alert.silenced,
                          repeat_interval_s=policy.repeat_interval_s)
        if tell is not None:
            owed.append(alert_notifications.Owed(alert, tell))
    return owed
