"""Silences: mute the alerts that match, for a while (docs/operations.md, "Silences").

A silenced alert is still evaluated, stored and listed (marked silenced, with the silences
that mute it); it is never notified. A silence with no matcher would mute everything and
is refused. When a silence is created or expired, the alerts it touches are re-marked in
the same transaction, so the listing is right at once; the next evaluation tells what a
lifted silence had held back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, AuditSubject
from gpufleet.domain.errors import Conflict, InvalidInput, NotFound
from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.domain.operations.matchers import LabelMatcher, all_match, parse_matchers
from gpufleet.domain.telemetry.durations import check_time, parse_duration
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import Alert, Silence
from gpufleet.wire.alerts import SilenceCreate, SilenceView
from gpufleet.wire.base import Page


def silence_state(silence: Silence, now: datetime) -> str:
    if now < silence.starts_at:
        return "pending"
    return "active" if now < silence.ends_at else "expired"


def view(silence: Silence, now: datetime) -> SilenceView:
    return SilenceView(id=silence.id, matchers=list(silence.matchers),
                       starts_at=silence.starts_at, ends_at=silence.ends_at,
                       created_by=silence.created_by, created_at=silence.created_at,
                       comment=silence.comment, expired_by=silence.expired_by,
                       state=silence_state(silence, now))


def active_silences(session: Session, now: datetime
                    ) -> list[tuple[int, tuple[LabelMatcher, ...]]]:
    """The silences in force at `now`, with their parsed matchers."""
    rows = session.scalars(select(Silence).where(Silence.starts_at <= now,
                                                 Silence.ends_at > now))
    return [(s.id, parse_matchers(s.matchers)) for s in rows]


def silencing(silences: Sequence[tuple[int, tuple[LabelMatcher, ...]]],
              labels: Mapping[str, str]) -> list[int]:
    """The ids of the silences that mute an alert with these labels."""
    return [sid for sid, matchers in silences if all_match(matchers, labels)]


def alert_labels_for_matching(labels: Mapping[str, str], rule: str,
                              severity: str) -> dict[str, str]:
    """What a silence (and a listing's matcher) sees of an alert: its labels, plus
    `alertname` (the rule) and `severity`, as Alertmanager names them."""
    return {**labels, "alertname": rule, "severity": severity}


def matchable_labels(alert: Alert) -> dict[str, str]:
    return alert_labels_for_matching(alert.labels, alert.rule, alert.severity)


def remark_alerts(session: Session, now: datetime) -> None:
    """Re-mark every unresolved alert (and every resolved one people heard fire) with the
    silences in force now."""
    silences = active_silences(session, now)
    for alert in session.scalars(select(Alert).where(
            (Alert.state != AlertState.RESOLVED.value)
            | (Alert.notified_state == AlertState.FIRING.value))):
        ids = silencing(silences, matchable_labels(alert))
        if ids != list(alert.silenced_by):
            alert.silenced_by, alert.silenced = ids, bool(ids)


def create_silence(session: Session, principal: Principal, body: SilenceCreate,
                   now: datetime) -> SilenceView:
    principal.require(Action.MANAGE_ALERTS)
    if not body.matchers:
        raise InvalidInput("a silence needs at least one matcher (e.g. project=vision): one "
                           "without would mute every alert", code="silence_without_matcher",
                           details={"field": "matchers"})
    matchers = parse_matchers(body.matchers)
    starts = check_time(body.starts_at, name="starts_at") if body.starts_at else now
    if (body.duration is None) == (body.ends_at is None):
        raise InvalidInput("give the silence a duration (e.g. 2h) or an ends_at, not both",
                           code="invalid_silence_end",
                           details={"fields": ["duration", "ends_at"]})
    ends = body.ends_at if body.ends_at else \
        starts + parse_duration(body.duration or "", name="duration")
    if ends <= max(starts, now):
        raise InvalidInput("the silence would end before it starts or in the past",
                           code="invalid_silence_end",
                           details={"starts_at": starts.isoformat(),
                                    "ends_at": ends.isoformat()})
    silence = Silence(matchers=[str(m) for m in matchers], starts_at=starts, ends_at=ends,
                      created_by=principal.actor, created_at=now, comment=body.comment)
    session.add(silence)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="silence.created",
                 subject_kind=AuditSubject.SILENCE, subject=str(silence.id),
                 reason=body.comment, matchers=silence.matchers,
                 starts_at=starts.isoformat(), ends_at=ends.isoformat())
    remark_alerts(session, now)
    return view(silence, now)


def expire_silence(session: Session, principal: Principal, silence_id: int,
                   now: datetime) -> SilenceView:
    """End a silence now (its row stays, as history); an expired one is a 409."""
    principal.require(Action.MANAGE_ALERTS)
    silence = session.get(Silence, silence_id) if 0 < silence_id < 2**63 else None
    if silence is None:
        raise NotFound(f"no silence {silence_id}", code="silence_not_found",
                       details={"silence": silence_id})
    if silence.ends_at <= now:
        raise Conflict(f"silence {silence_id} has already expired", code="silence_expired",
                       details={"silence": silence_id, "ends_at": silence.ends_at.isoformat()})
    # As Alertmanager: a silence that had not started yet starts and ends now.
    silence.starts_at = min(silence.starts_at, now)
    silence.ends_at = now
    silence.expired_by = principal.actor
    audit.record(session, at=now, actor=principal.actor, action="silence.expired",
                 subject_kind=AuditSubject.SILENCE, subject=str(silence.id),
                 matchers=silence.matchers)
    remark_alerts(session, now)
    return view(silence, now)


def list_silences(session: Session, principal: Principal, now: datetime, *,
                  include_expired: bool, cursor: str | None,
                  limit: int) -> Page[SilenceView]:
    """Silences, newest first; expired ones only when asked."""
    principal.require(Action.READ_ALERTS)
    query = select(Silence)
    if not include_expired:
        query = query.where(Silence.ends_at > now)
    rows, next_cursor = keyset_page(session, query, SortSpec((Silence.id,), descending=True),
                                    cursor, limit)
    return Page[SilenceView](items=[view(s, now) for (s,) in rows], next_cursor=next_cursor)

