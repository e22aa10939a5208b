"""Alert rules on the wire: a rule as stored and in effect, and what testing rules saw
(docs/operations.md, "Alert rules")."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpufleet.wire.base import View


class AlertRuleView(View):
    name: str
    kind: str
    severity: str
    enabled: bool
    for_s: float
    summary: str
    # default: shipped with gpufleet; stored: declared through the API; stored_over_default:
    # declared through the API under a default rule's name, replacing it; stored_invalid:
    # stored before a check it fails was added: not in effect (`summary` says why).
    source: str
    body: dict[str, Any]
    updated_by: str | None = None
    updated_at: datetime | None = None


class ObservationView(View):
    rule: str
    fingerprint: str
    labels: dict[str, str]
    annotations: dict[str, str]
    value: float | None = None
    evidence: str
    at: datetime


class RuleTestReply(View):
    """What the rules would observe now: `evaluated` rules are complete; `unavailable`
    rules' sources could not answer (rule → why)."""

    at: datetime
    evaluated: list[str]
    unavailable: dict[str, str]
    observations: list[ObservationView]
