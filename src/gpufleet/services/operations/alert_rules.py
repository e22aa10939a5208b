"""Alert rules in the state store: declared through the API, laid over the default pack
(docs/operations.md, "Alert rules").

The rules in effect are the default pack with every stored rule laid over it by name: a
stored rule named like a default one replaces it (`enabled = false` switches it off), any
other is added. Writes are audited; a rule is validated exactly as a rule file's is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpufleet.domain.access import Action, AuditSubject
from gpufleet.domain.errors import Conflict, InvalidInput, NotFound
from gpufleet.domain.operations.rule_files import default_rules, rules_from_document
from gpufleet.domain.operations.rules import Rule, RuleProblems, rule_from_mapping
from gpufleet.services.access import audit
from gpufleet.services.access.principal import Principal
from gpufleet.store.tables import AlertRule
from gpufleet.wire.alert_rules import AlertRuleView

MAX_RULES_PER_TEST = 200
log = logging.getLogger(__name__)


def rules_in_effect(session: Session) -> list[Rule]:
    """The default pack with the stored rules laid over it by name, in that order. A stored
    rule that no longer validates (stored before a check was added) is left out and
    logged, never the end of every rule's evaluation; `rules ls` shows it as
    `stored_invalid` with its problems."""
    rules = {r.name: r for r in default_rules()}
    for row in session.scalars(select(AlertRule).order_by(AlertRule.name)):
        rule = _stored_rule(row)
        if isinstance(rule, Rule):
            rules[row.name] = rule
        else:
            log.warning("stored alert rule %s is not in effect: %s", row.name, rule)
    return list(rules.values())


def list_rules(session: Session, principal: Principal) -> list[AlertRuleView]:
    principal.require(Action.READ_ALERT_RULES)
    stored = {row.name: row for row in session.scalars(select(AlertRule))}
    views = [_stored_view(stored[rule.name]) if rule.name in stored else _view(rule, None)
             for rule in default_rules()]
    defaults = {r.name for r in default_rules()}
    views += [_stored_view(row) for name, row in sorted(stored.items()) if name not in defaults]
    return views


def get_rule(session: Session, principal: Principal, name: str) -> AlertRuleView:
    principal.require(Action.READ_ALERT_RULES)
    row = _stored(session, name)
    default = _default(name)
    if row is None and default is None:
        raise _not_found(session, name)
    return _stored_view(row) if row else _view(default, None)


def _stored_rule(row: AlertRule) -> Rule | str:
    """The stored rule, or what is wrong with it."""
    try:
        return rule_from_mapping(row.body)
    except RuleProblems as exc:
        return str(exc)


def _stored_view(row: AlertRule) -> AlertRuleView:
    rule = _stored_rule(row)
    if isinstance(rule, Rule):
        return _view(rule, row)
    body = dict(row.body)
    return AlertRuleView(name=row.name, kind=str(body.get("kind", "")),
                         severity=str(body.get("severity", "")), enabled=False, for_s=0.0,
                         summary=f"not in effect: {rule}; PUT it again or DELETE it",
                         source="stored_invalid", body=body, updated_by=row.updated_by,
                         updated_at=row.updated_at)


def put_rule(session: Session, principal: Principal, name: str, body: Mapping[str, Any],
             now: datetime) -> AlertRuleView:
    """Create or replace the stored rule `name` (a default rule's name replaces it)."""
    principal.require(Action.MANAGE_ALERT_RULES)
    if not isinstance(body, Mapping):
        raise InvalidInput("an alert rule is a JSON object", code="invalid_rule")
    if body.get("name", name) != name:
        raise InvalidInput(f"the body names rule {body.get('name')!r}, the path {name!r}",
                           code="invalid_rule", details={"field": "name"})
    rule = parse_rule(body | {"name": name})
    row = _stored(session, name)
    written = rule.as_dict()
    if row is None:
        row = AlertRule(name=name, body=written, created_by=principal.actor, created_at=now,
                        updated_by=principal.actor, updated_at=now)
        session.add(row)
        action = "alert_rule.created"
    else:
        row.body, row.updated_by, row.updated_at = written, principal.actor, now
        action = "alert_rule.updated"
    session.flush()
    audit.record(session, at=now, actor=principal.actor, action=action,
                 subject_kind=AuditSubject.ALERT_RULE, subject=name, rule=written,
                 replaces_default=_default(name) is not None)
    return _view(rule, row)


def delete_rule(session: Session, principal: Principal, name: str, now: datetime) -> None:
    """Delete a stored rule; a default rule under it comes back into effect. A default
    rule itself cannot be deleted (409): store it with `enabled = false`."""
    principal.require(Action.MANAGE_ALERT_RULES)
    row = _stored(session, name)
    if row is None:
        if _default(name) is not None:
            raise Conflict(f"{name} is a default rule: switch it off with PUT "
                           f"/api/v1/alert-rules/{name} and \"enabled\": false",
                           code="default_rule", details={"rule": name})
        raise _not_found(session, name)
    session.delete(row)
    audit.record(session, at=now, actor=principal.actor, action="alert_rule.deleted",
                 subject_kind=AuditSubject.ALERT_RULE, subject=name)


def parse_rule(body: Mapping[str, Any]) -> Rule:
    """A rule from an API body; a 400 `invalid_rule` naming every field that is wrong."""
    try:
        return rule_from_mapping(body)
    except RuleProblems as exc:
        problems = [{"field": p.field_text, "message": p.message} for p in exc.problems]
        raise InvalidInput("; ".join(f"{p['field']}: {p['message']}" for p in problems),
                           code="invalid_rule", details={"problems": problems}) from None


def parse_rules_document(body: Any, source: str = "request body") -> list[Rule]:
    """Rules from a rule file's document sent as JSON (`{"rules": [...]}`, what `gpufleet
    rules test` sends); a 400 `invalid_rule_file` listing every problem."""
    rules = rules_from_document(body, source)
    if len(rules) > MAX_RULES_PER_TEST:
        raise InvalidInput(f"at most {MAX_RULES_PER_TEST} rules per test",
                           code="too_many_rules", details={"rules": len(rules)})
    return rules


def _view(rule: Rule, row: AlertRule | None) -> AlertRuleView:
    source = "default" if row is None else \
        ("stored_over_default" if _default(rule.name) else "stored")
    return AlertRuleView(name=rule.name, kind=rule.kind.value, severity=rule.severity.value,
                         enabled=rule.enabled, for_s=rule.for_s, summary=rule.summary,
                         source=source, body=rule.as_dict(),
                         updated_by=row.updated_by if row else None,
                         updated_at=row.updated_at if row else None)


def _stored(session: Session, name: str) -> AlertRule | None:
    return session.scalars(select(AlertRule).where(AlertRule.name == name)).one_or_none()


def _default(name: str) -> Rule | None:
    return next((r for r in default_rules() if r.name == name), None)


def _not_found(session: Session, name: str) -> NotFound:
    known = sorted({r.name for r in default_rules()} |
                   set(session.scalars(select(AlertRule.name))))
    return NotFound(f"no alert rule {name!r}; the rules are: {', '.join(known)}",
                    code="alert_rule_not_found", details={"rule": name})
