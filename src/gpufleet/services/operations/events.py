"""Read the event log: the audit log, as events, after a cursor (docs/operations.md,
"Events").

Who sees what: operators and admins every event; everyone else who may read events only
the events about a project they see (a member: their own projects; a viewer: every
project) — an event about no project (a token issued, a node registered) is the
operators' alone. The rule is one SQL condition on the stamped `project`, applied before
any other filter, so no filter combination can widen it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Role
from gpufleet.domain.operations.event_filters import check_type_glob, glob_to_like
from gpufleet.services.access.principal import Principal
from gpufleet.store.tables import AuditEvent
from gpufleet.wire.events import Event, EventSubject

_SEES_EVERY_EVENT = frozenset({Role.ADMIN, Role.OPERATOR})


@dataclass(frozen=True)
class EventFilter:
    """`types`: globs, any may match; the rest must all hold."""

    types: tuple[str, ...] = ()
    subject_kind: str | None = None
    subject: str | None = None
    project: str | None = None

    def __post_init__(self) -> None:
        for glob in self.types:
            check_type_glob(glob)


def to_event(row: AuditEvent) -> Event:
    """An audit event as an event of schema 1. An event written before events were
    stamped has no labels."""
    return Event(id=row.seq, type=row.action, at=row.at, actor=row.actor,
                 subject=EventSubject(kind=row.subject_kind, id=row.subject),
                 reason=row.reason, labels=dict(row.labels or {}),
                 data=dict(row.details or {}))


def list_events(session: Session, principal: Principal, wanted: EventFilter, after: int,
                limit: int) -> list[AuditEvent]:
    """Up to `limit` events that `principal` may see, at log positions after `after`,
    oldest first."""
    query = select(AuditEvent).where(AuditEvent.seq > after).order_by(AuditEvent.seq)
    if principal.role not in _SEES_EVERY_EVENT:
        visible = principal.visible_projects
        query = query.where(AuditEvent.project.is_not(None) if visible is None
                            else AuditEvent.project.in_(sorted(visible)))
    if wanted.types:
        query = query.where(or_(*(AuditEvent.action.like(glob_to_like(g), escape="\\")
                                  for g in wanted.types)))
    if wanted.subject_kind:
        query = query.where(AuditEvent.subject_kind == wanted.subject_kind)
    if wanted.subject:
        query = query.where(AuditEvent.subject == wanted.subject)
    if wanted.project:
        query = query.where(AuditEvent.project == wanted.project)
    return list(session.scalars(query.limit(limit)))


def latest_event_id(session: Session) -> int:
    """The newest event's id (0 for none): where a reader that wants only what happens
    from now on starts."""
    return session.scalar(select(AuditEvent.seq).order_by(AuditEvent.seq.desc()).limit(1)) or 0
