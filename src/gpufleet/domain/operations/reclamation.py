"""The reclamation step: given what an allocation's units did and what was said before, what
the reclaim loop does with it now (docs/operations.md, "Reclamation").

One round of the loop asks `next_step` once per active allocation. The step depends only on
the facts passed in (no clock, no store), so every pair of (situation, open warning) is a
tested case, and running a round twice changes nothing the first did not.

    not idle ─────────────► nothing            (warning open: saved by use)
    idle, exempted ───────► nothing            (warning open: closed as exempted)
    idle, no warning ─────► warn; act at now + grace  (unless this idle stretch was
                                                       handled: notified, or a dry run)
    idle, warned, before ─► wait
    idle, warned, due ────► act (release / shrink / notify; a dry run records it only)
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpufleet.domain.operations.reclaim_policy import IdleHeld, ReclaimAction, ReclaimPolicy


class Step(StrEnum):
    NOTHING = "nothing"
    WARN = "warn"
    WAIT = "wait"
    ACT = "act"
    SAVED = "saved_by_use"   # a warned allocation was used again before its deadline
    EXEMPTED = "exempted"    # a warned allocation was exempted before its deadline
    WITHDRAWN = "withdrawn"  # its policy was switched off while it was warned


class Outcome(StrEnum):
    """How a warning ended: the report's columns."""

    RELEASED = "released"
    SHRUNK = "shrunk"
    NOTIFIED = "notified"
    SAVED = "saved_by_use"
    EXEMPTED = "exempted"
    WITHDRAWN = "withdrawn"
    ENDED = "ended"  # the allocation ended (released, expired) before its deadline
    WOULD_RELEASE = "would_release"
    WOULD_SHRINK = "would_shrink"
    WOULD_NOTIFY = "would_notify"


WOULD = {ReclaimAction.RELEASE: Outcome.WOULD_RELEASE,
         ReclaimAction.SHRINK: Outcome.WOULD_SHRINK,
         ReclaimAction.NOTIFY: Outcome.WOULD_NOTIFY}
OUTCOME_OF_STEP = {Step.SAVED: Outcome.SAVED, Step.EXEMPTED: Outcome.EXEMPTED,
                   Step.WITHDRAWN: Outcome.WITHDRAWN}


@dataclass(frozen=True)
class Idleness:
    """What the telemetry judged of one allocation's units over its policy's idle window.

    `units`: every unit it holds; `idle`: those judged idle (idle-held ones included);
    `held`: of those, the idle-held. A unit whose activity is unknown, or that was bound
    for less than the window, is in neither: unknown is never idle (docs/design.md,
    "Funnel and activity")."""

    units: frozenset[str]
    idle: frozenset[str]
    held: frozenset[str] = frozenset()

    def reclaimable(self, policy: ReclaimPolicy) -> frozenset[str]:
        """The idle units the policy may take: idle-held ones only where it reclaims them."""
        if policy.idle_held is IdleHeld.SPARE:
            return self.idle - self.held
        return self.idle

    def is_candidate(self, policy: ReclaimPolicy) -> bool:
        """Release and notify want every unit idle; shrink wants at least one."""
        taken = self.reclaimable(policy)
        if not taken:
            return False
        return policy.action is ReclaimAction.SHRINK or taken >= self.units


@dataclass(frozen=True)
class OpenWarning:
    deadline: datetime


def next_step(policy: ReclaimPolicy, idleness: Idleness, *, exempt: bool,
              warning: OpenWarning | None, now: datetime,
              handled_since: datetime | None = None,
              idle_since: datetime | None = None) -> Step:
    """`handled_since`: when this allocation's last warning ended for good without taking
    it (notified; a dry run's would-do); `idle_since`: when its idle units were last used.
    An idle stretch already handled is not warned of again until the allocation is used."""
    if not policy.enabled:
        return Step.WITHDRAWN if warning else Step.NOTHING
    if not idleness.is_candidate(policy):
        return Step.SAVED if warning else Step.NOTHING
    if exempt:
        return Step.EXEMPTED if warning else Step.NOTHING
    if warning is None:
        handled = (handled_since is not None and idle_since is not None
                   and handled_since >= idle_since)
        return Step.NOTHING if handled else Step.WARN
    return Step.ACT if now >= warning.deadline else Step.WAIT


def units_taken_of(policy: ReclaimPolicy, idleness: Idleness) -> frozenset[str]:
    """What acting takes: every unit for `release`, the idle ones for `shrink` (all of them
    when none is used: nothing is left to keep), none for `notify`."""
    if policy.action is ReclaimAction.RELEASE:
        return idleness.units
    if policy.action is ReclaimAction.SHRINK:
        return idleness.reclaimable(policy)
    return frozenset()


def hours_text(span: timedelta) -> str:
    """`4 h`, `90 min`, `2 d`: how long, for a person."""
    minutes = max(0, round(span.total_seconds() / 60))
    if minutes < 120:
        return f"{minutes} min"
    if minutes < 48 * 60:
        return f"{minutes / 60:.3g} h"
    return f"{minutes / 1440:.3g} d"


def units_text(count: int, models: Collection[str]) -> str:
    """`8 × H100-80GB`, `3 × GPU` (several models)."""
    names = sorted(set(models))
    return f"{count} × {names[0] if len(names) == 1 else 'GPU'}"


def warning_summary(code: str, *, units: str, idle_for: timedelta, deadline: datetime,
                    action: ReclaimAction, taking: int, of: int) -> str:
    """The line an owner reads: what, how long idle, what happens when, how to keep it."""
    at = deadline.strftime("%Y-%m-%d %H:%M UTC")
    if action is ReclaimAction.NOTIFY:
        fate = f"operators are told at {at} unless used"
    elif action is ReclaimAction.SHRINK and taking < of:
        fate = f"its {taking} idle of {of} units are released at {at} unless used or exempted"
    else:
        fate = f"released at {at} unless used or exempted"
    return (f"{code}: {units} idle for {hours_text(idle_for)}; {fate} — "
            f"`gpufleet request exempt {code} --reason …`")


def ending_summary(code: str, *, units: str, ends_at: datetime) -> str:
    at = ends_at.strftime("%Y-%m-%d %H:%M UTC")
    return (f"{code}: {units} ends at {at}; its units are released then — "
            f"`gpufleet request extend {code} --hours N` to keep them")
