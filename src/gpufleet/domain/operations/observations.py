"""What one evaluation of an alert rule saw: the series whose condition holds *now*.

The rule evaluator (rule kinds: threshold, increase, absence, state, efficiency) produces
observations; the alert state machine turns them into alerts: pending while the condition
has held for less than the rule's `for`, firing once it has held that long, resolved when
an evaluation no longer observes it (docs/operations.md, "Alert rules").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


def fingerprint(rule: str, labels: Mapping[str, str]) -> str:
    """The identity of one alert: its rule and its identifying labels, hashed. The same
    condition on the same unit is always the same alert (de-duplication by fingerprint)."""
    body = json.dumps([rule, sorted(labels.items())], separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Observation:
    """The condition of rule `rule` holds for the series `labels` at `at`.

    `labels`: identifying labels (environment, node, gpu, mig_instance; project for a
    project rule); allocation, project and owner are added from the binding intervals
    before an alert is stored, and are not part of the fingerprint (an allocation ending
    does not make the fault a new alert). `value`: the value compared (None for state and
    absence rules); `evidence`: one line a person reads ("gpu.temperature_c 91 ≥ 87").
    """

    rule: str
    labels: Mapping[str, str]
    at: datetime
    value: float | None = None
    evidence: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.rule, self.labels)
