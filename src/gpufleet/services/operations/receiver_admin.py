"""Receivers as administrators manage them, their delivery log, and each user's inbox
(docs/operations.md, "Receivers").

Every change is audited; a receiver's secrets go into the state store and never come back
out through a view (`"set"` in their place).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action
from gpufleet.domain.errors import Conflict, InvalidInput
from gpufleet.domain.operations.matchers import parse_matchers
from gpufleet.domain.operations.notifications import Severity
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.services.lookup import one_where
from gpufleet.services.paging import SortSpec, keyset_page
from gpufleet.store.tables import OutboxDelivery, OutboxMessage, Receiver
from gpufleet.wire.base import Page
from gpufleet.wire.receivers import (
    CONFIG_SCHEMAS,
    SECRET_SET,
    DeliveryView,
    NotificationView,
    ReceiverCreate,
    ReceiverKind,
    ReceiverUpdate,
    ReceiverView,
    TestQueued,
)
from gpufleet.wire.validation import field_error, summary

_BY_NAME = SortSpec((Receiver.name,))
_NEWEST_DELIVERY = SortSpec((OutboxDelivery.id,), descending=True)
_NEWEST_MESSAGE = SortSpec((OutboxMessage.id,), descending=True)
# Kinds that can reach a person directly, and kinds that have a channel of their own.
_REACHES_OWNERS = {ReceiverKind.WEBHOOK, ReceiverKind.SLACK, ReceiverKind.EMAIL,
                   ReceiverKind.INBOX}
_HAS_CHANNEL = set(ReceiverKind) - {ReceiverKind.INBOX}


def get_receiver(session: Session, name: str) -> Receiver:
    return one_where(session, Receiver, Receiver.name == name, "receiver", name)


def checked_config(kind: ReceiverKind, config: dict[str, Any]) -> dict[str, Any]:
    """`config` validated by its kind's schema, as stored (JSON types, no defaults left
    implicit); a problem is a 400 naming the field (`config.url`)."""
    schema = CONFIG_SCHEMAS[kind]
    try:
        parsed = schema.model_validate(config)
    except ValidationError as exc:
        errors = [field_error({**e, "loc": ("config", *e["loc"])}) for e in exc.errors()]
        raise InvalidInput(f"invalid {kind.value} receiver config: {summary(errors)}",
                           code="invalid_receiver_config",
                           details={"kind": kind.value, "errors": errors}) from None
    return parsed.model_dump(mode="json", by_alias=True, exclude_none=True)


def _field_problem(field: str, problem: str, kind: ReceiverKind) -> InvalidInput:
    return InvalidInput(f"{field}: {problem}", code="invalid_receiver_config",
                        details={"kind": kind.value, "errors": [
                            {"field": field, "problem": problem, "type": "value_error"}]})


def _routing(body: ReceiverCreate, config: dict[str, Any]) -> tuple[bool, bool, list[str]]:
    """broadcast, tells_owners and kinds with each kind's defaults, or a 400 naming the
    field that cannot work for this kind."""
    kind = body.kind
    broadcast = body.broadcast if body.broadcast is not None else kind in _HAS_CHANNEL
    tells_owners = (body.tells_owners if body.tells_owners is not None
                    else kind is ReceiverKind.INBOX)
    if broadcast and kind not in _HAS_CHANNEL:
        raise _field_problem("broadcast", "an inbox has no channel of its own; it only "
                             "tells owners (--no-broadcast)", kind)
    if tells_owners and kind not in _REACHES_OWNERS:
        raise _field_problem("tells_owners", f"a {kind.value} receiver cannot reach a "
                             "person directly", kind)
    if not broadcast and not tells_owners:
        raise _field_problem("broadcast", "the receiver would take nothing: neither a "
                             "broadcast copy nor owners", kind)
    if broadcast and kind is ReceiverKind.SLACK and "channel" not in config:
        raise _field_problem("config.channel", "required for the broadcast copy", kind)
    if broadcast and kind is ReceiverKind.EMAIL and not config.get("to"):
        raise _field_problem("config.to", "required for the broadcast copy", kind)
    if kind is ReceiverKind.EMAIL and config.get("ca_file") and not config.get("starttls"):
        raise _field_problem("config.ca_file", "only used with starttls (--starttls): "
                             "without it the mail goes in the clear", kind)
    return broadcast, tells_owners, _kinds(kind, body.kinds)


def _kinds(kind: ReceiverKind, kinds: list[str]) -> list[str]:
    if kind is ReceiverKind.ALERTMANAGER and not kinds:
        return ["alert.*"]  # Alertmanager is for alerts unless told otherwise
    return list(kinds)


def create_receiver(session: Session, principal: Principal, body: ReceiverCreate,
                    now: datetime) -> ReceiverView:
    principal.require(Action.MANAGE_RECEIVERS)
    parse_matchers(body.matchers)  # 400 invalid_matcher naming the one that does not parse
    config = checked_config(body.kind, body.config)
    broadcast, tells_owners, kinds = _routing(body, config)
    if session.scalar(select(Receiver.id).where(Receiver.name == body.name)) is not None:
        raise Conflict(f"receiver '{body.name}' already exists", code="receiver_exists",
                       details={"receiver": body.name})
    receiver = Receiver(name=body.name, kind=body.kind.value, config=config,
                        matchers=list(body.matchers), kinds=kinds,
                        min_severity=body.min_severity.value, broadcast=broadcast,
                        tells_owners=tells_owners, enabled=True, created_by=principal.actor,
                        created_at=now)
    session.add(receiver)
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action="receiver.created",
                 subject_kind="receiver", subject=body.name, kind=body.kind.value,
                 matchers=list(body.matchers), kinds=kinds, min_severity=body.min_severity.value,
                 broadcast=broadcast, tells_owners=tells_owners)
    return _view(receiver, 0, 0)


def update_receiver(session: Session, principal: Principal, name: str, body: ReceiverUpdate,
                    now: datetime) -> ReceiverView:
    """Enable, disable or re-route a receiver (admins); audited with what changed.

    Disabled, it is skipped by `outbox.notify` (nothing new is queued for it) and by the
    sender (what is queued is held, not sent and not given up); enabled again, the sender
    delivers what it held on its next round (docs/operations.md, "Receivers")."""
    principal.require(Action.MANAGE_RECEIVERS)
    receiver = get_receiver(session, name)
    changes: dict[str, Any] = {}
    if body.matchers is not None:
        parse_matchers(body.matchers)  # 400 invalid_matcher, as on create
        changes["matchers"] = list(body.matchers)
    if body.kinds is not None:
        changes["kinds"] = _kinds(ReceiverKind(receiver.kind), body.kinds)
    if body.min_severity is not None:
        changes["min_severity"] = body.min_severity.value
    if body.enabled is not None:
        changes["enabled"] = body.enabled
    changed = {field: value for field, value in changes.items()
               if getattr(receiver, field) != value}
    for field, value in changed.items():
        setattr(receiver, field, value)
    if changed:
        action = {True: "receiver.enabled", False: "receiver.disabled"}.get(
            changed.get("enabled"), "receiver.changed")
        audit.record(session, at=now, actor=principal.actor, action=action,
                     subject_kind="receiver", subject=name, **changed)
    return _view(receiver, *_counts(session, [receiver.id])[receiver.id])


def masked_config(receiver: Receiver) -> dict[str, Any]:
    secrets = CONFIG_SCHEMAS[ReceiverKind(receiver.kind)].SECRETS
    return {k: (SECRET_SET if k in secrets and v else v) for k, v in receiver.config.items()}


def _view(receiver: Receiver, pending: int, abandoned: int) -> ReceiverView:
    return ReceiverView(name=receiver.name, kind=ReceiverKind(receiver.kind),
                        config=masked_config(receiver), matchers=receiver.matchers,
                        kinds=receiver.kinds, min_severity=Severity(receiver.min_severity),
                        broadcast=receiver.broadcast, tells_owners=receiver.tells_owners,
                        enabled=receiver.enabled, created_by=receiver.created_by,
                        created_at=receiver.created_at, pending=pending, abandoned=abandoned)


def _counts(session: Session, ids: list[int]) -> dict[int, tuple[int, int]]:
    undelivered = (select(OutboxMessage.receiver_id, OutboxMessage.abandoned_at.is_(None),
                          func.count())
                   .where(OutboxMessage.receiver_id.in_(ids),
                          OutboxMessage.delivered_at.is_(None))
                   .group_by(OutboxMessage.receiver_id, OutboxMessage.abandoned_at.is_(None)))
    counts: dict[int, list[int]] = {i: [0, 0] for i in ids}
    for receiver_id, waiting, n in session.execute(undelivered):
        counts[receiver_id][0 if waiting else 1] += n
    return {i: (c[0], c[1]) for i, c in counts.items()}


def list_receivers(session: Session, principal: Principal, cursor: str | None,
                   limit: int) -> Page[ReceiverView]:
    principal.require(Action.READ_RECEIVERS)
    rows, next_cursor = keyset_page(session, select(Receiver), _BY_NAME, cursor, limit)
    counts = _counts(session, [r.id for (r,) in rows])
    return Page[ReceiverView](items=[_view(r, *counts[r.id]) for (r,) in rows],
                              next_cursor=next_cursor)


def show_receiver(session: Session, principal: Principal, name: str) -> ReceiverView:
    principal.require(Action.READ_RECEIVERS)
    receiver = get_receiver(session, name)
    return _view(receiver, *_counts(session, [receiver.id])[receiver.id])


def delete_receiver(session: Session, principal: Principal, name: str,
                    now: datetime) -> ReceiverView:
    """Remove a receiver with its queued messages and delivery log (nothing more will be
    sent to it); the audit log keeps that it existed."""
    principal.require(Action.MANAGE_RECEIVERS)
    receiver = get_receiver(session, name)
    view = _view(receiver, *_counts(session, [receiver.id])[receiver.id])
    session.delete(receiver)
    audit.record(session, at=now, actor=principal.actor, action="receiver.deleted",
                 subject_kind="receiver", subject=name, kind=receiver.kind,
                 dropped_pending=view.pending)
    return view


def queue_test(session: Session, principal: Principal, name: str,
               now: datetime) -> TestQueued:
    """A test notification for this receiver only, whatever its filters: its broadcast copy
    and, when it tells owners and the caller is a user, one addressed to the caller."""
    principal.require(Action.MANAGE_RECEIVERS)
    receiver = get_receiver(session, name)
    if not receiver.enabled:
        raise Conflict(f"receiver '{name}' is disabled: a test would be held, not sent; "
                       f"enable it first (`gpufleet receivers enable {name}`)",
                       code="receiver_disabled", details={"receiver": name})
    run = uuid.uuid4().hex[:12]
    payload = {"kind": "receiver.test", "severity": "info",
               "summary": f"gpufleet test notification for receiver {name}",
               "text": f"Sent by {principal.actor} with `gpufleet receivers test {name}`.",
               "labels": {"receiver": name}, "dedup_key": f"receiver.test|{run}"}
    recipients: list[str | None] = [None] if receiver.broadcast else []
    if receiver.tells_owners and principal.user_name:
        recipients.append(principal.user_name)
    if not recipients:
        raise InvalidInput(f"receiver '{name}' only tells owners and the caller is no user "
                           "to address a test to", code="no_test_recipient",
                           details={"receiver": name})
    keys = []
    for recipient in recipients:
        key = f"receiver.test|{run}|{name}|{recipient or '*'}"
        session.add(OutboxMessage(created_at=now, receiver_id=receiver.id,
                                  recipient=recipient, idempotency_key=key,
                                  kind="receiver.test", severity="info", payload=payload,
                                  attempts=0, next_attempt_at=now))
        keys.append(key)
    audit.record(session, at=now, actor=principal.actor, action="receiver.tested",
                 subject_kind="receiver", subject=name, queued=len(keys))
    return TestQueued(queued=len(keys), idempotency_keys=keys)


def list_deliveries(session: Session, principal: Principal, name: str, cursor: str | None,
                    limit: int) -> Page[DeliveryView]:
    principal.require(Action.READ_RECEIVERS)
    receiver = get_receiver(session, name)
    query = (select(OutboxDelivery, OutboxMessage)
             .join(OutboxMessage, OutboxMessage.id == OutboxDelivery.message_id)
             .where(OutboxDelivery.receiver_id == receiver.id))
    rows, next_cursor = keyset_page(session, query, _NEWEST_DELIVERY, cursor, limit)
    return Page[DeliveryView](items=[DeliveryView(
        id=d.id, at=d.at, message_id=d.message_id, attempt=d.attempt, ok=d.ok,
        outcome=d.outcome, status=d.status, detail=d.detail,
        duration_ms=d.duration_ms, recipient=m.recipient, kind=m.kind,
        idempotency_key=m.idempotency_key) for d, m in rows], next_cursor=next_cursor)


def list_inbox(session: Session, principal: Principal, cursor: str | None,
               limit: int) -> Page[NotificationView]:
    """The caller's own messages, newest first: those an inbox receiver delivered to them.
    A caller that is no user (a service token) has none."""
    principal.require(Action.READ_NOTIFICATIONS)
    if not principal.user_name:
        return Page[NotificationView](items=[], next_cursor=None)
    query = (select(OutboxMessage).join(Receiver, Receiver.id == OutboxMessage.receiver_id)
             .where(Receiver.kind == ReceiverKind.INBOX.value,
                    OutboxMessage.recipient == principal.user_name,
                    OutboxMessage.delivered_at.is_not(None)))
    rows, next_cursor = keyset_page(session, query, _NEWEST_MESSAGE, cursor, limit)
    return Page[NotificationView](items=[NotificationView(
        id=m.id, at=m.created_at, kind=m.kind, severity=Severity(m.severity),
        summary=str(m.payload.get("summary", "")), text=str(m.payload.get("text", "")),
        labels={str(k): str(v) for k, v in (m.payload.get("labels") or {}).items()},
        delivered_at=m.delivered_at) for (m,) in rows], next_cursor=next_cursor)
