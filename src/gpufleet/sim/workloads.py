"""Workload models: what runs on a simulated unit, as smooth, correlated signals of time.

A binding (an allocation on a unit) gets one `WorkloadKind`, chosen by hashing the fleet
seed and the allocation code, so every unit of an allocation runs the same kind and the
same seed gives the same fleet of workloads on every run (`WORKLOAD_MIX` says how often
each kind comes up). A unit with no binding is idle, except for the seeded few where a
leftover process still holds memory (a zombie, docs/design.md, "Funnel and activity").

Signals are functions of time, not of the tick: value noise (random values at knots a
period apart, smoothly interpolated) gives slow drifts, and bursts, checkpoints and notebook
cells are windows placed by hashing the time slot they fall in. The same (seed, time) gives
the same load whatever was collected before, and a simulation may run faster than real
time. Engines move together: tensor, FP and DRAM activity are shares of `sm_active`, and
power, heat and clocks follow from them (`telemetry.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from .ids import stable_key

GIB = 1024**3
MIB = 1024**2
_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_INV_2_64 = 1.0 / float(1 << 64)


# --- deterministic randomness -------------------------------------------------------------

def _mix64(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread integer hash."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def uniform(key: int, n: int) -> float:
    """The `n`-th uniform draw in [0, 1) of `key`; n may be any integer (a time slot)."""
    return _mix64(key ^ ((n * _GOLDEN) & _MASK)) * _INV_2_64


def between(key: int, n: int, low: float, high: float) -> float:
    return low + (high - low) * uniform(key, n)


def smooth(key: int, t_s: float, period_s: float) -> float:
    """Value noise in [0, 1]: a fresh random value every `period_s`, eased in between, so
    consecutive ticks are close and a signal drifts instead of jumping."""
    u = t_s / period_s
    knot = math.floor(u)
    f = u - knot
    a = uniform(key, knot)
    b = uniform(key, knot + 1)
    return a + (b - a) * f * f * (3.0 - 2.0 * f)


def ramp(x: float, low: float, high: float) -> float:
    """0 below `low`, 1 above `high`, eased in between."""
    if x <= low:
        return 0.0
    if x >= high:
        return 1.0
    f = (x - low) / (high - low)
    return f * f * (3.0 - 2.0 * f)


def window(t_s: float, start_s: float, duration_s: float, edge_s: float) -> float:
    """1 inside [start, start + duration], 0 outside, with eased edges `edge_s` long."""
    if t_s <= start_s or t_s >= start_s + duration_s:
        return 0.0
    return min(ramp(t_s - start_s, 0.0, edge_s), ramp(start_s + duration_s - t_s, 0.0, edge_s))


# --- what a unit does at one instant ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Activity:
    """Engine activity of one unit at one instant, percent 0–100 (catalogue units), and
    interconnect traffic as shares (0–1) of the GPU's link capacity."""

    utilization: float = 0.0
    gr_engine: float = 0.0
    sm: float = 0.0
    occupancy: float = 0.0
    tensor: float = 0.0
    hmma: float = 0.0
    imma: float = 0.0
    dfma: float = 0.0
    fp64: float = 0.0
    fp32: float = 0.0
    fp16: float = 0.0
    integer: float = 0.0
    dram: float = 0.0
    pcie_rx_share: float = 0.0
    pcie_tx_share: float = 0.0
    nvlink_share: float = 0.0


IDLE = Activity()


@dataclass(frozen=True, slots=True)
class ProcessLoad:
    """One process on a unit: identity, usage and the attribution claims it makes."""

    pid: int
    name: str
    memory_used_bytes: int
    sm_utilization: float
    claimed_allocation: str | None = None
    container: str | None = None
    pod: str | None = None
    namespace: str | None = None
    slurm_job: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class UnitLoad:
    activity: Activity
    memory_used_bytes: int
    processes: tuple[ProcessLoad, ...]


IDLE_LOAD = UnitLoad(IDLE, 0, ())


@dataclass(frozen=True, slots=True)
class EngineMix:
    """How a workload's SM activity spreads over the pipes (shares of sm_active)."""

    gr_over_sm: float
    occupancy: float
    tensor: float
    imma: float
    fp64: float
    fp32: float
    fp16: float
    integer: float
    dram: float

    def activity(self, sm: float, pcie_rx: float, pcie_tx: float, nvlink: float) -> Activity:
        if sm <= 0.0:
            return Activity(pcie_rx_share=pcie_rx, pcie_tx_share=pcie_tx, nvlink_share=nvlink)
        sm = min(100.0, sm)
        gr = min(100.0, sm * self.gr_over_sm + 0.3)
        tensor = min(100.0, sm * self.tensor)
        imma = tensor * self.imma
        return Activity(
            utilization=min(100.0, gr * 1.35), gr_engine=gr, sm=sm,
            occupancy=sm * self.occupancy, tensor=tensor, hmma=tensor - imma, imma=imma,
            dfma=0.0, fp64=sm * self.fp64, fp32=sm * self.fp32, fp16=sm * self.fp16,
            integer=sm * self.integer, dram=min(100.0, sm * self.dram),
            pcie_rx_share=pcie_rx, pcie_tx_share=pcie_tx, nvlink_share=nvlink)


def _mix(key: int, *, tensor: tuple[float, float], dram: tuple[float, float],
         imma: float = 0.0) -> EngineMix:
    return EngineMix(
        gr_over_sm=between(key, 101, 1.03, 1.10), occupancy=between(key, 102, 0.35, 0.6),
        tensor=between(key, 103, *tensor), imma=imma, fp64=between(key, 104, 0.0, 0.02),
        fp32=between(key, 105, 0.08, 0.25), fp16=between(key, 106, 0.03, 0.12),
        integer=between(key, 107, 0.06, 0.15), dram=between(key, 108, *dram))


# --- workload kinds and the mix -----------------------------------------------------------

class WorkloadKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    IDLE_HELD = "idle_held"
    ZOMBIE = "zombie"
    MISMATCHED_CLAIM = "mismatched_claim"


# Share of allocations that run each kind: mostly real work, so the funnel narrows the way
# a real fleet's does (allocated > active > effective), with a visible tail of waste.
WORKLOAD_MIX: tuple[tuple[WorkloadKind, float], ...] = (
    (WorkloadKind.TRAINING, 0.44),
    (WorkloadKind.INFERENCE, 0.28),
    (WorkloadKind.NOTEBOOK, 0.12),
    (WorkloadKind.IDLE_HELD, 0.08),
    (WorkloadKind.MISMATCHED_CLAIM, 0.05),
    (WorkloadKind.ZOMBIE, 0.03),
)
# Share of unbound units where a process left behind (by a released allocation, or run
# outside gpufleet) still holds memory: unattributed usage.
UNBOUND_ZOMBIE_SHARE = 0.04


def choose_kind(seed: int, allocation: str) -> WorkloadKind:
    """The kind an allocation runs: one hash of (seed, allocation code), so all of its units
    agree and the choice never changes while it lives."""
    draw = uniform(stable_key(seed, "workload-kind", allocation), 0)
    for kind, share in WORKLOAD_MIX:
        if draw < share:
            return kind
        draw -= share
    return WORKLOAD_MIX[0][0]


def _launcher(key: int) -> str:
    draw = uniform(key, 201)
    return "kubernetes" if draw < 0.45 else "slurm" if draw < 0.75 else "bare"


def _other_allocation(allocation: str, key: int) -> str:
    """An allocation code that is not `allocation`: what a workload started with someone
    else's GPUFLEET_ALLOCATION, or left over from an old job, claims."""
    prefix, _, number = allocation.rpartition("-")
    offset = 1 + int(uniform(key, 202) * 40)
    if prefix and number.isdigit():
        return f"{prefix}-{int(number) + offset}"
    return f"GR-{1000 + offset}"


_NAMES = {
    WorkloadKind.TRAINING: ("python3", "python", "torchrun"),
    WorkloadKind.INFERENCE: ("tritonserver", "python3", "text-generation-server"),
    WorkloadKind.NOTEBOOK: ("python3",),
    WorkloadKind.IDLE_HELD: ("python3", "python"),
    WorkloadKind.ZOMBIE: ("python3", "python"),
    WorkloadKind.MISMATCHED_CLAIM: ("python3", "torchrun"),
}
_ROLES = {
    WorkloadKind.TRAINING: "trainer", WorkloadKind.INFERENCE: "server",
    WorkloadKind.NOTEBOOK: "jupyter", WorkloadKind.IDLE_HELD: "jupyter",
    WorkloadKind.ZOMBIE: "worker", WorkloadKind.MISMATCHED_CLAIM: "trainer",
}


@dataclass(frozen=True, slots=True)
class Claims:
    """What a workload's processes say about their owner (docs/design.md, "Concepts": claims are
    checked against the binding, which is the truth)."""

    claimed_allocation: str | None
    container: str | None = None
    pod: str | None = None
    namespace: str | None = None
    slurm_job: str | None = None
    tags: tuple[tuple[str, str], ...] = ()


def _claims(kind: WorkloadKind, key: int, allocation: str | None, project: str | None,
            unit_number: int) -> Claims:
    claimed = allocation
    if allocation is not None and kind is WorkloadKind.MISMATCHED_CLAIM:
        claimed = _other_allocation(allocation, key)
    launcher = _launcher(key)
    role = _ROLES[kind]
    tags = (("experiment", f"exp-{int(uniform(key, 203) * 900) + 100}"),) \
        if uniform(key, 204) < 0.3 else ()
    if launcher == "kubernetes":
        base = (allocation or "orphan").lower()
        suffix = f"{_mix64(key) & 0xFFFFF:05x}"
        return Claims(claimed, container=role, pod=f"{base}-{role}-{unit_number}-{suffix}",
                      namespace=project or "default", tags=tags)
    if launcher == "slurm":
        return Claims(claimed, slurm_job=str(100000 + int(uniform(key, 205) * 900000)),
                      tags=tags)
    if uniform(key, 206) < 0.25 and kind is not WorkloadKind.MISMATCHED_CLAIM:
        claimed = None  # started by hand without GPUFLEET_ALLOCATION: nothing to check
    return Claims(claimed, tags=tags)


@dataclass(frozen=True)
class Workload:
    """One kind of work on one unit. `unit_key` varies per unit; `job_key` is shared by all
    units of the allocation, so a data-parallel job's GPUs move in step."""

    kind: WorkloadKind
    allocation: str | None
    job_key: int
    unit_key: int
    claims: Claims
    mix: EngineMix
    memory_share: float  # of the unit's memory
    process_count: int

    def load(self, t_s: float, memory_bytes: int) -> UnitLoad:
        """The unit's load at `t_s` (seconds since the epoch), given the unit's memory."""
        sm, pcie_rx, pcie_tx, nvlink = _SIGNALS[self.kind](self, t_s)
        activity = self.mix.activity(sm, pcie_rx, pcie_tx, nvlink)
        held = self._memory(t_s, memory_bytes)
        return UnitLoad(activity, held, self._processes(held, activity))

    def _memory(self, t_s: float, memory_bytes: int) -> int:
        share = self.memory_share
        if self.kind is WorkloadKind.NOTEBOOK:  # cells allocate and free as the user works
            share *= 0.6 + 0.4 * smooth(self.unit_key, t_s, 1800.0)
        else:  # caching allocators hold steady; a little drift
            share *= 0.995 + 0.005 * smooth(self.unit_key, t_s, 600.0)
        held = int(memory_bytes * share)
        if self.kind in (WorkloadKind.IDLE_HELD, WorkloadKind.ZOMBIE):
            held = max(held, min(int(memory_bytes * 0.9), GIB + 256 * MIB))
        return held

    def _processes(self, held: int, activity: Activity) -> tuple[ProcessLoad, ...]:
        names = _NAMES[self.kind]
        name = names[int(uniform(self.job_key, 301) * len(names))]
        own_sm = 0.0 if self.kind is WorkloadKind.ZOMBIE else activity.utilization
        c = self.claims
        processes = []
        remaining = held
        for number in range(self.process_count):
            last = number == self.process_count - 1
            memory = remaining if last else int(held * 0.8)
            remaining -= memory
            pid = 1000 + int(uniform(self.unit_key, 400 + number) * 4_000_000)
            processes.append(ProcessLoad(
                pid, name, memory, own_sm if number == 0 else own_sm * 0.1,
                c.claimed_allocation, c.container, c.pod, c.namespace, c.slurm_job, c.tags))
        return tuple(processes)


def _training(w: Workload, t_s: float) -> tuple[float, float, float, float]:
    """High, steady SM activity with a short checkpoint dip every 30–60 minutes."""
    job = w.job_key
    level = between(job, 1, 78.0, 88.0)
    sm = level + 10.0 * (smooth(job, t_s, 90.0) - 0.5) + 4.0 * (smooth(w.unit_key, t_s, 11.0) - 0.5)
    period = between(job, 2, 1800.0, 3600.0)
    start = between(job, 3, 0.0, period)
    since = (t_s - start) % period
    dip = window(since, 0.0, between(job, 4, 60.0, 120.0), 10.0)
    sm = min(95.0, max(70.0, sm)) * (1.0 - 0.7 * dip)
    nvlink = (sm / 100.0) * between(job, 5, 0.25, 0.6)
    return sm, between(job, 6, 0.02, 0.08) * (1.0 - dip), 0.01 + 0.05 * dip, nvlink


def _inference(w: Workload, t_s: float) -> tuple[float, float, float, float]:
    """Bursts of requests and lulls between them, minutes long."""
    job = w.job_key
    burst = ramp(smooth(w.unit_key, t_s, between(job, 11, 60.0, 240.0)), 0.45, 0.55)
    peak = between(job, 12, 45.0, 85.0)
    sm = 2.0 + 4.0 * smooth(w.unit_key, t_s, 20.0) \
        + burst * (peak - 10.0 + 20.0 * smooth(w.unit_key ^ 1, t_s, 7.0))
    return sm, 0.002 + 0.01 * burst, 0.001 + 0.006 * burst, 0.02 * burst


_NOTEBOOK_SLOT_S = 900.0


def _notebook(w: Workload, t_s: float) -> tuple[float, float, float, float]:
    """An interactive session: mostly 0–3 %; about once an hour a cell runs for a minute or
    two."""
    key = w.unit_key
    sm = 2.5 * smooth(key, t_s, 240.0)
    slot = math.floor(t_s / _NOTEBOOK_SLOT_S)
    for n in (slot - 1, slot):  # a burst may spill over from the previous slot
        if uniform(key, 3 * n) < 0.3:
            duration = 30.0 + 90.0 * uniform(key, 3 * n + 1)
            start = n * _NOTEBOOK_SLOT_S + uniform(key, 3 * n + 2) * (_NOTEBOOK_SLOT_S - 120.0)
            sm += window(t_s, start, duration, 5.0) * between(key, n, 20.0, 70.0)
    return sm, 0.0005, 0.0002, 0.0


def _idle_held(w: Workload, t_s: float) -> tuple[float, float, float, float]:
    """Memory held, nothing computed: a forgotten session keeps its tensors."""
    return 0.6 * smooth(w.unit_key, t_s, 300.0), 0.0, 0.0, 0.0


def _zombie(_w: Workload, _t_s: float) -> tuple[float, float, float, float]:
    return 0.0, 0.0, 0.0, 0.0


def _mismatched(w: Workload, t_s: float) -> tuple[float, float, float, float]:
    """Real work, claimed for another allocation."""
    return (_training if w.job_key & 1 else _inference)(w, t_s)


_SIGNALS = {
    WorkloadKind.TRAINING: _training, WorkloadKind.INFERENCE: _inference,
    WorkloadKind.NOTEBOOK: _notebook, WorkloadKind.IDLE_HELD: _idle_held,
    WorkloadKind.ZOMBIE: _zombie, WorkloadKind.MISMATCHED_CLAIM: _mismatched,
}
_MEMORY_SHARE = {
    WorkloadKind.TRAINING: (0.72, 0.94), WorkloadKind.INFERENCE: (0.55, 0.9),
    WorkloadKind.NOTEBOOK: (0.05, 0.3), WorkloadKind.IDLE_HELD: (0.2, 0.8),
    WorkloadKind.ZOMBIE: (0.05, 0.4), WorkloadKind.MISMATCHED_CLAIM: (0.55, 0.9),
}
_TENSOR = {WorkloadKind.TRAINING: (0.55, 0.8), WorkloadKind.MISMATCHED_CLAIM: (0.5, 0.75),
           WorkloadKind.INFERENCE: (0.3, 0.6)}


def workload_for(seed: int, allocation: str, project: str | None, unit: str,
                 unit_number: int = 0, kind: WorkloadKind | None = None) -> Workload:
    """The workload a binding runs; `kind` forces one (tests, demos), else `choose_kind`."""
    kind = kind or choose_kind(seed, allocation)
    job_key = stable_key(seed, "job", allocation)
    unit_key = stable_key(seed, "unit-workload", allocation, unit)
    return _workload(kind, allocation, project, job_key, unit_key, unit_number)


def leftover_for(seed: int, unit: str) -> Workload | None:
    """The zombie process an unbound unit carries, for the seeded few that have one: left by
    a released allocation (it may still claim it) or started outside gpufleet."""
    key = stable_key(seed, "leftover", unit)
    if uniform(key, 0) >= UNBOUND_ZOMBIE_SHARE:
        return None
    stale = f"GR-{1000 + int(uniform(key, 1) * 9000)}" if uniform(key, 2) < 0.6 else None
    claims = Claims(stale)
    if stale is not None and uniform(key, 3) < 0.5:
        claims = Claims(stale, container="worker", pod=f"{stale.lower()}-worker-0",
                        namespace="default")
    return _workload(WorkloadKind.ZOMBIE, None, None, key, key, 0, claims)


def _workload(kind: WorkloadKind, allocation: str | None, project: str | None, job_key: int,
              unit_key: int, unit_number: int, claims: Claims | None = None) -> Workload:
    tensor = _TENSOR.get(kind, (0.2, 0.5))
    dram = (0.75, 1.1) if kind is WorkloadKind.INFERENCE else (0.5, 0.8)
    imma = between(job_key, 7, 0.0, 0.5) if kind is WorkloadKind.INFERENCE else 0.0
    processes = 2 if kind is WorkloadKind.INFERENCE and uniform(job_key, 8) < 0.4 else 1
    return Workload(
        kind=kind, allocation=allocation, job_key=job_key, unit_key=unit_key,
        claims=claims or _claims(kind, job_key, allocation, project, unit_number),
        mix=_mix(job_key, tensor=tensor, dram=dram, imma=imma),
        memory_share=between(job_key, 9, *_MEMORY_SHARE[kind]), process_count=processes)
