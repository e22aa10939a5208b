"""Telemetry of a simulated node: its inventory, bindings, workloads and faults become one
`NodeSnapshot` (wire.telemetry), in catalogue units, as a real backend would read it.

Per unit, the workload (`workloads.py`) gives engine activity, memory and processes; per
GPU, physics turns the activity into power (capped at the power limit), temperature
(rising with power, higher on a GPU that cools badly), clocks (boost when busy, idle clock
when not, lower when throttled) and throttle-reason flags (the catalogue's
`CLOCK_THROTTLE_REASON_BITS`); the GPU's faults (`faults.py`) give its health counters.

What is reported follows the metric catalogue: a metric appears only on architectures
where its source exists (`coverage`: "dcgm" models DCGM-like full coverage, any source of
the row; "nvml" only what NVML offers, so no GPM metric before Hopper), a MIG instance
carries only per-MIG metrics, and device-only metrics sit on the parent GPU. Where a GPU
has no such part (no NVLink, no HBM sensor, no fan) the value is None: "cannot say".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cache
from typing import Literal

from gpufleet.domain.gpu_models import model
from gpufleet.domain.mig import mig_unit_name
from gpufleet.domain.telemetry.catalogue import CATALOGUE
from gpufleet.domain.telemetry.catalogue_rows_health import CLOCK_THROTTLE_REASON_BITS
from gpufleet.domain.telemetry.vocabulary import ALL_ARCHITECTURES, Architecture, architecture_of
from gpufleet.wire.agent import GpuReport, NodeRegistration, UnitBinding
from gpufleet.wire.telemetry import NodeSnapshot

from .faults import DEFAULT_FAULT_RATE, FaultKind, FaultState, GpuFaults, faults_for
from .ids import stable_key
from .nodes import SimNode
from .workloads import (
    IDLE,
    IDLE_LOAD,
    Activity,
    ProcessLoad,
    UnitLoad,
    Workload,
    WorkloadKind,
    between,
    leftover_for,
    smooth,
    uniform,
    workload_for,
)

Coverage = Literal["dcgm", "nvml"]
COVERAGES: tuple[Coverage, ...] = ("dcgm", "nvml")

_REASON_BIT = {reason: bit for bit, reason in CLOCK_THROTTLE_REASON_BITS.items()}
GPU_IDLE = _REASON_BIT["gpu_idle"]
SW_POWER_CAP = _REASON_BIT["sw_power_cap"]
SW_THERMAL_SLOWDOWN = _REASON_BIT["sw_thermal_slowdown"]
HW_THERMAL_SLOWDOWN = _REASON_BIT["hw_thermal_slowdown"]

_ACTIVITY = (
    ("gpu.gr_engine_active", "gr_engine"), ("gpu.sm_active", "sm"),
    ("gpu.sm_occupancy", "occupancy"), ("gpu.tensor_active", "tensor"),
    ("gpu.tensor_hmma_active", "hmma"), ("gpu.tensor_imma_active", "imma"),
    ("gpu.tensor_dfma_active", "dfma"), ("gpu.fp64_active", "fp64"),
    ("gpu.fp32_active", "fp32"), ("gpu.fp16_active", "fp16"),
    ("gpu.integer_active", "integer"), ("gpu.dram_active", "dram"),
)
_PERCENT_CAP = {name: (1.0 if name.endswith("_share") else 100.0) for name in Activity.__slots__}


@dataclass(frozen=True)
class GpuPhysics:
    """What a board does with work: power, clocks, heat and links (vendor spec sheets; idle
    figures as nvidia-smi shows them on an idle board in persistence mode)."""

    power_limit_w: float
    idle_power_w: float
    boost_sm_mhz: int
    idle_sm_mhz: int
    memory_mhz: int
    hbm: bool  # HBM boards have a memory temperature sensor; GDDR boards report none
    nvlink_links: int
    nvlink_link_bytes_per_s: float  # one direction of one link
    pcie_bytes_per_s: float  # one direction
    temperature_rise_c: float  # core above inlet at full power
    slowdown_c: float  # software thermal slowdown begins
    reserved_share: float = 0.0065  # of memory, kept by the driver and firmware
    fan: bool = False  # datacenter boards are passively cooled


_H100_SXM = GpuPhysics(700, 70, 1980, 345, 2619, True, 18, 25e9, 64e9, 45, 87)
_A100_SXM = GpuPhysics(400, 55, 1410, 210, 1593, True, 12, 25e9, 32e9, 42, 87)
PHYSICS: dict[str, GpuPhysics] = {
    "H100-80GB": _H100_SXM,
    "H100-NVL-94GB": replace(_H100_SXM, power_limit_w=400, idle_power_w=60, boost_sm_mhz=1785),
    "H200-141GB": replace(_H100_SXM, memory_mhz=3201),
    "A100-80GB": _A100_SXM,
    "A100-40GB": replace(_A100_SXM, idle_power_w=50, memory_mhz=1215),
    "A30-24GB": GpuPhysics(165, 30, 1440, 210, 1215, True, 4, 25e9, 32e9, 45, 87),
    "L40S-48GB": GpuPhysics(350, 35, 2520, 210, 9001, False, 0, 0.0, 32e9, 50, 88),
    "L40-48GB": GpuPhysics(300, 35, 2490, 210, 9001, False, 0, 0.0, 32e9, 50, 88),
    "L4-24GB": GpuPhysics(72, 16, 2040, 210, 6251, False, 0, 0.0, 32e9, 45, 85),
    "A10-24GB": GpuPhysics(150, 25, 1695, 210, 6251, False, 0, 0.0, 32e9, 48, 87),
    "T4-16GB": GpuPhysics(70, 10, 1590, 300, 5001, False, 0, 0.0, 16e9, 48, 85),
    "V100-SXM2-32GB": GpuPhysics(300, 45, 1530, 135, 877, True, 6, 25e9, 16e9, 42, 87),
}
# PCIe boards of an SXM model key: lower power, no NVLink bridge assumed.
PHYSICS_BY_NVML_NAME: dict[str, GpuPhysics] = {
    "NVIDIA A100 80GB PCIe": replace(_A100_SXM, power_limit_w=300, idle_power_w=45,
                                     memory_mhz=1512),
    "NVIDIA H100 PCIe": replace(_H100_SXM, power_limit_w=350, idle_power_w=50,
                                boost_sm_mhz=1755, memory_mhz=1593, pcie_bytes_per_s=64e9),
}
_GENERIC = GpuPhysics(300, 45, 1700, 300, 1600, True, 0, 0.0, 32e9, 45, 87)


def physics_of(model_key: str, nvml_name: str = "") -> GpuPhysics:
    return PHYSICS_BY_NVML_NAME.get(nvml_name) or PHYSICS.get(model_key) or _GENERIC


# --- which metrics a source offers ------------------------------------------------------

def _source_offers(row, architecture: Architecture | None, coverage: Coverage,
                   mig: bool) -> bool:
    sources = (row.nvml,) if coverage == "nvml" else (row.nvml, row.dcgm)
    for source in sources:
        if source is None:
            continue
        known = ALL_ARCHITECTURES if architecture is None else {architecture}
        if not known <= source.architectures:
            continue
        if mig and not (row.per_mig and (coverage == "dcgm" or source.per_mig)):
            continue
        return True
    return False


@cache
def offered(architecture: Architecture | None, coverage: Coverage = "dcgm",
            mig: bool = False) -> frozenset[str]:
    """The catalogue metrics the modelled source reads on a GPU of `architecture` (None: an
    architecture the catalogue does not know, so only what every architecture has), on
    the GPU itself or, with `mig`, on one of its MIG instances."""
    return frozenset(row.name for row in CATALOGUE
                     if _source_offers(row, architecture, coverage, mig))


# --- one GPU -------------------------------------------------------------------------------

@dataclass
class _Gpu:
    """What stays put about one GPU between ticks, and its running energy counter."""

    uuid: str
    key: int
    physics: GpuPhysics
    architecture: Architecture | None
    faults: GpuFaults
    inlet_c: float
    links: int
    link_weights: tuple[float, ...]
    energy_j: float
    last_power_w: float | None = None
    ampere_or_newer: bool = field(init=False)

    def __post_init__(self) -> None:
        self.ampere_or_newer = self.architecture in Architecture.since(Architecture.AMPERE)


def _architecture(model_key: str) -> Architecture | None:
    found = model(model_key)
    return architecture_of(found.architecture) if found else None


@dataclass(frozen=True, slots=True)
class _Physical:
    """A GPU's physical readings at one instant."""

    power_w: float
    power_limit_w: float
    temperature_c: float
    sm_clock_mhz: int
    flags: int


def _physical(gpu: _Gpu, a: Activity, faults: FaultState, t_s: float) -> _Physical:
    p = gpu.physics
    tdp, idle = p.power_limit_w, p.idle_power_w
    limit = tdp * faults.power_limit_share
    # Percent to share, scaled so a typical training mix draws ~90 % of the board's TDP.
    demand = min(1.05, (0.25 * a.gr_engine + 0.45 * a.sm + 0.30 * max(a.tensor, a.dram))
                 * 0.0112)
    wobble = smooth(gpu.key, t_s, 30.0) - 0.5
    power = idle * (1.0 + 0.04 * wobble) + (tdp - idle) * demand * (1.0 + 0.03 * wobble)
    busy = a.gr_engine >= 0.5
    flags = 0 if busy else GPU_IDLE
    clock = float(p.boost_sm_mhz if busy else p.idle_sm_mhz)
    if power > limit:
        clock *= max(0.6, ((limit - idle) / (power - idle)) ** 0.5)
        power = limit * (0.99 + 0.01 * smooth(gpu.key ^ 1, t_s, 5.0))
        flags |= SW_POWER_CAP
    load = min(1.0, max(0.0, (power - idle) / (tdp - idle)))
    temperature = gpu.inlet_c + 6.0 + p.temperature_rise_c * load \
        + faults.temperature_offset_c * (0.5 + 0.5 * load)
    if temperature >= p.slowdown_c:
        flags |= SW_THERMAL_SLOWDOWN
        clock *= 0.8
        power = idle + (power - idle) * 0.85
        if temperature >= p.slowdown_c + 3.0:
            flags |= HW_THERMAL_SLOWDOWN
            clock *= 0.8
        temperature = min(temperature, p.slowdown_c + 5.0)
    return _Physical(round(power, 3), round(limit, 3), float(round(temperature)),
                     int(clock), flags)


def _activity_values(a: Activity, offer: frozenset[str], values: dict) -> None:
    for name, attribute in _ACTIVITY:
        if name in offer:
            values[name] = round(getattr(a, attribute), 2)


def _memory_values(used: int, total: int, reserved: int, offer: frozenset[str],
                   values: dict) -> None:
    used = min(used, total - reserved)
    for name, value in (("gpu.memory_used_bytes", used), ("gpu.memory_total_bytes", total),
                        ("gpu.memory_reserved_bytes", reserved),
                        ("gpu.memory_free_bytes", total - reserved - used)):
        if name in offer:
            values[name] = float(value)


def _process(p: ProcessLoad, offer: frozenset[str]) -> dict:
    values = {}
    if "process.memory_used_bytes" in offer:
        values["process.memory_used_bytes"] = float(p.memory_used_bytes)
    if "process.sm_utilization" in offer:
        values["process.sm_utilization"] = float(round(p.sm_utilization))
    found = {"pid": p.pid, "name": p.name, "values": values}
    for claim in ("claimed_allocation", "container", "pod", "namespace", "slurm_job"):
        if (value := getattr(p, claim)) is not None:
            found[claim] = value
    if p.tags:
        found["tags"] = dict(p.tags)
    return found


def _combine(loads: Sequence[UnitLoad], weights: Sequence[float] | None = None) -> Activity:
    """Several units' (or tenants') activity as one: a weighted sum, capped."""
    if len(loads) == 1 and weights is None:
        return loads[0].activity
    combined = {}
    for name, cap in _PERCENT_CAP.items():
        total = 0.0
        for number, load in enumerate(loads):
            total += getattr(load.activity, name) * (1.0 if weights is None else weights[number])
        combined[name] = min(cap, total)
    return Activity(**combined)


# --- the node -----------------------------------------------------------------------------

BindingKey = tuple  # ("gpu", uuid) or ("mig", uuid, profile id, placement start)


def binding_key(binding: UnitBinding) -> BindingKey:
    uuid = binding.gpu_uuid.lower()
    if binding.mig_profile_id is not None:
        return ("mig", uuid, binding.mig_profile_id, binding.placement_start or 0)
    return ("gpu", uuid)


class NodeTelemetry:
    """The telemetry model of one simulated node; keeps the node's running counters.

    `seed` drives everything (workload kinds, signal phases, faults). `faults` names the
    faults of given GPUs (UUID → kinds) instead of the seeded draw at `fault_rate`;
    `workloads` forces the kind of given allocations (code → kind). Counters start when the
    first snapshot is taken (or at `started_at`): a new NodeTelemetry is a counter reset.
    """

    def __init__(self, node: SimNode, *, seed: int | None = None, coverage: Coverage = "dcgm",
                 fault_rate: float = DEFAULT_FAULT_RATE,
                 faults: Mapping[str, Iterable[FaultKind]] | None = None,
                 workloads: Mapping[str, WorkloadKind] | None = None,
                 started_at: datetime | None = None):
        if coverage not in COVERAGES:
            raise ValueError(f"coverage must be one of {', '.join(COVERAGES)}")
        self.node = node
        self.seed = node.seed if seed is None else seed
        self.coverage: Coverage = coverage
        self.fault_rate = fault_rate
        self._forced_faults = {uuid.lower(): tuple(kinds) for uuid, kinds in (faults or {}).items()}
        self._forced_kinds = dict(workloads or {})
        self._onsets: dict[str, float] = {}
        # GPU → the MIG instance its contained errors (XID 94) strike (`strike(mig_uuid=)`)
        self._contained_on: dict[str, str] = {}
        self._gpus: dict[str, _Gpu] = {}
        self._workloads: dict[tuple[str, str], Workload] = {}
        self._leftovers: dict[str, Workload | None] = {}
        self._started_s = started_at.timestamp() if started_at is not None else None
        self._latest_s: float | None = None
        self._inlet_c = between(stable_key(self.seed, node.hostname, "inlet"), 0, 21.0, 29.0)

    def snapshot(self, registration: NodeRegistration, bindings: Sequence[UnitBinding],
                 at: datetime) -> NodeSnapshot:
        """Every unit of the node at `at` (timezone-aware), given its current bindings."""
        t_s = at.timestamp()
        if self._started_s is None:
            self._started_s = t_s
        counter_s = t_s if self._latest_s is None else max(t_s, self._latest_s)
        dt_s = 0.0 if self._latest_s is None else counter_s - self._latest_s
        self._latest_s = counter_s
        elapsed_s = max(0.0, counter_s - self._started_s)
        bound: dict[BindingKey, list[UnitBinding]] = {}
        for binding in bindings:
            bound.setdefault(binding_key(binding), []).append(binding)
        units: list[dict] = []
        problems: list[str] = []
        for gpu in registration.gpus:
            units += self._gpu_units(gpu, bound, t_s, elapsed_s, dt_s, problems)
        if len(self._workloads) > 2 * len(bindings) + 64:  # released bindings: forget them
            current = {(b.allocation, b.unit) for b in bindings}
            self._workloads = {k: w for k, w in self._workloads.items() if k in current}
        return NodeSnapshot.model_validate({
            "node": registration.hostname, "at": at, "backend": "sim", "units": units,
            "problems": problems})

    def force_workload(self, allocation: str, kind: WorkloadKind) -> None:
        """Allocation `allocation` runs `kind` from its next unit on (as `workloads` does
        for allocations known when the node is built)."""
        self._forced_kinds[allocation] = kind

    def strike(self, gpu_uuid: str, kinds: Iterable[FaultKind], at: datetime, *,
               mig_uuid: str | None = None) -> None:
        """From `at` on, GPU `gpu_uuid` has faults `kinds`, their first events (XIDs) at
        `at`: a fault on a schedule, for demos and tests, instead of hours in.

        `mig_uuid`: the GPU's MIG instance whose memory the errors hit. Its contained
        errors (XID 94) are counted on that instance's series, as the agent files an NVML
        event that names a GPU instance; everything else stays the GPU's."""
        uuid = gpu_uuid.lower()
        if mig_uuid is not None:
            self._contained_on[uuid] = mig_uuid
        self._forced_faults[uuid] = tuple(kinds)
        started = self._started_s if self._started_s is not None else at.timestamp()
        self._onsets[uuid] = max(0.0, at.timestamp() - started)
        found = self._gpus.get(uuid)
        if found is not None:
            found.faults = faults_for(self.seed, uuid, kinds=self._forced_faults[uuid],
                                      onset_s=self._onsets[uuid])

    # -- loads ---------------------------------------------------------------------------

    def _workload(self, binding: UnitBinding, unit_number: int) -> Workload:
        cache_key = (binding.allocation, binding.unit)
        found = self._workloads.get(cache_key)
        if found is None:
            found = workload_for(self.seed, binding.allocation, binding.project, binding.unit,
                                 unit_number, self._forced_kinds.get(binding.allocation))
            self._workloads[cache_key] = found
        return found

    def _loads(self, unit: str, bindings: list[UnitBinding] | None, memory_bytes: int,
               t_s: float, unit_number: int) -> list[UnitLoad]:
        if not bindings:
            if unit not in self._leftovers:
                self._leftovers[unit] = leftover_for(self.seed, unit)
            leftover = self._leftovers[unit]
            return [IDLE_LOAD if leftover is None else leftover.load(t_s, memory_bytes)]
        loads = []
        for binding in bindings:
            share = memory_bytes if binding.milli is None \
                else memory_bytes * binding.milli // 1000
            loads.append(self._workload(binding, unit_number).load(t_s, share))
        return loads

    # -- one GPU -------------------------------------------------------------------------

    def _gpu(self, report: GpuReport) -> _Gpu:
        uuid = report.uuid.lower()
        found = self._gpus.get(uuid)
        if found is not None:
            return found
        shape = self.node.shape.gpu
        physics = physics_of(shape.model_key, report.name)
        links = physics.nvlink_links if report.nvlink_peers else 0
        key = stable_key(self.seed, "gpu", uuid)
        faults = faults_for(self.seed, uuid, rate=self.fault_rate, has_nvlink=links > 0,
                            kinds=self._forced_faults.get(uuid),
                            onset_s=self._onsets.get(uuid))
        raw = [0.9 + 0.2 * uniform(key, 10 + link) for link in range(links)]
        weights = tuple(w * links / sum(raw) for w in raw) if links else ()
        uptime_s = between(key, 1, 1.0, 60.0) * 86400.0
        found = _Gpu(
            uuid=report.uuid, key=key, physics=physics,
            architecture=_architecture(shape.model_key), faults=faults,
            inlet_c=self._inlet_c + between(key, 2, 0.0, 4.0), links=links,
            link_weights=weights,
            energy_j=round(uptime_s * physics.idle_power_w * between(key, 3, 1.5, 4.0)))
        self._gpus[uuid] = found
        return found

    def _gpu_units(self, report: GpuReport, bound: dict[BindingKey, list[UnitBinding]],
                   t_s: float, elapsed_s: float, dt_s: float, problems: list[str]) -> list[dict]:
        gpu = self._gpu(report)
        faults = gpu.faults.state(elapsed_s, ampere_or_newer=gpu.ampere_or_newer)
        device_offer = offered(gpu.architecture, self.coverage)
        mig_offer = offered(gpu.architecture, self.coverage, True)
        total = report.memory_bytes or self.node.shape.gpu.memory_bytes
        reserved = int(total * gpu.physics.reserved_share)
        uuid = report.uuid.lower()
        if faults.lost:
            problems.append(f"{report.uuid}: GPU is lost (XID 79, fallen off the bus); "
                            f"nothing can be read from it")
            return self._lost_units(gpu, report, faults, device_offer, mig_offer)
        mig_units: list[dict] = []
        if report.mig_enabled:
            activity, used, processes = self._mig(report, bound, t_s, mig_units, mig_offer)
        else:
            loads = self._loads(report.uuid, bound.get(("gpu", uuid)), total - reserved, t_s,
                                report.index)
            activity = _combine(loads)
            used = sum(load.memory_used_bytes for load in loads)
            processes = [_process(p, device_offer) for load in loads for p in load.processes]
        values: dict[str, float | None] = {}
        _activity_values(activity, device_offer, values)
        if "gpu.utilization" in device_offer:
            values["gpu.utilization"] = None if report.mig_enabled \
                else round(activity.utilization, 2)
        _memory_values(used, total, reserved, device_offer, values)
        labelled = self._device_values(gpu, activity, faults, t_s, dt_s, device_offer, values)
        if uuid in self._contained_on:
            labelled = _file_contained(labelled, mig_units, self._contained_on[uuid])
        parent = {"gpu_uuid": report.uuid, "values": values, "labelled": labelled,
                  "processes": processes}
        return [parent, *mig_units]

    def _mig(self, report: GpuReport, bound: dict, t_s: float, units: list[dict],
             offer: frozenset[str]) -> tuple[Activity, int, list]:
        geometry = self.node.shape.gpu.mig_geometry
        uuid = report.uuid.lower()
        loads: list[UnitLoad] = []
        weights: list[float] = []
        for number, instance in enumerate(report.mig_instances):
            memory = instance.memory_bytes or 0  # set on every simulated instance
            start = instance.placement_start or 0
            unit = mig_unit_name(report.uuid, instance.profile_id, start)
            load = _combine_loads(self._loads(
                unit, bound.get(("mig", uuid, instance.profile_id, start)), memory, t_s,
                report.index * 8 + number))
            profile = geometry.profile(instance.profile_id) if geometry else None
            weights.append(profile.compute_slices / geometry.compute_slices_total
                           if profile else 1.0 / max(1, len(report.mig_instances)))
            loads.append(load)
            values: dict[str, float | None] = {}
            _activity_values(load.activity, offer, values)
            _memory_values(load.memory_used_bytes, memory, 0, offer, values)
            units.append({"gpu_uuid": report.uuid, "mig_uuid": instance.mig_uuid,
                          "mig_profile": instance.profile_name,
                          "gpu_instance_id": instance.gpu_instance_id, "values": values,
                          "processes": [_process(p, offer) for p in load.processes]})
        if not loads:
            return IDLE, 0, []
        activity = replace(_combine(loads, weights), nvlink_share=0.0)  # MIG: no NVLink P2P
        return activity, sum(load.memory_used_bytes for load in loads), []

    def _device_values(self, gpu: _Gpu, a: Activity, f: FaultState, t_s: float, dt_s: float,
                       offer: frozenset[str], values: dict) -> list[dict]:
        """Power, heat, clocks, traffic and health of the GPU itself; returns the series
        that carry a label of their own (XID codes, NVLink links)."""
        p = gpu.physics
        reading = _physical(gpu, a, f, t_s)
        if gpu.last_power_w is not None and dt_s > 0:
            gpu.energy_j += (gpu.last_power_w + reading.power_w) * 0.5 * dt_s
        gpu.last_power_w = reading.power_w
        has_nvlink = gpu.links > 0
        link_total = p.nvlink_link_bytes_per_s * gpu.links * a.nvlink_share
        found = {
            "gpu.power_usage_watts": reading.power_w,
            "gpu.power_limit_watts": reading.power_limit_w,
            "gpu.energy_joules_total": round(gpu.energy_j, 3),
            "gpu.temperature_celsius": reading.temperature_c,
            "gpu.memory_temperature_celsius":
                reading.temperature_c + round(3.0 + 8.0 * a.dram / 100.0) if p.hbm else None,
            "gpu.fan_speed_percent": None,
            "gpu.sm_clock_mhz": float(reading.sm_clock_mhz),
            "gpu.graphics_clock_mhz": float(reading.sm_clock_mhz),
            "gpu.memory_clock_mhz": float(p.memory_mhz),
            "gpu.clock_throttle_reasons": float(reading.flags),
            "gpu.pcie_tx_bytes_per_second": round(5e4 + p.pcie_bytes_per_s * a.pcie_tx_share),
            "gpu.pcie_rx_bytes_per_second": round(8e4 + p.pcie_bytes_per_s * a.pcie_rx_share),
            "gpu.nvlink_tx_bytes_per_second": round(link_total) if has_nvlink else None,
            "gpu.nvlink_rx_bytes_per_second": round(link_total * 0.99) if has_nvlink else None,
            **_health_values(f, has_nvlink),
        }
        if p.fan:
            found["gpu.fan_speed_percent"] = float(round(30.0 + 0.6 * (reading.temperature_c
                                                                         - gpu.inlet_c)))
        for name, value in found.items():
            if name in offer:
                values[name] = None if value is None else float(value)
        labelled = []
        if "gpu.xid_errors_total" in offer:
            labelled += [{"metric": "gpu.xid_errors_total", "labels": {"xid": str(code)},
                          "value": float(count)} for code, count in f.xid_counts]
        if has_nvlink:
            labelled += _links(gpu, link_total, offer)
        return labelled

    def _lost_units(self, gpu: _Gpu, report: GpuReport, f: FaultState,
                    device_offer: frozenset[str], mig_offer: frozenset[str]) -> list[dict]:
        """A GPU off the bus reads nothing; the reader still knows the XIDs it saw."""
        gpu.last_power_w = None
        values: dict[str, float | None] = dict.fromkeys(
            name for name in sorted(device_offer - _LABELLED) if name.startswith("gpu."))
        if "gpu.xid_last_code" in values:
            values["gpu.xid_last_code"] = float(f.xid_last_code)
        labelled = [{"metric": "gpu.xid_errors_total", "labels": {"xid": str(code)},
                     "value": float(count)} for code, count in f.xid_counts]
        units = [{"gpu_uuid": report.uuid, "values": values, "labelled": labelled}]
        mig_values = dict.fromkeys(name for name in sorted(mig_offer) if name.startswith("gpu."))
        units += [{"gpu_uuid": report.uuid, "mig_uuid": i.mig_uuid,
                   "mig_profile": i.profile_name, "gpu_instance_id": i.gpu_instance_id,
                   "values": dict(mig_values)} for i in report.mig_instances]
        return units


CONTAINED_XID = 94  # a contained uncorrectable error: its GPU instance alone is hit
_LABELLED = frozenset({"gpu.xid_errors_total", "gpu.nvlink_link_tx_bytes_per_second",
                       "gpu.nvlink_link_rx_bytes_per_second"})


def _file_contained(labelled: list[dict], mig_units: list[dict], mig_uuid: str) -> list[dict]:
    """Move the GPU's contained-error XID series onto instance `mig_uuid`'s unit; left on
    the GPU when the GPU has no such instance (the reader could not name it)."""
    target = next((u for u in mig_units if u["mig_uuid"] == mig_uuid), None)
    if target is None:
        return labelled
    moved = [x for x in labelled if x["metric"] == "gpu.xid_errors_total"
             and x["labels"].get("xid") == str(CONTAINED_XID)]
    target["labelled"] = [*target.get("labelled", []), *moved]
    return [x for x in labelled if not any(x is m for m in moved)]


def _combine_loads(loads: list[UnitLoad]) -> UnitLoad:
    if len(loads) == 1:
        return loads[0]
    return UnitLoad(_combine(loads), sum(load.memory_used_bytes for load in loads),
                    tuple(p for load in loads for p in load.processes))


def _health_values(f: FaultState, has_nvlink: bool) -> dict[str, float | None]:
    def nvlink(count: int) -> float | None:
        return float(count) if has_nvlink else None

    return {
        "gpu.xid_last_code": float(f.xid_last_code),
        "gpu.ecc_corrected_errors_total": float(f.ecc_corrected),
        "gpu.ecc_uncorrected_errors_total": float(f.ecc_uncorrected),
        "gpu.remapped_rows_correctable_total": float(f.remapped_correctable),
        "gpu.remapped_rows_uncorrectable_total": float(f.remapped_uncorrectable),
        "gpu.remapped_rows_pending": float(f.remap_pending),
        "gpu.remapped_rows_failed": float(f.remap_failed),
        "gpu.pcie_replays_total": float(f.pcie_replays),
        "gpu.nvlink_crc_flit_errors_total": nvlink(f.nvlink_crc_flit),
        "gpu.nvlink_crc_data_errors_total": nvlink(f.nvlink_crc_data),
        "gpu.nvlink_replay_errors_total": nvlink(f.nvlink_replay),
        "gpu.nvlink_recovery_errors_total": nvlink(f.nvlink_recovery),
    }


_LINK_LABELS = tuple({"link": str(link)} for link in range(18))


def _links(gpu: _Gpu, total_bytes_per_s: float, offer: frozenset[str]) -> list[dict]:
    per_link = total_bytes_per_s / gpu.links
    found = []
    for direction, ratio in (("tx", 1.0), ("rx", 0.99)):
        name = f"gpu.nvlink_link_{direction}_bytes_per_second"
        if name in offer:
            found += [{"metric": name, "labels": _LINK_LABELS[link],
                       "value": per_link * ratio * weight}
                      for link, weight in enumerate(gpu.link_weights)]
    return found
