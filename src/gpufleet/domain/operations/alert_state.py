"""The alert state machine: what one evaluation does to one alert, and whether to tell.

Per fingerprint (docs/operations.md, "Alert lifecycle"):

    (none) ──observed──▶ pending ──held ≥ for──▶ firing ──not observed──▶ resolved
                            │                                              │
                            └──not observed──▶ resolved (never fired)      │
    resolved ──observed again──▶ pending (a new episode, same fingerprint) ◀┘

A rule that was *not evaluated* this round (its data unavailable) leaves its alerts as they
are: an unknown is never a recovery. Notifications are level-based: an alert is told when
the state people last heard of (`notified_state`) differs from the one they should hear of
now, or when a firing alert's repeat interval passed — unless it is silenced, flapping or
(for repeats) acknowledged. So a silence that expires, or a flapping alert that settles,
tells its current state once, and a resolved alert people never heard fire stays quiet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from gpufleet.domain.operations.notifications import Severity


class AlertState(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class AlertRule(Protocol):
    """What the state machine needs of a rule (the rule language's `Rule` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def for_s(self) -> float: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def group_by(self) -> tuple[str, ...]: ...
    @property
    def summary(self) -> str: ...
    @property
    def description(self) -> str: ...


@dataclass(frozen=True)
class FlapPolicy:
    """Nagios-style flap detection, counted in a sliding window instead of Nagios's last
    21 checks: an alert whose firing state changed more than `max_changes` times within
    `window_s` is flapping and tells nobody; it settles when the changes within the
    window fall to `max_changes // 2` or fewer (the hysteresis Nagios's low threshold
    gives), and then tells its current state once."""

    window_s: float
    max_changes: int

    def is_flapping(self, changes: tuple[datetime, ...], was_flapping: bool) -> bool:
        count = len(changes)
        return count > self.max_changes // 2 if was_flapping else count > self.max_changes


@dataclass(frozen=True)
class AlertStatus:
    """One alert as the state machine sees it (the store's row, without the store).

    `state_changes`: when it entered or left `firing`, within the flap window.
    `ack_expires_at`: None with `acked_by` set means acknowledged until resolved.
    `notified_state`: `firing` or `resolved` as people last heard it; None: never told.
    """

    fingerprint: str
    rule: str
    state: AlertState
    active_since: datetime
    fired_at: datetime | None = None
    resolved_at: datetime | None = None
    last_seen_at: datetime | None = None
    state_changes: tuple[datetime, ...] = ()
    flapping: bool = False
    acked_by: str | None = None
    acked_at: datetime | None = None
    ack_expires_at: datetime | None = None
    notified_state: AlertState | None = None
    notified_at: datetime | None = None

    def acked(self, now: datetime) -> bool:
        return self.acked_by is not None and (self.ack_expires_at is None
                                              or now < self.ack_expires_at)


@dataclass(frozen=True)
class Step:
    """An alert after one evaluation, and the state changes on the way (for history)."""

    status: AlertStatus
    changes: tuple[str, ...] = ()


def observed(current: AlertStatus | None, fingerprint: str, rule: AlertRule, now: datetime,
             flap: FlapPolicy) -> Step:
    """The rule's condition holds for this alert's series at `now`."""
    if current is None or current.state is AlertState.RESOLVED:
        base = AlertStatus(fingerprint, rule.name, AlertState.PENDING, active_since=now,
                           last_seen_at=now,
                           state_changes=current.state_changes if current else (),
                           flapping=current.flapping if current else False,
                           notified_state=current.notified_state if current else None,
                           notified_at=current.notified_at if current else None)
        changes: tuple[str, ...] = (AlertState.PENDING.value,)
        current = base
    else:
        current = replace(current, last_seen_at=now)
        changes = ()
    if current.state is AlertState.PENDING and \
            (now - current.active_since).total_seconds() >= rule.for_s:
        current = replace(current, state=AlertState.FIRING, fired_at=now,
                          state_changes=(*current.state_changes, now))
        changes = (*changes, AlertState.FIRING.value)
    return _with_flapping(Step(current, changes), now, flap)


def not_observed(current: AlertStatus, now: datetime, flap: FlapPolicy) -> Step:
    """The rule was evaluated and its condition no longer holds for this alert's series.
    Resolving ends the episode's acknowledgement (acknowledged "until resolved")."""
    if current.state is AlertState.RESOLVED:
        return _with_flapping(Step(current), now, flap)
    was_firing = current.state is AlertState.FIRING
    resolved = replace(current, state=AlertState.RESOLVED, resolved_at=now, acked_by=None,
                       acked_at=None, ack_expires_at=None,
                       state_changes=(*current.state_changes, now) if was_firing
                       else current.state_changes)
    return _with_flapping(Step(resolved, (AlertState.RESOLVED.value,)), now, flap)


def _with_flapping(step: Step, now: datetime, flap: FlapPolicy) -> Step:
    status = step.status
    cutoff = now - timedelta(seconds=flap.window_s)
    recent = tuple(t for t in status.state_changes if t > cutoff)
    flapping = flap.is_flapping(recent, status.flapping)
    changes = step.changes
    if flapping != status.flapping:
        changes = (*changes, "flapping" if flapping else "settled")
    return Step(replace(status, state_changes=recent, flapping=flapping), changes)


class Tell(StrEnum):
    """What to tell about an alert this round."""

    FIRING = "firing"    # it fires and people have not heard so
    REPEAT = "repeat"    # it still fires, unacknowledged, and the repeat interval passed
    RESOLVED = "resolved"  # people heard it fire; it is over


def to_tell(status: AlertStatus, now: datetime, *, silenced: bool,
            repeat_interval_s: float) -> Tell | None:
    """Whether this alert is part of a notification now (see the module docstring)."""
    if silenced or status.flapping:
        return None
    if status.state is AlertState.FIRING:
        if status.notified_state is not AlertState.FIRING:
            return Tell.FIRING
        due = status.notified_at is None or \
            (now - status.notified_at).total_seconds() >= repeat_interval_s
        return Tell.REPEAT if due and not status.acked(now) else None
    if status.state is AlertState.RESOLVED and status.notified_state is AlertState.FIRING:
        return Tell.RESOLVED
    return None


def told(status: AlertStatus, tell: Tell, now: datetime) -> AlertStatus:
    state = AlertState.RESOLVED if tell is Tell.RESOLVED else AlertState.FIRING
    return replace(status, notified_state=state, notified_at=now)


def group_key(rule: AlertRule, fingerprint: str, labels: Mapping[str, str]) -> str:
    """Which notification group an alert belongs to: the rule and the values of its
    `group_by` labels; a rule with no `group_by` makes every alert its own group (as
    Alertmanager's `group_by: ['...']`), so each names its own project and owner."""
    if not rule.group_by:
        return f"{rule.name}|{fingerprint}"
    values = ",".join(f"{name}={labels.get(name, '')}" for name in rule.group_by)
    return f"{rule.name}|{values}"


def common_labels(all_labels: list[Mapping[str, str]]) -> dict[str, str]:
    """The labels every alert of a group shares with the same value: what a group's
    notification carries, so receivers route on what is true of all of it."""
    if not all_labels:
        return {}
    first, *rest = all_labels
    return {k: v for k, v in first.items() if all(other.get(k) == v for other in rest)}
