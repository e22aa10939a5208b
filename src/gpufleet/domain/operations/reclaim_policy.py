"""Reclamation policies: when an idle allocation is warned, how long its owner has, and what
then happens to it (docs/operations.md, "Reclamation").

A policy row sets some fields for one environment or one project; the effective policy of an
allocation takes each field from its project's row, else its environment's row, else the
server's default (the `reclaim_*` settings): the most specific word wins, field by field, so
a project can shorten the grace period and keep its environment's action.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import timedelta
from enum import StrEnum

from gpufleet.domain.errors import InvalidInput

# A window longer than the minute tier keeps cannot be judged; a week is far inside it
# (`telemetry_minute_retention_days`, 30 by default) and longer than any sane idle timeout.
MAX_IDLE_WINDOW = timedelta(days=7)
MAX_GRACE = timedelta(days=7)
MAX_END_WARNING_LEAD = timedelta(days=30)


class ReclaimAction(StrEnum):
    """What happens once the grace period passed and the allocation is still idle."""

    RELEASE = "release"  # the whole allocation ends, as if its owner released it
    SHRINK = "shrink"    # only its idle units end; the used ones stay
    NOTIFY = "notify"    # nothing is taken: the owner is told, and the report counts it


class IdleHeld(StrEnum):
    """What an idle-held unit (memory held, nothing computed: a notebook with a model
    loaded) counts as. `reclaim`: idle like any other; `spare`: in use, never reclaimed."""

    RECLAIM = "reclaim"
    SPARE = "spare"


class Scope(StrEnum):
    ENVIRONMENT = "environment"
    PROJECT = "project"


@dataclass(frozen=True)
class PolicyFields:
    """What one policy row sets; None: not set here, the next scope decides."""

    idle_window: timedelta | None = None
    idle_held: IdleHeld | None = None
    grace: timedelta | None = None
    end_warning_lead: timedelta | None = None
    action: ReclaimAction | None = None
    enabled: bool | None = None
    dry_run: bool | None = None

    def __post_init__(self) -> None:
        _check_span("idle window", self.idle_window, MAX_IDLE_WINDOW, zero_ok=False)
        _check_span("grace period", self.grace, MAX_GRACE, zero_ok=True)
        _check_span("end warning lead", self.end_warning_lead, MAX_END_WARNING_LEAD,
                    zero_ok=True)

    @property
    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True)
class ReclaimPolicy:
    """The effective policy of one allocation, every field decided; `source` names, for
    each field, the scope that decided it (`project:vision`, `environment:gpu-a`,
    `default`) — what `reclaim policy ls` and a warning show."""

    idle_window: timedelta
    idle_held: IdleHeld
    grace: timedelta
    end_warning_lead: timedelta
    action: ReclaimAction
    enabled: bool
    dry_run: bool
    source: tuple[tuple[str, str], ...] = ()

    @property
    def idle_window_minutes(self) -> int:
        return max(1, round(self.idle_window.total_seconds() / 60))

    def decided_by(self, field_name: str) -> str:
        return dict(self.source).get(field_name, "default")


def resolve(default: ReclaimPolicy, *layers: tuple[str, PolicyFields | None]) -> ReclaimPolicy:
    """`default` overridden by each layer in turn (least specific first: environment, then
    project), field by field. Each layer is (its name for `source`, its fields or None)."""
    policy, source = default, dict(default.source)
    for name, layer in layers:
        if layer is None:
            continue
        changes = {f.name: getattr(layer, f.name) for f in fields(layer)
                   if getattr(layer, f.name) is not None}
        policy = replace(policy, **changes)
        source.update(dict.fromkeys(changes, name))
    return replace(policy, source=tuple(sorted(source.items())))


def _check_span(name: str, span: timedelta | None, most: timedelta, *, zero_ok: bool) -> None:
    if span is None:
        return
    seconds = span.total_seconds()
    if seconds < 0 or (seconds == 0 and not zero_ok):
        raise InvalidInput(f"the {name} must be {'at least' if zero_ok else 'longer than'} "
                           f"zero, not {seconds:g} s", code="invalid_reclaim_policy",
                           details={"field": name, "seconds": seconds})
    if span > most:
        raise InvalidInput(f"the {name} may be at most {most.days} days",
                           code="invalid_reclaim_policy",
                           details={"field": name, "max_days": most.days})
