"""Policy precedence (project over environment over the default, field by field) and the
bounds a policy's spans must keep."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.reclaim_policy import (
    IdleHeld,
    PolicyFields,
    ReclaimAction,
    ReclaimPolicy,
    resolve,
)

DEFAULT = ReclaimPolicy(idle_window=timedelta(hours=4), idle_held=IdleHeld.RECLAIM,
                        grace=timedelta(hours=1), end_warning_lead=timedelta(hours=24),
                        action=ReclaimAction.NOTIFY, enabled=True, dry_run=False)


def test_project_overrides_environment_overrides_the_default_field_by_field():
    environment = PolicyFields(idle_window=timedelta(hours=2), action=ReclaimAction.RELEASE)
    project = PolicyFields(grace=timedelta(minutes=10), action=ReclaimAction.SHRINK)
    policy = resolve(DEFAULT, ("environment:gpu-a", environment), ("project:vision", project))
    assert policy.idle_window == timedelta(hours=2)
    assert policy.grace == timedelta(minutes=10)
    assert policy.action is ReclaimAction.SHRINK
    assert policy.end_warning_lead == timedelta(hours=24)
    assert policy.decided_by("idle_window") == "environment:gpu-a"
    assert policy.decided_by("action") == "project:vision"
    assert policy.decided_by("dry_run") == "default"


def test_a_missing_layer_leaves_the_default():
    assert resolve(DEFAULT, ("environment:x", None), ("project:y", None)) == DEFAULT


def test_a_project_can_switch_off_what_its_environment_switched_on():
    policy = resolve(DEFAULT, ("environment:a", PolicyFields(dry_run=True)),
                     ("project:b", PolicyFields(dry_run=False, enabled=False)))
    assert (policy.dry_run, policy.enabled) == (False, False)


@pytest.mark.parametrize("fields", [
    {"idle_window": timedelta(0)},
    {"idle_window": timedelta(hours=-1)},
    {"idle_window": timedelta(days=8)},
    {"grace": timedelta(minutes=-5)},
    {"end_warning_lead": timedelta(days=31)},
], ids=["zero window", "negative window", "window over a week", "negative grace",
        "lead over 30 days"])
def test_spans_out_of_bounds_are_refused_with_the_field_named(fields):
    with pytest.raises(InvalidInput) as refused:
        PolicyFields(**fields)
    assert refused.value.code == "invalid_reclaim_policy"
    assert refused.value.details["field"] in ("idle window", "grace period", "end warning lead")


def test_zero_grace_and_zero_lead_are_allowed():
    fields = PolicyFields(grace=timedelta(0), end_warning_lead=timedelta(0))
    assert not fields.is_empty
    assert PolicyFields().is_empty
