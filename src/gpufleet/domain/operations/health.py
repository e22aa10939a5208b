"""The GPU health state machine: `healthy → suspect → quarantined → healthy | retired`.

A health rule (`health_rules.py`) looks at one GPU's signals and answers a *finding*: a
verdict (`suspect` or `quarantine`) with its evidence, or nothing. `decide` turns the
findings of one evaluation into the GPU's next state; `check_clear` says whether an
operator may return a GPU to service. Pure: the caller passes the time
(docs/operations.md, "GPU health and quarantine").

What moves a GPU, and what brings it back:
- a `quarantine` finding moves a healthy or suspect GPU to `quarantined`; only an operator
  brings it back (`gpufleet gpu clear`), so a fault that comes and goes cannot flap;
- a `suspect` finding moves a healthy GPU to `suspect` (it stays usable);
- a suspect GPU on which no rule finds anything, once `suspect_hold_s` has passed since
  a rule made it suspect, returns to healthy by itself. Suspicion a rule did not raise
  (registration's "missing from its node's latest inventory", an operator) is not the
  evaluator's to clear;
- an operator retires a quarantined GPU for good (`gpufleet gpu retire`): nothing returns
  a retired GPU to service.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from gpufleet.domain.errors import Conflict
from gpufleet.domain.inventory import GpuHealth


class Verdict(StrEnum):
    """What a rule concludes about a GPU; `quarantine` outranks `suspect`."""

    SUSPECT = "suspect"
    QUARANTINE = "quarantine"

    @property
    def state(self) -> GpuHealth:
        return GpuHealth.SUSPECT if self is Verdict.SUSPECT else GpuHealth.QUARANTINED


@dataclass(frozen=True)
class Evidence:
    """What a rule saw: the metric, its value, when, and one line a person reads
    (`gpu.xid_errors_total{xid="79"} +1 in 10 min: GPU has fallen off the bus`)."""

    metric: str
    value: float | None
    at: datetime
    line: str

    def as_dict(self) -> dict:
        return {"metric": self.metric, "value": self.value,
                "at": self.at.isoformat(timespec="seconds"), "line": self.line}


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one GPU, with its evidence."""

    rule: str
    verdict: Verdict
    evidence: Evidence


@dataclass(frozen=True)
class Move:
    """The state a GPU moves to and the finding that moved it (None: back to healthy)."""

    to: GpuHealth
    finding: Finding | None


def worst(findings: Iterable[Finding]) -> Finding | None:
    """The finding that decides: the first `quarantine`, else the first `suspect` (rules
    run in pack order, so the pack's order breaks ties)."""
    chosen: Finding | None = None
    for finding in findings:
        if finding.verdict is Verdict.QUARANTINE:
            return finding
        chosen = chosen or finding
    return chosen


def decide(current: GpuHealth, current_rule: str | None, since: datetime | None,
           findings: Iterable[Finding], now: datetime,
           suspect_hold: timedelta) -> Move | None:
    """The GPU's next state after one evaluation, or None when it stays as it is.

    `current_rule`: the health rule that put the GPU in its state (None: registration or
    an operator did); `since`: when it entered its state."""
    findings = list(findings)
    chosen = worst(findings)
    if current in (GpuHealth.QUARANTINED, GpuHealth.RETIRED):
        return None  # only an operator clears a quarantine: no flapping
    if chosen is not None and chosen.verdict is Verdict.QUARANTINE:
        return Move(GpuHealth.QUARANTINED, chosen)
    if current is GpuHealth.HEALTHY:
        return Move(GpuHealth.SUSPECT, chosen) if chosen is not None else None
    # suspect: clears itself only when a rule raised it and every rule has gone quiet
    if current_rule is None or findings:
        return None
    if since is not None and now - since < suspect_hold:
        return None
    return Move(GpuHealth.HEALTHY, None)


def check_clear(current: GpuHealth, uuid: str) -> None:
    """An operator returns a suspect or quarantined GPU to healthy; clearing a healthy GPU
    is a mistake worth saying (409 naming the state), not a silent no-op."""
    if current is GpuHealth.HEALTHY:
        raise Conflict(f"GPU {uuid} is healthy: there is nothing to clear",
                       code="gpu_already_healthy",
                       details={"gpu": uuid, "health": current.value})
    if current is GpuHealth.RETIRED:
        raise Conflict(f"GPU {uuid} is retired: a retired GPU does not return to service",
                       code="gpu_retired", details={"gpu": uuid, "health": current.value})


def check_retire(current: GpuHealth, uuid: str) -> None:
    """Only a quarantined GPU retires: retiring is giving up on a GPU already out of
    service, not a way around quarantine (409 naming the state)."""
    if current is not GpuHealth.QUARANTINED:
        raise Conflict(f"GPU {uuid} is {current.value}: only a quarantined GPU can be "
                       "retired (quarantine it first)", code="gpu_not_quarantined",
                       details={"gpu": uuid, "health": current.value})
