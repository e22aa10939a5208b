"""The fleet funnel and idleness, exactly as docs/design.md, "Funnel and activity" defines them:
pure arithmetic on 1-minute values, with no I/O and no clock (times and values are passed in).

Everything is counted in GPU-hours. A unit weighs what it holds of its GPU: a whole GPU 1, a
MIG instance max(compute share, memory share), a shared fraction milli ÷ 1000 — which is its
binding's `milli` ÷ 1000, as placement writes it.

Per minute, a unit's **activity** comes from the best signal it has (`activity_signal`):
`gpu.gr_engine_active`, else `gpu.utilization` (whole GPUs only), else — MIG instances with
neither, as on Ampere without DCGM — whether any process ran on it. A minute whose activity is
unknown counts neither as active nor as idle.

Production never calls the per-minute helpers: the services count the same quantities from the
telemetry store's minute masks (tsdb/duckdb_masks.py), in aggregate. `unit_activity`,
`classify_minute`, `Funnel.add_minute` and `idle_verdict_from_minutes` are the **specification** the
masks are checked against (tests/services/telemetry/test_masks_properties.py): where the two
disagree, the masks are wrong unless docs/design.md, "Funnel and activity" says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.telemetry.vocabulary import Architecture, architecture_of

MINUTES_PER_HOUR = 60
# An idle verdict may lead to reclamation, so a window mostly unknown is never called idle;
# a few missing minutes (an agent restart) do not reset it either.
IDLE_MIN_KNOWN_SHARE = 0.9

GR_ENGINE_ACTIVE = "gpu.gr_engine_active"
UTILIZATION = "gpu.utilization"
SM_ACTIVE = "gpu.sm_active"
MEMORY_USED = "gpu.memory_used_bytes"
PROCESS_MEMORY = "process.memory_used_bytes"
PROCESS_SM = "process.sm_utilization"
WORKLOAD_CLAIMED = "gpu.workload_claimed"


class ActivitySource(StrEnum):
    """Where a unit's activity comes from, best first."""

    GR_ENGINE = "gr_engine_active"
    UTILIZATION = "utilization"
    PROCESSES = "processes"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Thresholds:
    """The thresholds of docs/design.md, "Funnel and activity" (each a setting)."""

    activity_percent: float = 5.0
    effective_sm_active_percent: float = 50.0
    idle_window_minutes: int = 240
    idle_held_memory_bytes: int = 1024**3


# --- the activity signal ------------------------------------------------------------------

class ActivitySignal(StrEnum):
    """What one series stands for in a unit's activity (docs/design.md, "Funnel and activity"), best
    first: the first present wins. `REPORTED` (a MIG instance's own used memory: it reports, so
    process presence is known) and `RUNNING` (a process on it) together are the `processes` source.
    """

    GR_ENGINE = "gr_engine_active"
    UTILIZATION = "utilization"
    REPORTED = "reported"
    RUNNING = "running"


def activity_signal(metric: str, *, is_mig: bool,
                    architecture: Architecture | None) -> ActivitySignal | None:
    """The one statement of which series stand for activity, used by the live views and by
    the funnel's SQL alike.

    `gpu.utilization` is a whole-GPU signal: NVML does not support it on MIG devices, so a
    MIG instance never uses it. Process presence stands in only for MIG instances that may
    lack `gr_engine_active`: Ampere (or an unknown model) without DCGM; Hopper and newer
    have it through GPM, so a Hopper instance without it is unknown.
    """
    if metric == GR_ENGINE_ACTIVE:
        return ActivitySignal.GR_ENGINE
    if metric == UTILIZATION and not is_mig:
        return ActivitySignal.UTILIZATION
    if is_mig and architecture in (None, Architecture.AMPERE):
        if metric == MEMORY_USED:
            return ActivitySignal.REPORTED
        if metric == PROCESS_MEMORY:
            return ActivitySignal.RUNNING
    return None


def choose_activity_source(metrics: Iterable[str], *, is_mig: bool,
                           architecture: Architecture | None) -> ActivitySource:
    """The best activity signal among the metrics a unit reports (`activity_signal`)."""
    signals = {activity_signal(m, is_mig=is_mig, architecture=architecture) for m in metrics}
    if ActivitySignal.GR_ENGINE in signals:
        return ActivitySource.GR_ENGINE
    if ActivitySignal.UTILIZATION in signals:
        return ActivitySource.UTILIZATION
    if ActivitySignal.REPORTED in signals:
        return ActivitySource.PROCESSES
    return ActivitySource.UNKNOWN


def unit_activity(latest: Mapping[str, float], *, process_running: bool, is_mig: bool,
                  architecture: Architecture | None) -> tuple[float | None, ActivitySource]:
    """A unit's activity (percent) from its latest unlabelled values and whether a process
    runs on it; None where unknown. Given one minute's values, the specification of that
    minute's activity, which the masks judge per minute alike."""
    metrics = [*latest, *([PROCESS_MEMORY] if process_running else [])]
    source = choose_activity_source(metrics, is_mig=is_mig, architecture=architecture)
    if source is ActivitySource.GR_ENGINE:
        return latest[GR_ENGINE_ACTIVE], source
    if source is ActivitySource.UTILIZATION:
        return latest[UTILIZATION], source
    if source is ActivitySource.PROCESSES:
        return (100.0 if process_running else 0.0), source
    return None, source


def architecture_of_model(model: str) -> Architecture | None:
    """The architecture of a catalogue model name (`H100-80GB`), None for one not known."""
    found = catalogue_model(model)
    return architecture_of(found.architecture) if found else None


# --- one minute ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MinuteVerdict:
    known: bool
    active: bool
    effective: bool


def classify_minute(activity_percent: float | None, sm_active_percent: float | None,
                    t: Thresholds) -> MinuteVerdict:
    """A unit's minute — the specification the masks' active / effective bits are checked
    against (production counts them in tsdb/duckdb_masks.py). Effective minutes are active
    minutes whose `sm_active` reaches the effective threshold (an SM busy half the time
    implies an engine busy at least as long; requiring both keeps effective ≤ active even
    for inconsistent data)."""
    if activity_percent is None:
        return MinuteVerdict(False, False, False)
    active = activity_percent >= t.activity_percent
    effective = active and sm_active_percent is not None and \
        sm_active_percent >= t.effective_sm_active_percent
    return MinuteVerdict(True, active, effective)


# --- the funnel ---------------------------------------------------------------------------

@dataclass
class Funnel:
    """GPU-hours of one group over a window. `total`, `reporting` come from the inventory (None
    where the grouping has no inventory, e.g. by project); the rest from bindings and
    telemetry. `sm_active_gpu_hours` is Σ sm_active/100 × GPU-hours over allocated minutes."""

    total_gpu_hours: float | None = None
    reporting_gpu_hours: float | None = None
    allocated_gpu_hours: float = 0.0
    active_gpu_hours: float = 0.0
    effective_gpu_hours: float = 0.0
    unknown_gpu_hours: float = 0.0
    sm_active_gpu_hours: float = 0.0

    @property
    def silent_gpu_hours(self) -> float | None:
        if self.total_gpu_hours is None or self.reporting_gpu_hours is None:
            return None
        return max(self.total_gpu_hours - self.reporting_gpu_hours, 0.0)

    @property
    def efficiency_percent(self) -> float | None:
        """Σ sm_active × GPU-hours ÷ allocated GPU-hours (a minute of unknown sm_active
        adds nothing to the sum, as the definition says)."""
        if self.allocated_gpu_hours <= 0:
            return None
        return 100.0 * self.sm_active_gpu_hours / self.allocated_gpu_hours

    def add_minute(self, weight: float, activity_percent: float | None,
                   sm_active_percent: float | None, t: Thresholds) -> None:
        """One allocated minute of a unit of `weight`. The specification of the funnel's
        counts: production tallies the same minutes from the store's masks
        (`MinuteMasks.tallies`), which the property tests check against this."""
        hours = weight / MINUTES_PER_HOUR
        verdict = classify_minute(activity_percent, sm_active_percent, t)
        self.allocated_gpu_hours += hours
        if not verdict.known:
            self.unknown_gpu_hours += hours
        if verdict.active:
            self.active_gpu_hours += hours
        if verdict.effective:
            self.effective_gpu_hours += hours
        if sm_active_percent is not None:
            self.sm_active_gpu_hours += hours * min(max(sm_active_percent, 0.0), 100.0) / 100

    def merge(self, other: Funnel) -> Funnel:
        def total(a: float | None, b: float | None) -> float | None:
            return None if a is None and b is None else (a or 0.0) + (b or 0.0)
        return Funnel(total(self.total_gpu_hours, other.total_gpu_hours),
                      total(self.reporting_gpu_hours, other.reporting_gpu_hours),
                      self.allocated_gpu_hours + other.allocated_gpu_hours,
                      self.active_gpu_hours + other.active_gpu_hours,
                      self.effective_gpu_hours + other.effective_gpu_hours,
                      self.unknown_gpu_hours + other.unknown_gpu_hours,
                      self.sm_active_gpu_hours + other.sm_active_gpu_hours)


# --- idleness -----------------------------------------------------------------------------

class IdleState(StrEnum):
    IDLE = "idle"
    IDLE_HELD = "idle_held"
    ACTIVE = "active"
    UNKNOWN = "unknown"  # activity unknown for too much of the window
    TOO_NEW = "too_new"  # not bound for the whole window yet


def idle_verdict(*, window_minutes: int, bound_minutes: int, known_minutes: int,
                 active_minutes: int, memory_used_bytes: float | None,
                 t: Thresholds) -> IdleState:
    """An allocated unit over the idle window, from counts of its minutes in the window.

    Idle: bound for the whole window, activity known for at least IDLE_MIN_KNOWN_SHARE of it
    and below the threshold in every known minute. Idle-held: idle while its used memory
    (the latest value) is at least the idle-held threshold.
    """
    if active_minutes > 0:
        return IdleState.ACTIVE
    if bound_minutes < window_minutes:
        return IdleState.TOO_NEW
    if known_minutes < IDLE_MIN_KNOWN_SHARE * window_minutes:
        return IdleState.UNKNOWN
    if memory_used_bytes is not None and memory_used_bytes >= t.idle_held_memory_bytes:
        return IdleState.IDLE_HELD
    return IdleState.IDLE


def idle_verdict_from_minutes(activity: list[float | None], *, bound_minutes: int,
                              memory_used_bytes: float | None, t: Thresholds) -> IdleState:
    """`idle_verdict` from the window's per-minute activity values (None: unknown). The
    specification of the idle list: production asks `idle_verdict` with counts of minutes
    from the store's masks, checked against this by the property tests."""
    verdicts = [classify_minute(a, None, t) for a in activity]
    return idle_verdict(window_minutes=len(activity), bound_minutes=bound_minutes,
                        known_minutes=sum(v.known for v in verdicts),
                        active_minutes=sum(v.active for v in verdicts),
                        memory_used_bytes=memory_used_bytes, t=t)


# --- zombies and unattributed usage ---------------------------------------------------------

class BindingState(StrEnum):
    """What the state store says of a unit now."""

    BOUND = "bound"
    ENDED = "ended"  # had a binding, none now
    NEVER = "never"  # no binding in the window looked at


class ZombieReason(StrEnum):
    NO_BINDING = "no_binding"
    BINDING_ENDED = "binding_ended"
    NO_SM_ACTIVITY = "no_sm_activity"


def zombie_reason(*, memory_used_bytes: float | None, binding: BindingState,
                  window_minutes: int, seen_minutes: int, sm_known_minutes: int,
                  sm_busy_minutes: int) -> ZombieReason | None:
    """Why a process holding GPU memory is a zombie (docs/design.md, "Funnel and activity"), or
    None.

    A process with zero own SM activity counts only once it has been seen, with its SM
    activity known, for (nearly) the whole idle window: a process that just started, or
    whose own activity the source cannot say, is not judged.
    """
    if not memory_used_bytes or memory_used_bytes <= 0:
        return None
    if binding is BindingState.NEVER:
        return ZombieReason.NO_BINDING
    if binding is BindingState.ENDED:
        return ZombieReason.BINDING_ENDED
    enough = IDLE_MIN_KNOWN_SHARE * window_minutes
    if seen_minutes >= enough and sm_known_minutes >= enough and sm_busy_minutes == 0:
        return ZombieReason.NO_SM_ACTIVITY
    return None


class ClaimMatch(StrEnum):
    """A workload's claim checked against the binding, which is the truth (docs/design.md,
    "Concepts")."""

    MATCHES = "matches"
    MISMATCH = "mismatch"
    NO_CLAIM = "no_claim"
    UNBOUND = "unbound"  # usage on a unit that no binding holds


def check_claim(claimed_allocation: str | None, bound_allocations: Iterable[str]) -> ClaimMatch:
    bound = set(bound_allocations)
    if not bound:
        return ClaimMatch.UNBOUND
    if not claimed_allocation:
        return ClaimMatch.NO_CLAIM
    return ClaimMatch.MATCHES if claimed_allocation in bound else ClaimMatch.MISMATCH


def is_unattributed(match: ClaimMatch) -> bool:
    """Usage charged to nobody, or claiming an allocation that does not hold the unit."""
    return match in (ClaimMatch.UNBOUND, ClaimMatch.MISMATCH)
