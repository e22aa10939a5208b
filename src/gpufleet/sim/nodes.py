"""Building simulated nodes: a shape, a hostname and a seed become a `NodeRegistration`.

The registration is exactly what a real agent would send for that hardware (see
`shapes.py` for where the figures come from), so the server cannot tell a simulated node
from a real one — the point of the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.mig import MigInstanceSpec
from gpufleet.wire.agent import GpuReport, NodeRegistration

from . import ids
from .fleet_spec import FleetSpec, NodeGroupSpec
from .mig_layouts import instance_reports, resolve_layout
from .shapes import Shape, shape_named

MigLayout = tuple[MigInstanceSpec, ...]


@dataclass(frozen=True)
class SimNode:
    """One simulated host: what it is (shape), where it goes (environment) and what its
    agent reports at start (registration)."""

    hostname: str
    environment: str | None
    shape: Shape
    seed: int
    registration: NodeRegistration

    @property
    def gpu_count(self) -> int:
        return len(self.registration.gpus)


def _gpu(shape: Shape, hostname: str, seed: int, index: int, uuids: Sequence[str],
         sharing_mode: SharingMode | None, layout: MigLayout | None) -> GpuReport:
    domain = shape.nvlink_domain_of(index)
    geometry = shape.gpu.mig_geometry
    mig_instances = []
    if layout is not None and geometry is not None:
        mig_instances = instance_reports(geometry, layout, seed=seed, hostname=hostname,
                                         gpu_index=index, gpu_memory_bytes=shape.gpu.memory_bytes)
    return GpuReport(
        uuid=uuids[index],
        index=index,
        name=shape.gpu.nvml_name,
        pci_device_id=shape.gpu.pci_device_id,
        pci_bus_id=shape.pci_bus_ids[index],
        memory_bytes=shape.gpu.memory_bytes,
        driver_version=shape.driver_version,
        mig_enabled=layout is not None,
        sharing_mode=SharingMode.MIG if layout is not None else sharing_mode,
        nvlink_peers=[uuids[i] for i in domain if i != index] if domain else None,
        mig_instances=mig_instances,
    )


def build_node(shape: Shape, hostname: str, *, seed: int, environment: str | None = None,
               labels: Mapping[str, str] | None = None, sharing_mode: SharingMode | None = None,
               mig_layouts: Sequence[MigLayout | None] | None = None) -> SimNode:
    """A node of `shape`. `mig_layouts` holds one entry per GPU: a layout makes that GPU
    MIG-enabled (an empty layout: enabled, no instances yet); None leaves MIG off.
    `sharing_mode` is what non-MIG GPUs report; None defers to the environment's default."""
    layouts = list(mig_layouts) if mig_layouts is not None else [None] * shape.gpu_count
    if len(layouts) != shape.gpu_count:
        raise ValueError(f"{len(layouts)} MIG layouts given for {shape.gpu_count} GPUs")
    uuids = [ids.gpu_uuid(seed, hostname, i) for i in range(shape.gpu_count)]
    gpus = [_gpu(shape, hostname, seed, i, uuids, sharing_mode, layouts[i])
            for i in range(shape.gpu_count)]
    registration = NodeRegistration(
        machine_id=ids.machine_id(seed, hostname),
        hostname=hostname,
        cpu_cores=shape.cpu_cores,
        memory_bytes=shape.memory_bytes,
        labels=dict(labels or {}),
        backend="sim",
        applies_mig_plans=True,
        os_name=shape.os_name,
        driver_version=shape.driver_version,
        cuda_version=shape.cuda_version,
        gpus=gpus,
    )
    return SimNode(hostname, environment, shape, seed, registration)


def _group_layouts(spec: FleetSpec, group: NodeGroupSpec, number: int,
                   hostname: str) -> list[MigLayout | None] | None:
    if spec.sharing_mode(group) is not SharingMode.MIG:
        return None
    choices = group.resolved_layouts
    gpus = group.shape_info.gpu_count
    if not choices:
        return [() for _ in range(gpus)]
    if group.mig_layout_assignment == "random":
        rng = ids.rng(spec.seed, hostname, "mig-layouts")
        return [rng.choice(choices) for _ in range(gpus)]
    return [choices[(number * gpus + i) % len(choices)] for i in range(gpus)]


def iter_nodes(spec: FleetSpec) -> Iterator[SimNode]:
    """Every node of the spec, group by group, in a stable order."""
    for group in spec.node_groups:
        for number in range(group.count):
            hostname = group.hostname(number)
            yield build_node(group.shape_info, hostname, seed=spec.seed,
                             environment=group.environment, labels=group.node_labels(number),
                             sharing_mode=group.sharing_mode,
                             mig_layouts=_group_layouts(spec, group, number, hostname))


def build_fleet(spec: FleetSpec) -> list[SimNode]:
    return list(iter_nodes(spec))


def build_standalone_node(shape_name: str, hostname: str, seed: int = 0,
                          labels: Mapping[str, str] | None = None) -> SimNode:
    """One node outside any spec (`gpufleet agent --backend sim --sim-shape dgx-h100`).

    A MIG node shape comes up with its own layouts, one per GPU in turn. The environment is
    whatever the join token says, so none is set here.
    """
    shape = shape_named(shape_name)
    layouts = None
    if shape.mig_layouts and shape.gpu.mig_geometry is not None:
        resolved = [resolve_layout(shape.gpu.mig_geometry, layout) for layout in shape.mig_layouts]
        layouts = [resolved[i % len(resolved)] for i in range(shape.gpu_count)]
    labels = {**({"instance-type": shape.instance_type} if shape.instance_type else {}),
              **(labels or {})}
    return build_node(shape, hostname, seed=seed, labels=labels, mig_layouts=layouts)
