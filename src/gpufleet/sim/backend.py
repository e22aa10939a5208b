"""`SimBackend`: the agent's GPU backend for one simulated node.

It behaves like the hardware would towards the agent: `discover()` reports the node's
current inventory, and `apply_desired_state()` recreates MIG instances from a plan with
the plan's explicit placements — refusing, as the driver would, a layout the geometry does
not allow (checked with the domain's `layout_problems`, the same rules placement uses).
A refused state changes nothing: every plan is checked before any is applied.

It is also the node's `TelemetrySource`: `collect()` reads the node's units, with the
workloads its bindings run and the faults its GPUs have, as a `NodeSnapshot`
(`telemetry.py`). Time is an input, the `clock` or `collect(at=...)`, so a simulation can
run faster than real time; the same seed and time give the same snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from gpufleet.clock import Clock, SystemClock
from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigInstanceSpec, layout_problems
from gpufleet.wire.agent import DesiredState, GpuReport, MigPlan, NodeRegistration, UnitBinding
from gpufleet.wire.telemetry import NodeSnapshot

from .faults import DEFAULT_FAULT_RATE, FaultKind
from .fleet_spec import FleetSpec
from .mig_layouts import instance_reports
from .nodes import SimNode, build_standalone_node, iter_nodes
from .telemetry import Coverage, NodeTelemetry
from .workloads import WorkloadKind


class DesiredStateRejected(ValueError):
    """The desired state cannot be applied; `problems` says why, one line per reason."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def _by_start(specs) -> tuple[MigInstanceSpec, ...]:
    return tuple(sorted(specs, key=lambda s: (s.start, s.profile_id)))


def _layout(plan: MigPlan) -> tuple[MigInstanceSpec, ...]:
    return _by_start(MigInstanceSpec(i.profile_id, i.placement_start) for i in plan.instances)


def _current_layout(gpu: GpuReport) -> tuple[MigInstanceSpec, ...]:
    return _by_start(MigInstanceSpec(i.profile_id, i.placement_start or 0)
                     for i in gpu.mig_instances)


class SimBackend:
    """One simulated node. Not thread-safe: one agent drives one backend.

    Telemetry options: `clock` (default: the system clock, UTC), `seed` (default: the
    node's), `coverage` ("dcgm": every catalogue source; "nvml": NVML's alone), seeded
    faults at `fault_rate` or named ones (`faults`: GPU UUID → kinds), and forced workload
    kinds (`workloads`: allocation code → kind). Lifetime counters run from the first
    `collect()`; a new backend restarts them, which readers see as a counter reset.
    """

    name = "sim"

    def __init__(self, node: SimNode, *, clock: Clock | None = None,
                 seed: int | None = None, coverage: Coverage = "dcgm",
                 fault_rate: float = DEFAULT_FAULT_RATE,
                 faults: Mapping[str, Iterable[FaultKind]] | None = None,
                 workloads: Mapping[str, WorkloadKind] | None = None):
        self.node = node
        self._registration = node.registration
        self._generation: dict[str, int] = {}
        self.bindings: list[UnitBinding] = []
        self.applied_version: int | None = None
        self.clock = clock or SystemClock()
        self.telemetry = NodeTelemetry(node, seed=seed, coverage=coverage,
                                       fault_rate=fault_rate, faults=faults,
                                       workloads=workloads)

    def discover(self) -> NodeRegistration:
        return self._registration

    def collect(self, at: datetime | None = None) -> NodeSnapshot:
        """Every unit of the node now (or `at`, timezone-aware), with its processes."""
        return self.telemetry.snapshot(self._registration, self.bindings,
                                       self.clock.now() if at is None else at)

    def apply_desired_state(self, state: DesiredState) -> None:
        """Apply every MIG plan and record the bindings; DesiredStateRejected if any plan
        is invalid. Idempotent: a GPU already carrying its plan keeps its instances (and
        their MIG UUIDs); a changed layout is recreated with new MIG UUIDs."""
        gpus = {gpu.uuid.lower(): gpu for gpu in self._registration.gpus}
        problems = self._plan_problems(state.mig_plans, gpus)
        if problems:
            raise DesiredStateRejected(problems)
        for plan in state.mig_plans:
            gpu = gpus[plan.gpu_uuid.lower()]
            layout = _layout(plan)
            if gpu.mig_enabled and _current_layout(gpu) == layout:
                continue
            gpus[gpu.uuid.lower()] = self._recreated(gpu, layout)
        self._registration = self._registration.model_copy(
            update={"gpus": [gpus[g.uuid.lower()] for g in self._registration.gpus]})
        self.bindings = list(state.bindings)
        self.applied_version = state.version

    def _plan_problems(self, plans: list[MigPlan], gpus: dict[str, GpuReport]) -> list[str]:
        problems: list[str] = []
        geometry = self.node.shape.gpu.mig_geometry
        seen: set[str] = set()
        for plan in plans:
            key = plan.gpu_uuid.lower()
            if key not in gpus:
                problems.append(f"GPU {plan.gpu_uuid} is not on node {self.node.hostname}")
            elif key in seen:
                problems.append(f"GPU {plan.gpu_uuid} has two MIG plans")
            elif geometry is None:
                problems.append(f"GPU {plan.gpu_uuid} ({self.node.shape.gpu.model_key}) "
                                f"cannot do MIG")
            else:
                problems += [f"GPU {plan.gpu_uuid}: {p}"
                             for p in layout_problems(geometry, _layout(plan))]
            seen.add(key)
        return problems

    def _recreated(self, gpu: GpuReport, layout: tuple[MigInstanceSpec, ...]) -> GpuReport:
        """The GPU with MIG on and `layout`'s instances, as the driver recreates them.

        Enabling MIG on a GPU that had it off is allowed here: on a real node it needs an
        idle GPU and a reset, which the simulator has no reason to refuse."""
        generation = self._generation.get(gpu.uuid, 0) + 1
        self._generation[gpu.uuid] = generation
        geometry = self.node.shape.gpu.mig_geometry
        instances = instance_reports(
            geometry, layout, seed=self.node.seed,
            hostname=self.node.hostname, gpu_index=gpu.index,
            gpu_memory_bytes=self.node.shape.gpu.memory_bytes, generation=generation)
        return gpu.model_copy(update={"mig_enabled": True, "sharing_mode": SharingMode.MIG,
                                      "mig_instances": instances})


def standalone_backend(shape_name: str, hostname: str, seed: int = 0) -> SimBackend:
    """The backend of `gpufleet agent --backend sim --sim-shape SHAPE`."""
    return SimBackend(build_standalone_node(shape_name, hostname, seed))


def fleet_backends(spec: FleetSpec) -> list[SimBackend]:
    """One backend per node of the spec, in the spec's order."""
    return [SimBackend(node) for node in iter_nodes(spec)]
