"""Alerts, their history and silences on the wire (docs/operations.md, "Alert rules")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from gpufleet.domain.operations.alert_state import AlertState
from gpufleet.wire.base import StrictModel, Text, Time, View

MatcherText = Annotated[str, StringConstraints(min_length=1, max_length=500)]
DurationText = Annotated[str, StringConstraints(min_length=1, max_length=32)]


class AlertView(View):
    """One alert. `silenced_by`: the silences that mute it now; `acked_by` / `acked_until`
    (None with `acked_by` set: until it resolves)."""

    fingerprint: str
    rule: str
    severity: str
    state: AlertState
    labels: dict[str, str]
    annotations: dict[str, str]
    owners: list[str]
    active_since: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    last_seen_at: datetime | None
    last_value: float | None
    evidence: str
    flapping: bool
    silenced: bool
    silenced_by: list[int]
    acked_by: str | None
    acked_at: datetime | None
    acked_until: datetime | None
    ack_comment: str | None
    notified_state: str | None
    notified_at: datetime | None


class AlertHistoryView(View):
    """One thing that happened to an alert: pending, firing, resolved, flapping, settled,
    acknowledged, notified."""

    id: int
    fingerprint: str
    rule: str
    at: datetime
    event: str
    actor: str
    value: float | None
    detail: str


class AlertAck(StrictModel):
    """Acknowledge: no repeat notifications for `duration` (e.g. `4h`), or until the alert
    resolves when no duration is given."""

    duration: DurationText | None = None
    comment: Text | None = None


class SilenceCreate(StrictModel):
    """Mute the alerts all `matchers` match (at least one: a silence of everything is
    refused), from `starts_at` (default now) for `duration` or until `ends_at`."""

    matchers: list[MatcherText] = Field(max_length=32)
    duration: DurationText | None = None
    starts_at: Time | None = None
    ends_at: Time | None = None
    comment: Text = Field(min_length=1)


class SilenceView(View):
    id: int
    matchers: list[str]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    created_at: datetime
    comment: str
    expired_by: str | None
    state: str = Field(description="`pending` (starts later), `active` or `expired`.")
