"""Small fleets for the placement tests: nodes of N GPUs in one mode, by hand."""

from __future__ import annotations

from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.placement import FleetState, GpuState, MigSlot, NodeState

EXCLUSIVE, SHARED, MIG = SharingMode.EXCLUSIVE, SharingMode.SHARED, SharingMode.MIG


def node(name: str, gpus: int = 4, mode: SharingMode = EXCLUSIVE, model: str = "H100-80GB",
         *, environment: str = "onprem", cpu: int | None = None, memory: int | None = None,
         max_tasks: int | None = None, nvlink: list[list[int]] | None = None,
         mig: list[list[tuple[int, int, bool]]] | None = None, schedulable: bool = True,
         used: list[int] | None = None) -> NodeState:
    """A node `name` with GPUs keyed `name/0`, `name/1`, ...

    `nvlink` lists groups of indexes connected all-to-all; `mig` gives each GPU's
    instances as (profile id, start, bound); `used` each shared GPU's used milli.
    """
    states = []
    for index in range(gpus):
        peers = frozenset(f"{name}/{j}" for group in (nvlink or []) if index in group
                          for j in group if j != index)
        slots = [MigSlot(*s) for s in mig[index]] if mig else []
        states.append(GpuState(f"{name}/{index}", index, model, mode, mig_instances=slots,
                               nvlink_peers=peers,
                               used_milli=used[index] if used else 0))
    return NodeState(name, states, environment=environment, schedulable=schedulable,
                     cpu_milli_free=cpu, memory_mib_free=memory, max_tasks=max_tasks)


def fleet(*nodes: NodeState) -> FleetState:
    return FleetState(nodes)
