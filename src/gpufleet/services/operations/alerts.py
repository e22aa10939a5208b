"""Apply one evaluation of the alert rules to the stored alerts, in one transaction.

`apply_evaluation` is the one entry point from the rule evaluator: it moves each alert
through the state machine (`domain/operations/alert_state.py`), labels it from the
inventory and the binding intervals (`alert_labels`), marks it silenced or not, writes
its history, and queues the notifications it owes through the outbox — all in the
caller's write transaction, so an alert's state and what people were told commit together
(docs/operations.md, "Alert lifecycle", "Routing").

It also serves rounds with nothing evaluated (`AlertEvaluation()`): repeats fall due,
acknowledgements and silences expire, and those need telling too.

Alerts are read as plain rows and written back with bulk statements (new ones in one
multi-row INSERT, changed columns in one executemany UPDATE by id, history in one INSERT):
a fault that hits thousands of GPUs at once is thousands of alerts in one round, and one
ORM object per alert cost most of such a round (bench/bench_alert_state.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete, insert, select, update
from sqlalchemy.orm import Session

from gpufleet.domain.operations import alert_state as sm
from gpufleet.domain.operations.alert_state import AlertRule, AlertState, AlertStatus
from gpufleet.domain.operations.observations import Observation
from gpufleet.services.operations import alert_labels, alert_notifications, silences
from gpufleet.services.operations.outbox import notify_all
from gpufleet.store.tables import Alert, AlertHistoryEntry

Row = dict  # one alert as its column values (`alerts` table), read and written in bulk
_COLUMNS = [c.key for c in Alert.__table__.columns]

SYSTEM_ACTOR = "system:alerts"


@dataclass(frozen=True)
class AlertEvaluation:
    """What one round of rule evaluation saw.

    `rules`: the rules evaluated or known (their `for`, severity, group_by);
    `evaluated`: the names of the rules whose data was available this round — an alert of
    a rule not in it keeps its state; `observations`: the series whose condition holds.
    `rules_complete`: `rules` is the whole rule set, so the alerts of a rule no longer in
    it (deleted, renamed) resolve instead of firing for ever."""

    rules: Sequence[AlertRule] = ()
    evaluated: frozenset[str] = frozenset()
    observations: Sequence[Observation] = ()
    rules_complete: bool = False


@dataclass(frozen=True)
class AlertPolicy:
    flap: sm.FlapPolicy
    repeat_interval_s: float


@dataclass
class EvaluationOutcome:
    """What a round did: state changes by kind, and notifications queued."""

    changes: dict[str, int] = field(default_factory=dict)
    notifications: int = 0


def _status(a: Row) -> AlertStatus:
    return AlertStatus(
        fingerprint=a["fingerprint"], rule=a["rule"], state=AlertState(a["state"]),
        active_since=a["active_since"], fired_at=a["fired_at"],
        resolved_at=a["resolved_at"], last_seen_at=a["last_seen_at"],
        state_changes=tuple(datetime.fromisoformat(t) for t in a["state_changes"]),
        flapping=a["flapping"], acked_by=a["acked_by"], acked_at=a["acked_at"],
        ack_expires_at=a["ack_expires_at"],
        notified_state=AlertState(a["notified_state"]) if a["notified_state"] else None,
        notified_at=a["notified_at"])


def _store_status(a: Row, status: AlertStatus, now: datetime) -> None:
    a.update(state=status.state.value, active_since=status.active_since,
             fired_at=status.fired_at, resolved_at=status.resolved_at,
             last_seen_at=status.last_seen_at,
             state_changes=[t.isoformat() for t in status.state_changes],
             flapping=status.flapping, acked_by=status.acked_by, acked_at=status.acked_at,
             ack_expires_at=status.ack_expires_at,
             notified_state=status.notified_state.value if status.notified_state else None,
             notified_at=status.notified_at, updated_at=now)
    if status.acked_by is None:
        a["ack_comment"] = None


def _load(session: Session, fingerprints: list[str]) -> dict[str, Row]:
    """Every alert that is live or owes people a resolution, and those observed now."""
    table = Alert.__table__
    live = select(table).where((table.c.state != AlertState.RESOLVED.value)
                               | (table.c.notified_state == AlertState.FIRING.value))
    found = {r["fingerprint"]: dict(r) for r in session.execute(live).mappings()}
    missing = [f for f in fingerprints if f not in found]
    for lo in range(0, len(missing), 500):
        found.update((r["fingerprint"], dict(r)) for r in session.execute(
            select(table).where(table.c.fingerprint.in_(missing[lo:lo + 500]))).mappings())
    return found


def _new_row(fingerprint: str) -> Row:
    row: Row = dict.fromkeys(_COLUMNS)
    row.update(fingerprint=fingerprint, state_changes=[], silenced_by=[], silenced=False,
               flapping=False, evidence="", labels={}, annotations={}, owners=[])
    return row


def _describe(a: Row, rule: AlertRule, o: Observation,
              enriched: alert_labels.Enriched) -> None:
    labels = {**dict(rule.labels), **enriched.labels}
    annotations = {"summary": rule.summary, "description": rule.description,
                   **o.annotations}
    group = sm.group_key(rule, a["fingerprint"], labels)
    a.update(rule=rule.name, severity=str(rule.severity), labels=labels,
             annotations={k: v for k, v in annotations.items() if v},
             group_key=group if len(group) <= 255 else
             f"{group[:190]}#{hashlib.sha256(group.encode()).hexdigest()}",
             environment=labels.get("environment"),
             projects_key=f",{','.join(enriched.projects)}," if enriched.projects else None,
             owners=list(enriched.owners), last_value=o.value, evidence=o.evidence)


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
    before = {fp: dict(a) for fp, a in alerts.items()}
    places = alert_labels.read_places(
        session, {gpu for o in seen.values()
                  if (gpu := alert_labels.unit_of(o.labels)[0]) is not None})
    outcome = EvaluationOutcome()
    history: list[tuple[str, str, float | None, str]] = []
    for fp, o in seen.items():
        rule = rules[o.rule]
        alert = alerts.setdefault(fp, _new_row(fp))
        step = sm.observed(_status(alert) if alert["state"] else None, fp, rule, now,
                           policy.flap)
        _describe(alert, rule, o, alert_labels.enrich(o.labels, places))
        _store_status(alert, step.status, now)
        history.extend((fp, change, o.value, o.evidence) for change in step.changes)
    for fp, alert in alerts.items():
        removed = evaluation.rules_complete and alert["rule"] not in rules
        if fp in seen or (alert["rule"] not in evaluated and not removed):
            continue  # observed above, or its rule's data was unavailable: unchanged
        step = sm.not_observed(_status(alert), now, policy.flap)
        if step.changes:
            _store_status(alert, step.status, now)
            detail = "its rule no longer exists" if removed else ""
            history.extend((fp, change, None, detail) for change in step.changes)
    _mark_silenced(session, alerts.values(), now)
    owed = _owed(alerts.values(), now, policy)
    notes = alert_notifications.build(owed, now)
    outcome.notifications = len(notify_all(session, notes, now)) if notes else 0
    for o in owed:
        _store_status(o.alert, sm.told(_status(o.alert), o.tell, now), now)
        history.append((o.alert["fingerprint"], f"notified.{o.tell.value}", None, ""))
    ids = _write(session, alerts, before)
    if history:
        session.execute(insert(AlertHistoryEntry), [
            {"alert_id": ids[fp], "at": now, "event": change, "actor": SYSTEM_ACTOR,
             "value": value, "detail": detail} for fp, change, value, detail in history])
    for _, change, _, _ in history:
        outcome.changes[change] = outcome.changes.get(change, 0) + 1
    return outcome


def _write(session: Session, alerts: dict[str, Row], before: dict[str, Row]
           ) -> dict[str, int]:
    """Insert the new alerts, update the changed columns of the others; every alert's id
    by fingerprint."""
    ids = {fp: a["id"] for fp, a in alerts.items() if a["id"] is not None}
    new = [{k: v for k, v in a.items() if k != "id"} for fp, a in alerts.items()
           if fp not in before]
    if new:
        inserted = session.execute(insert(Alert).returning(Alert.id, Alert.fingerprint,
                                                           sort_by_parameter_order=True), new)
        ids.update((fp, alert_id) for alert_id, fp in inserted)
    changes = []
    for fp, old in before.items():
        changed = {k: v for k, v in alerts[fp].items() if old[k] != v}
        if changed:
            changes.append({"id": old["id"], **changed})
    by_columns: dict[tuple[str, ...], list[dict]] = {}
    for change in changes:  # one executemany per set of columns changed
        by_columns.setdefault(tuple(sorted(change)), []).append(change)
    for rows in by_columns.values():
        session.execute(update(Alert), rows)
    return ids


def _mark_silenced(session: Session, alerts, now: datetime) -> None:
    active = silences.active_silences(session, now)
    for a in alerts:
        ids = silences.silencing(active, silences.alert_labels_for_matching(
            a["labels"], a["rule"], a["severity"])) if active else []
        if ids != list(a["silenced_by"] or []):
            a["silenced_by"], a["silenced"] = ids, bool(ids)


def _owed(alerts, now: datetime, policy: AlertPolicy) -> list[alert_notifications.Owed]:
    owed = []
    for a in alerts:
        tell = sm.to_tell(_status(a), now, silenced=a["silenced"],
                          repeat_interval_s=policy.repeat_interval_s)
        if tell is not None:
            owed.append(alert_notifications.Owed(a, tell))
    return owed


def forget_resolved(session: Session, before: datetime) -> int:
    """Delete the alerts resolved before `before` that owe nobody anything, with their
    history (its rows cascade); returns how many. A later episode of the same condition
    starts a new alert under the same fingerprint."""
    doomed = select(Alert.id).where(Alert.state == AlertState.RESOLVED.value,
                                    Alert.resolved_at < before,
                                    (Alert.notified_state.is_(None))
                                    | (Alert.notified_state != AlertState.FIRING.value))
    ids = list(session.scalars(doomed))
    for lo in range(0, len(ids), 500):
        chunk = ids[lo:lo + 500]
        session.execute(delete(AlertHistoryEntry).where(AlertHistoryEntry.alert_id.in_(chunk)))
        session.execute(delete(Alert).where(Alert.id.in_(chunk)))
    return len(ids)
