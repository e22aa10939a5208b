"""Fleets to replay against: the openb node list, a fleet spec, or the live fleet's JSON.

- openb (`openb_node_list_gpu_node.csv`: sn, cpu_milli, memory_mib, gpu, model): every GPU
  is shared-mode, host CPU and memory are tracked, and a node takes at most 1001 tasks —
  the rules of the paper's simulator. Replays use `whole_gpus_from_shared`.
- a fleet spec (gpufleet.sim): the nodes `build_fleet` makes, with their MIG layouts,
  NVLink peers, sharing modes, host cores × 1000 milli-CPU and memory in MiB.
- the live fleet: the JSON the server serves (`FleetState.to_json`).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.domain.gpu_models import normalise_model
from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.placement import FleetState, GpuState, MigSlot, NodeState

from .errors import WhatifError

if TYPE_CHECKING:
    from gpufleet.sim.fleet_spec import FleetSpec

OPENB_MAX_TASKS = 1001
OPENB_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
MIB = 1024**2


def _int(value: str, what: str, where: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise WhatifError(f"{where}: {what} must be a whole number, not {value!r}") from None
    if number < 0:
        raise WhatifError(f"{where}: {what} cannot be negative ({number})")
    return number


def openb_fleet(path: str | Path) -> FleetState:
    """The openb node list as a fleet; WhatifError naming the file and line if malformed."""
    path = Path(path)
    try:
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
    except OSError as exc:
        raise WhatifError(f"{path}: cannot read the node list: {exc.strerror}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise WhatifError(f"{path}: not a CSV file: {exc}") from None
    if not rows or tuple(c.strip() for c in rows[0]) != OPENB_NODE_COLUMNS:
        raise WhatifError(f"{path}: expected the openb node list header "
                          f"{','.join(OPENB_NODE_COLUMNS)}")
    nodes, names = [], set()
    for line, row in enumerate(rows[1:], start=2):
        where = f"{path}:{line}"
        if not row:
            continue
        if len(row) != len(OPENB_NODE_COLUMNS):
            raise WhatifError(f"{where}: expected {len(OPENB_NODE_COLUMNS)} columns, "
                              f"got {len(row)}")
        name, cpu, memory, gpus, model = (c.strip() for c in row)
        if not name or name in names:
            raise WhatifError(f"{where}: node name {name!r} is empty or repeated")
        names.add(name)
        count = _int(gpus, "gpu", where)
        if count and not model:
            raise WhatifError(f"{where}: a node with GPUs names their model")
        nodes.append(NodeState(
            name, [GpuState(f"{name}/{i}", i, model, SharingMode.SHARED) for i in range(count)],
            cpu_milli_free=_int(cpu, "cpu_milli", where),
            memory_mib_free=_int(memory, "memory_mib", where), max_tasks=OPENB_MAX_TASKS))
    if not nodes:
        raise WhatifError(f"{path}: the node list has no nodes")
    return FleetState(nodes)


def fleet_from_spec(spec: FleetSpec) -> FleetState:
    """The nodes a fleet spec builds, as placement sees them: everything free."""
    from gpufleet.sim.nodes import build_fleet  # the simulator loads only when asked for

    nodes = []
    for sim_node in build_fleet(spec):
        registration = sim_node.registration
        default_mode = spec.environment(sim_node.environment).default_sharing_mode
        gpus = []
        for report in registration.gpus:
            model = normalise_model(report.name, report.pci_device_id).key
            gpus.append(GpuState(
                key=report.uuid, index=report.index, model=model,
                sharing_mode=report.sharing_mode or default_mode,
                mig_instances=[MigSlot(m.profile_id, m.placement_start)
                               for m in report.mig_instances],
                nvlink_peers=frozenset(report.nvlink_peers or ())))
        nodes.append(NodeState(
            registration.hostname, gpus, environment=sim_node.environment or "",
            cpu_milli_free=registration.cpu_cores * 1000,
            memory_mib_free=registration.memory_bytes // MIB))
    if not nodes:
        raise WhatifError("the fleet spec has no nodes")
    return FleetState(nodes)


def fleet_from_json(data: object, source: str = "the live fleet") -> FleetState:
    """The live fleet's JSON (`GET /api/v1/placement/fleet-state`) as a fleet."""
    try:
        return FleetState.from_json(data)  # type: ignore[arg-type]
    except ValueError as exc:
        raise WhatifError(f"{source}: {exc}") from None
