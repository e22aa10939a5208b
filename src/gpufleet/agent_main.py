"""`gpufleet agent`: pick a GPU backend, then run the agent until stopped.

Wiring only — the agent (`gpufleet.agent`) knows the backend interface, not the backends;
this is where the CLI's `--backend` name becomes one.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from pathlib import Path

from gpufleet.agent.backend import GpuBackend
from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.settings import default_data_dir

BACKENDS = ("sim",)
EXIT_CODES = {StopReason.STOPPED: 0, StopReason.UNAUTHORIZED: 3, StopReason.NOT_JOINED: 2}

log = logging.getLogger(__name__)


class AgentSetupError(Exception):
    """A flag or environment problem, reported as one line before anything starts."""


def default_state_dir() -> Path:
    return default_data_dir() / "agent"


def make_backend(name: str, *, sim_shape: str | None, hostname: str | None,
                 seed: int | None) -> GpuBackend:
    if name != "sim":
        raise AgentSetupError(f"backend '{name}' is not available yet; choose one of: "
                              f"{', '.join(BACKENDS)} (nvml and dcgm-exporter come with the "
                              "telemetry work)")
    from gpufleet.sim.backend import standalone_backend
    from gpufleet.sim.shapes import SHAPES

    shape = sim_shape or "dgx-h100"
    if shape not in SHAPES:
        raise AgentSetupError(f"unknown simulated shape '{shape}'; choose one of: "
                              f"{', '.join(sorted(SHAPES))}")
    return standalone_backend(shape, hostname or f"sim-{shape}-{seed or 0}", seed or 0)


async def _run(runner: AgentRunner) -> StopReason:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with runner:
        return await runner.run(stop)


def main(*, backend: str, server: str, join_token: str | None, state_dir: Path | None,
         sim_shape: str | None = None, hostname: str | None = None,
         seed: int | None = None) -> int:
    """Run one agent; returns the exit code (0 stopped, 2 not joined, 3 token refused)."""
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        gpu_backend = make_backend(backend, sim_shape=sim_shape, hostname=hostname, seed=seed)
    except AgentSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    runner = AgentRunner(server.rstrip("/"), gpu_backend, state_dir or default_state_dir(),
                         join_token=join_token)
    reason = asyncio.run(_run(runner))
    return EXIT_CODES[reason]
