"""The append-only audit log: every state change says who, when, what and why."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import AuditSubject
from gpufleet.store.tables import AuditEvent


def record(session: Session, *, at: datetime, actor: str, action: str, subject_kind: str,
           subject: str, reason: str | None = None, **details: Any) -> AuditEvent:
    """Add an event to the caller's transaction: it commits or rolls back with the change.
    `subject_kind` is one of AuditSubject (a new kind is added there, so the audit
    filter offers it)."""
    event = AuditEvent(at=at, actor=actor, action=action,
                       subject_kind=AuditSubject(subject_kind).value,
                       subject=subject, reason=reason, details=details)
    session.add(event)
    return event


def list_events(session: Session, *, subject_kind: str | None = None, subject: str | None = None,
                action: str | None = None, before_id: int | None = None,
                limit: int = 100) -> list[AuditEvent]:
    """Newest first; `before_id` pages backwards through history."""
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if subject_kind:
        query = query.where(AuditEvent.subject_kind == subject_kind)
    if subject:
        query = query.where(AuditEvent.subject == subject)
    if action:
        query = query.where(AuditEvent.action == action)
    if before_id is not None:
        query = query.where(AuditEvent.id < before_id)
    return list(session.scalars(query))
