"""The one interface every GPU backend of the agent implements.

Three do (docs/agent-backends.md): `nvml` (nvidia-ml-py, `nvml_backend`), `dcgm-exporter`
(the node's exporter scraped, `dcgm_exporter` and `dcgm_inventory`) and `sim` (the
simulator, `gpufleet.sim`). `agent_main` picks one by the CLI's `--backend`; the agent
never knows which one it runs.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpufleet.wire.agent import DesiredState, NodeRegistration
from gpufleet.wire.telemetry import NodeSnapshot


class GpuBackend(Protocol):
    name: str

    def discover(self) -> NodeRegistration:
        """The node's full hardware inventory, as registration sends it."""
        ...

    def apply_desired_state(self, state: DesiredState) -> None:
        """Bring the node to the desired state (e.g. apply MIG plans); idempotent."""
        ...


@runtime_checkable
class TelemetrySource(Protocol):
    """What a backend reads each collection tick, in catalogue units (wire.telemetry).
    `isinstance(backend, TelemetrySource)` says whether a backend has telemetry at all."""

    def collect(self) -> NodeSnapshot:
        """One immutable snapshot of every unit of the node, and its processes."""
        ...


class SourceUnavailable(Exception):
    """A telemetry source could not be read this tick: an exporter down or answering with an
    error, a timeout, a page that is not what it should be. The message is for an operator
    (what failed, where, what to check); the agent reports it and tries again next tick,
    it never stops for it."""
