"""A real node's backend for the agent: an inventory (`discover`) and a telemetry source
(`collect`) that never change the GPUs.

The `nvml` and `dcgm-exporter` backends read; neither creates MIG instances. The server's
desired state still reaches them: its bindings need nothing done on the node, and a MIG
plan that matches the layout the node already has is applied by definition. A plan asking
for another layout is refused with what to do instead (an operator reconfigures MIG with
`nvidia-smi mig` or the GPU Operator's MIG manager; the agent then reports the new layout),
and the session logs it once per desired-state version.
"""

from __future__ import annotations

from collections.abc import Callable

from gpufleet.wire.agent import DesiredState, NodeRegistration
from gpufleet.wire.telemetry import NodeSnapshot

from .backend import TelemetrySource


class MigPlanNotApplied(ValueError):
    pass


class ReadOnlyNode:
    def __init__(self, name: str, discover: Callable[[], NodeRegistration],
                 source: TelemetrySource,
                 on_inventory: Callable[[NodeRegistration], None] | None = None):
        self.name = name
        self._discover = discover
        self.source = source
        self.on_inventory = on_inventory

    def discover(self) -> NodeRegistration:
        registration = self._discover()
        if self.on_inventory is not None:
            self.on_inventory(registration)
        return registration

    def collect(self) -> NodeSnapshot:
        return self.source.collect()

    def apply_desired_state(self, state: DesiredState) -> None:
        if state.mig_plans:
            layouts = {gpu.uuid.lower(): {(m.profile_id, m.placement_start)
                                          for m in gpu.mig_instances}
                       for gpu in self._discover().gpus}
            differ = [plan.gpu_uuid for plan in state.mig_plans
                      if layouts.get(plan.gpu_uuid.lower()) !=
                      {(i.profile_id, i.placement_start) for i in plan.instances}]
            if differ:
                raise MigPlanNotApplied(
                    f"the {self.name} backend does not change MIG layouts; reconfigure GPU(s) "
                    f"{', '.join(differ)} with `nvidia-smi mig` or the GPU Operator's MIG "
                    "manager, and the agent reports the new layout")
