"""`gpufleet agent`: pick a GPU backend, then run the agent until stopped (or once).

Wiring only — the agent (`gpufleet.agent`) knows the backend interface, not the backends;
this is where the CLI's `--backend` name becomes one, where the telemetry flags become
`TelemetryOptions`, and where the agent's own /metrics server is started. A flag or
environment problem (no NVML, a bad URL, a port in use) is one line on stderr and exit 2,
before anything starts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gpufleet.agent.backend import GpuBackend, SourceUnavailable
from gpufleet.agent.client import server_urls
from gpufleet.agent.options import BACKENDS, DEFAULT_BACKEND, MIB, TelemetryOptions
from gpufleet.agent.runner import AgentRunner, StopReason
from gpufleet.settings import default_data_dir

EXIT_CODES = {StopReason.STOPPED: 0, StopReason.UNAUTHORIZED: 3, StopReason.NOT_JOINED: 2}
EXIT_SETUP = 2
EXIT_ONCE_FAILED = 1
TELEMETRY = TelemetryOptions()  # the defaults

log = logging.getLogger(__name__)


class AgentSetupError(Exception):
    """A flag or environment problem, reported as one line before anything starts."""


@dataclasses.dataclass(frozen=True)
class AgentFlags:
    backend: str = DEFAULT_BACKEND
    sim_shape: str | None = None
    hostname: str | None = None
    seed: int | None = None
    dcgm_exporter_url: str | None = None
    collect_interval_s: float = TELEMETRY.collect_interval_s
    upload_interval_s: float = TELEMETRY.upload_interval_s
    spool_max_mb: float = TELEMETRY.spool_max_bytes / MIB
    once: bool = False
    metrics_port: int | None = None
    metrics_address: str = "0.0.0.0"


def default_state_dir() -> Path:
    return default_data_dir() / "agent"


def make_backend(flags: AgentFlags) -> GpuBackend:
    if flags.backend == "sim":
        return _sim(flags)
    if flags.backend == "nvml":
        return _nvml(flags)
    if flags.backend == "dcgm-exporter":
        return _dcgm_exporter(flags)
    raise AgentSetupError(f"unknown backend '{flags.backend}'; choose one of: "
                          f"{', '.join(BACKENDS)}")


def _sim(flags: AgentFlags) -> GpuBackend:
    from gpufleet.sim.backend import standalone_backend
    from gpufleet.sim.shapes import SHAPES

    shape = flags.sim_shape or "dgx-h100"
    if shape not in SHAPES:
        raise AgentSetupError(f"unknown simulated shape '{shape}'; choose one of: "
                              f"{', '.join(sorted(SHAPES))}")
    return standalone_backend(shape, flags.hostname or f"sim-{shape}-{flags.seed or 0}",
                              flags.seed or 0)


def _host(hostname: str | None) -> Callable:
    from gpufleet.agent.host import read_host

    if hostname is None:
        return read_host
    return lambda: dataclasses.replace(read_host(), hostname=hostname)


def _nvml(flags: AgentFlags) -> GpuBackend:
    from gpufleet.agent.nvml_backend import NvmlBackend
    from gpufleet.agent.read_only_node import ReadOnlyNode

    host = _host(flags.hostname)
    nvml = NvmlBackend(host().hostname, host=host)
    try:
        nvml.discover()  # NVML and the driver are there, or say now what is missing
    except SourceUnavailable as exc:
        raise AgentSetupError(str(exc)) from None
    return ReadOnlyNode("nvml", nvml.discover, nvml)


def _dcgm_exporter(flags: AgentFlags) -> GpuBackend:
    from gpufleet.agent.dcgm_exporter import DcgmExporterBackend
    from gpufleet.agent.dcgm_inventory import fetch_registration
    from gpufleet.agent.read_only_node import ReadOnlyNode

    if not flags.dcgm_exporter_url:
        raise AgentSetupError("--backend dcgm-exporter needs --dcgm-exporter-url, e.g. "
                              "http://localhost:9400/metrics")
    host = _host(flags.hostname)
    try:
        exporter = DcgmExporterBackend(flags.dcgm_exporter_url, host().hostname)
    except ValueError as exc:
        raise AgentSetupError(str(exc)) from None
    # An exporter not up yet is not a setup error: registration retries until it answers.
    return ReadOnlyNode("dcgm-exporter", lambda: fetch_registration(exporter, host()),
                        exporter, on_inventory=exporter.use_inventory)


def telemetry_options(flags: AgentFlags) -> TelemetryOptions:
    if flags.spool_max_mb <= 0:
        raise AgentSetupError("--spool-max-mb must be positive")
    try:
        return TelemetryOptions(collect_interval_s=flags.collect_interval_s,
                                upload_interval_s=flags.upload_interval_s,
                                spool_max_bytes=int(flags.spool_max_mb * MIB))
    except ValueError as exc:
        raise AgentSetupError(f"--collect-interval-s / --upload-interval-s: {exc}") from None


def _metrics(runner: AgentRunner, backend: GpuBackend, flags: AgentFlags):
    """The /metrics server over the runner's snapshots, or None when --metrics-port is off."""
    if flags.metrics_port is None or runner.telemetry is None:
        return None
    from gpufleet.agent.metrics_exporter import MetricsServer, SnapshotCollector

    uploader = runner.telemetry.uploader
    try:
        registration = backend.discover()
    except Exception as exc:  # the inventory comes with the first registration instead
        log.warning("GPU labels for /metrics wait for the inventory: %s", exc)
        registration = None
    collector = SnapshotCollector(registration.hostname if registration else
                                  (flags.hostname or "unknown"), uploader.counters,
                                  spooled_batches=uploader.pending)
    if registration is not None:
        collector.use_inventory(registration)
    runner.telemetry.on_snapshot = collector.update
    try:
        return MetricsServer(collector, flags.metrics_port, flags.metrics_address)
    except OSError as exc:
        raise AgentSetupError(f"cannot serve /metrics on {flags.metrics_address}:"
                              f"{flags.metrics_port}: {exc.strerror or exc}") from None


def _server_urls(server: str | Sequence[str]) -> list[str]:
    try:
        return server_urls(server)
    except ValueError as exc:
        raise AgentSetupError(f"--server: {exc}") from None


async def _run(runner: AgentRunner) -> StopReason:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with runner:
        return await runner.run(stop)


async def _once(runner: AgentRunner) -> int:
    async with runner:
        result = await runner.run_once()
    print(("ok: " if result.ok else "error: ") + result.message,
          file=sys.stdout if result.ok else sys.stderr)
    if result.ok:
        return 0
    return EXIT_CODES[result.reason] if result.reason is not None else EXIT_ONCE_FAILED


def main(*, backend: str, server: str | Sequence[str], join_token: str | None,
         state_dir: Path | None, **options) -> int:
    """Run one agent; `options` are `AgentFlags`' fields. The exit code: 0 stopped (or
    --once all acknowledged), 1 --once not all acknowledged, 2 not joined or a setup
    problem, 3 token refused."""
    flags = AgentFlags(backend=backend, **options)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    metrics = None
    try:
        servers = _server_urls(server)
        gpu_backend = make_backend(flags)
        runner = AgentRunner(servers, gpu_backend, state_dir or default_state_dir(),
                             join_token=join_token, telemetry=telemetry_options(flags))
        metrics = _metrics(runner, gpu_backend, flags)
    except AgentSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP
    except OSError as exc:  # the state dir or its spool cannot be created
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_SETUP
    # Everything start-up made lives as long as the agent: keep it out of every GC walk
    # (full collections over it were the p99 of a collection cycle, BENCHMARKS.md).
    gc.collect()
    gc.freeze()
    try:
        if flags.once:
            return asyncio.run(_once(runner))
        return EXIT_CODES[asyncio.run(_run(runner))]
    finally:
        if metrics is not None:
            metrics.close()
