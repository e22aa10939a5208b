"""The alert state machine, pure: every transition, flapping, ack, repeats, grouping, and
the property "a rule fires iff its condition held for its duration"."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.operations import alert_state as sm
from gpufleet.domain.operations.alert_state import AlertState, AlertStatus, Tell
from gpufleet.domain.operations.notifications import Severity

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
NO_FLAP = sm.FlapPolicy(window_s=3600, max_changes=1000)


@dataclass(frozen=True)
class Rule:
    name: str = "gpu-hot"
    severity: Severity = Severity.WARNING
    for_s: float = 300
    labels: dict[str, str] = field(default_factory=dict)
    group_by: tuple[str, ...] = ()
    summary: str = "GPU hot"
    description: str = ""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def see(status, seconds, rule=Rule(), flap=NO_FLAP):
    return sm.observed(status, "fp", rule, at(seconds), flap)


def test_first_observation_is_pending_then_firing_once_held_for_the_duration():
    step = see(None, 0)
    assert step.status.state is AlertState.PENDING and step.changes == ("pending",)
    step = see(step.status, 299)
    assert step.status.state is AlertState.PENDING and step.changes == ()
    step = see(step.status, 300)
    assert step.status.state is AlertState.FIRING and step.changes == ("firing",)
    assert step.status.fired_at == at(300) and step.status.active_since == at(0)


def test_a_rule_without_for_fires_at_its_first_observation():
    step = see(None, 0, Rule(for_s=0))
    assert step.status.state is AlertState.FIRING and step.changes == ("pending", "firing")


@pytest.mark.parametrize("start", [AlertState.PENDING, AlertState.FIRING],
                         ids=lambda s: f"{s.value} => resolved")
def test_not_observed_resolves(start):
    status = AlertStatus("fp", "gpu-hot", start, active_since=at(0), acked_by="user:olga",
                         acked_at=at(1))
    step = sm.not_observed(status, at(60), NO_FLAP)
    assert step.status.state is AlertState.RESOLVED and step.changes == ("resolved",)
    assert step.status.resolved_at == at(60)
    assert step.status.acked_by is None  # acknowledged until resolved


def test_resolved_observed_again_starts_a_new_episode_without_its_ack():
    resolved = AlertStatus("fp", "gpu-hot", AlertState.RESOLVED, active_since=at(0),
                           resolved_at=at(600), notified_state=AlertState.RESOLVED)
    step = see(resolved, 900)
    assert step.status.state is AlertState.PENDING and step.status.active_since == at(900)
    assert step.status.notified_state is AlertState.RESOLVED


def test_flapping_starts_past_the_threshold_and_settles_at_half():
    flap = sm.FlapPolicy(window_s=3600, max_changes=4)
    rule = Rule(for_s=0)
    status, changes = None, []
    for i in range(3):  # fire, resolve, fire, resolve, fire: 5 changes
        step = sm.observed(status, "fp", rule, at(i * 120), flap)
        changes += step.changes
        if i < 2:
            step = sm.not_observed(step.status, at(i * 120 + 60), flap)
            changes += step.changes
        status = step.status
    assert status.flapping and "flapping" in changes
    assert sm.to_tell(status, at(400), silenced=False, repeat_interval_s=60) is None
    # An hour later the changes have left the window: it settles and tells once.
    step = sm.observed(status, "fp", rule, at(4000), flap)
    assert not step.status.flapping and step.changes == ("settled",)
    assert sm.to_tell(step.status, at(4000), silenced=False,
                      repeat_interval_s=60) is Tell.FIRING


FIRING = AlertStatus("fp", "gpu-hot", AlertState.FIRING, active_since=at(0), fired_at=at(0))


@pytest.mark.parametrize(("status", "now", "silenced", "expected"), [
    (FIRING, 0, False, Tell.FIRING),
    (FIRING, 0, True, None),
    (replace(FIRING, flapping=True), 0, False, None),
    (replace(FIRING, notified_state=AlertState.FIRING, notified_at=at(0)), 3599, False, None),
    (replace(FIRING, notified_state=AlertState.FIRING, notified_at=at(0)), 3600, False,
     Tell.REPEAT),
    (replace(FIRING, notified_state=AlertState.FIRING, notified_at=at(0),
             acked_by="user:olga"), 7200, False, None),
    (replace(FIRING, notified_state=AlertState.FIRING, notified_at=at(0),
             acked_by="user:olga", ack_expires_at=at(5000)), 7200, False, Tell.REPEAT),
    (replace(FIRING, state=AlertState.RESOLVED, notified_state=AlertState.FIRING), 10, False,
     Tell.RESOLVED),
    (replace(FIRING, state=AlertState.RESOLVED, notified_state=None), 10, False, None),
    (replace(FIRING, state=AlertState.PENDING), 10, False, None),
], ids=["new firing", "silenced", "flapping", "repeat not due", "repeat due",
        "acked: no repeat", "ack expired: repeat", "resolved after firing told",
        "resolved never told", "pending"])
def test_what_to_tell(status, now, silenced, expected):
    assert sm.to_tell(status, at(now), silenced=silenced, repeat_interval_s=3600) is expected


def test_group_key_by_labels_and_per_alert_without_group_by():
    by_project = Rule(group_by=("project",))
    assert sm.group_key(by_project, "a", {"project": "vision", "gpu": "1"}) == \
        sm.group_key(by_project, "b", {"project": "vision", "gpu": "2"})
    assert sm.group_key(by_project, "a", {"project": "vision"}) != \
        sm.group_key(by_project, "a", {"project": "speech"})
    assert sm.group_key(Rule(), "a", {}) != sm.group_key(Rule(), "b", {})


def test_common_labels_keep_what_all_share():
    assert sm.common_labels([{"project": "vision", "gpu": "1"},
                             {"project": "vision", "gpu": "2"}]) == {"project": "vision"}


# --- the property ---------------------------------------------------------------------
rounds = st.lists(st.tuples(st.integers(0, 400), st.booleans(), st.booleans()),
                  min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(rounds=rounds, for_s=st.sampled_from([0, 60, 300, 900]),
       max_changes=st.integers(2, 8))
def test_a_rule_fires_iff_its_condition_held_for_its_duration(rounds, for_s, max_changes):
    """Random rounds (clock step, evaluated?, observed?): after every evaluated round the
    alert fires exactly when every evaluated round since the run began observed it and the
    run is at least `for` old; a round that was not evaluated changes nothing."""
    rule = Rule(for_s=for_s)
    flap = sm.FlapPolicy(window_s=1800, max_changes=max_changes)
    status: AlertStatus | None = None
    run_start: datetime | None = None
    now = T0
    for step_s, evaluated, seen in rounds:
        now += timedelta(seconds=step_s)
        if not evaluated:
            continue  # nothing is called: the store keeps the alert as it is
        if seen:
            run_start = run_start or now
            status = sm.observed(status, "fp", rule, now, flap).status
        else:
            run_start = None
            if status is not None:
                status = sm.not_observed(status, now, flap).status
        fires = run_start is not None and (now - run_start).total_seconds() >= for_s
        assert (status is not None and status.state is AlertState.FIRING) == fires
        if status is not None and seen:
            assert status.active_since == run_start
