"""`gpufleet serve`, `demo` and `agent`: the commands that start something.

Each imports its implementation only when run, so `gpufleet fleet ls` on a laptop never
loads the server's database stack or the agent's backends.
"""

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.agent.options import DEFAULT_BACKEND, MIB, TelemetryOptions
from gpufleet.cli.client import cli_settings

TELEMETRY = TelemetryOptions()  # the agent's defaults, declared there


def serve(
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on.")] = None,
    port: Annotated[int | None, typer.Option("--port", help="TCP port to listen on.")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Directory for the SQLite store and the admin token.")] = None,
    database_url: Annotated[str | None, typer.Option(
        "--database-url", help="State store URL, e.g. postgresql+psycopg://…")] = None,
) -> None:
    """Run the gpufleet server (flags override GPUFLEET_* settings and the config file)."""
    from gpufleet.server import run_server

    settings = cli_settings(host=host, port=port, data_dir=data_dir, database_url=database_url)
    _exit_with(run_server(settings))


def demo(
    port: Annotated[int, typer.Option("--port", help="TCP port of the demo server.")] = 8080,
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Where the demo keeps its state; default: a demo directory.")
    ] = None,
    reset: Annotated[bool, typer.Option("--reset", help="Start from an empty fleet.")] = False,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Seed for the simulated fleet, for a repeatable demo.")] = None,
) -> None:
    """Run a server with a simulated fleet, to explore gpufleet without GPUs."""
    from gpufleet.demo import run_demo

    _exit_with(run_demo(data_dir=data_dir, port=port, reset=reset, seed=seed))


def agent(
    server: Annotated[list[str], typer.Option(
        "--server", envvar="GPUFLEET_AGENT_SERVERS", show_envvar=True,
        help="The gpufleet server's URL; for replicas, repeat it or separate URLs with "
        "commas: the agent moves to the next one when a server cannot be reached or "
        "answers 502/503/504.")],
    backend: Annotated[str, typer.Option(
        "--backend", help="Where GPU data comes from: nvml (the driver's NVML), "
        "dcgm-exporter (scrape the node's exporter) or sim (the simulator).")
    ] = DEFAULT_BACKEND,
    join_token: Annotated[str | None, typer.Option(
        "--join-token", envvar="GPUFLEET_JOIN_TOKEN", show_envvar=True,
        help="Single-use token for the first registration (then the stored credential).")
    ] = None,
    state_dir: Annotated[Path | None, typer.Option(
        "--state-dir", help="Where the agent keeps its credential and spool.")] = None,
    sim_shape: Annotated[str | None, typer.Option(
        "--sim-shape", help="Simulated node shape (sim backend).")] = None,
    hostname: Annotated[str | None, typer.Option(
        "--hostname", help="Node name to register; default: the host's name "
        "(sim: sim-<shape>-<seed>).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Simulator seed.")] = None,
    dcgm_exporter_url: Annotated[str | None, typer.Option(
        "--dcgm-exporter-url", help="The node's dcgm-exporter metrics page (dcgm-exporter "
        "backend), e.g. http://localhost:9400/metrics.")] = None,
    collect_interval_s: Annotated[float, typer.Option(
        "--collect-interval-s", help="Seconds between two telemetry collections.")
    ] = TELEMETRY.collect_interval_s,
    upload_interval_s: Annotated[float, typer.Option(
        "--upload-interval-s", help="Seconds between two telemetry uploads (one batch).")
    ] = TELEMETRY.upload_interval_s,
    spool_max_mb: Annotated[float, typer.Option(
        "--spool-max-mb", help="Bound of the on-disk spool of unacknowledged batches; the "
        "oldest are dropped beyond it.")] = TELEMETRY.spool_max_bytes / MIB,
    once: Annotated[bool, typer.Option(
        "--once", help="Register if needed, collect once, upload with what the spool "
        "holds, exit 0 when all was acknowledged (for cron and checks).")] = False,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", help="Serve the agent's /metrics (dcgm-exporter names) on this "
        "port, e.g. 9400; off by default.")] = None,
    metrics_address: Annotated[str, typer.Option(
        "--metrics-address", help="Address the /metrics server binds to.")] = "0.0.0.0",
) -> None:
    """Run the node agent: register this node, heartbeat, and collect and upload telemetry."""
    from gpufleet.agent_main import main as agent_main

    raise typer.Exit(agent_main(
        backend=backend, server=server, join_token=join_token, state_dir=state_dir,
        sim_shape=sim_shape, hostname=hostname, seed=seed, dcgm_exporter_url=dcgm_exporter_url,
        collect_interval_s=collect_interval_s, upload_interval_s=upload_interval_s,
        spool_max_mb=spool_max_mb, once=once, metrics_port=metrics_port,
        metrics_address=metrics_address))


def _exit_with(result: object) -> None:
    """Servers may return an exit status; a non-zero one becomes the CLI's."""
    if isinstance(result, int) and not isinstance(result, bool) and result:
        raise typer.Exit(result)
