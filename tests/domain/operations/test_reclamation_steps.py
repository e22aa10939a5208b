"""Every (situation, open warning) pair of the reclamation step, named, as Prefect tests
its orchestration rules."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpufleet.domain.operations.reclaim_policy import IdleHeld, ReclaimAction, ReclaimPolicy
from gpufleet.domain.operations.reclamation import (
    Idleness,
    OpenWarning,
    Step,
    hours_text,
    next_step,
    units_taken_of,
    units_text,
    warning_summary,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
POLICY = ReclaimPolicy(idle_window=timedelta(hours=4), idle_held=IdleHeld.RECLAIM,
                       grace=timedelta(hours=1), end_warning_lead=timedelta(hours=24),
                       action=ReclaimAction.RELEASE, enabled=True, dry_run=False)
ALL = frozenset({"a", "b"})
SITUATIONS = {
    "all idle": Idleness(ALL, ALL),
    "one idle": Idleness(ALL, frozenset({"a"})),
    "none idle": Idleness(ALL, frozenset()),
}
WARNINGS = {"no warning": None, "warned, before deadline": OpenWarning(NOW + timedelta(1)),
            "warned, due": OpenWarning(NOW - timedelta(seconds=1))}
EXPECTED = {
    ("all idle", "no warning", False): Step.WARN,
    ("all idle", "warned, before deadline", False): Step.WAIT,
    ("all idle", "warned, due", False): Step.ACT,
    ("all idle", "no warning", True): Step.NOTHING,
    ("all idle", "warned, before deadline", True): Step.EXEMPTED,
    ("all idle", "warned, due", True): Step.EXEMPTED,
}


def _cases():
    for situation, warning, exempt in itertools.product(SITUATIONS, WARNINGS, (False, True)):
        expected = EXPECTED.get((situation, warning, exempt))
        if expected is None:  # not idle (for release, one idle unit is not enough)
            expected = Step.NOTHING if WARNINGS[warning] is None else Step.SAVED
        name = f"{situation}, {warning}{', exempt' if exempt else ''} => {expected}"
        yield pytest.param(situation, warning, exempt, expected, id=name)


@pytest.mark.parametrize(("situation", "warning", "exempt", "expected"), list(_cases()))
def test_release_policy_steps(situation, warning, exempt, expected):
    assert next_step(POLICY, SITUATIONS[situation], exempt=exempt,
                     warning=WARNINGS[warning], now=NOW) is expected


def test_shrink_wants_one_idle_unit_and_takes_only_the_idle_ones():
    shrink = replace(POLICY, action=ReclaimAction.SHRINK)
    one = SITUATIONS["one idle"]
    assert next_step(shrink, one, exempt=False, warning=None, now=NOW) is Step.WARN
    assert units_taken_of(shrink, one) == {"a"}
    assert units_taken_of(POLICY, one) == ALL
    assert units_taken_of(replace(POLICY, action=ReclaimAction.NOTIFY), one) == frozenset()


def test_idle_held_units_are_spared_when_the_policy_says_so():
    held = Idleness(ALL, ALL, held=frozenset({"b"}))
    spare = replace(POLICY, idle_held=IdleHeld.SPARE)
    assert next_step(POLICY, held, exempt=False, warning=None, now=NOW) is Step.WARN
    assert next_step(spare, held, exempt=False, warning=None, now=NOW) is Step.NOTHING
    assert units_taken_of(replace(spare, action=ReclaimAction.SHRINK), held) == {"a"}


def test_a_disabled_policy_withdraws_open_warnings_and_starts_none():
    off = replace(POLICY, enabled=False)
    idle = SITUATIONS["all idle"]
    assert next_step(off, idle, exempt=False, warning=None, now=NOW) is Step.NOTHING
    assert next_step(off, idle, exempt=False, warning=WARNINGS["warned, due"],
                     now=NOW) is Step.WITHDRAWN


def test_a_handled_idle_stretch_is_not_warned_of_again_until_used():
    idle = SITUATIONS["all idle"]
    since = NOW - timedelta(hours=6)
    assert next_step(POLICY, idle, exempt=False, warning=None, now=NOW,
                     handled_since=NOW - timedelta(hours=1), idle_since=since) is Step.NOTHING
    assert next_step(POLICY, idle, exempt=False, warning=None, now=NOW,
                     handled_since=since - timedelta(hours=1), idle_since=since) is Step.WARN


def test_the_warning_reads_as_the_issue_writes_it():
    text = warning_summary("GR-1042", units=units_text(8, ["H100-80GB"] * 8),
                           idle_for=timedelta(hours=4), deadline=datetime(
                               2026, 11, 25, 14, 0, tzinfo=UTC),
                           action=ReclaimAction.RELEASE, taking=8, of=8)
    assert text == ("GR-1042: 8 × H100-80GB idle for 4 h; released at 2026-11-25 14:00 UTC "
                    "unless used or exempted — `gpufleet request exempt GR-1042 --reason …`")
    assert units_text(2, ["H100-80GB", "A100-80GB"]) == "2 × GPU"
    assert [hours_text(timedelta(minutes=m)) for m in (70, 150, 3 * 1440)] == [
        "70 min", "2.5 h", "3 d"]
