"""`gpufleet demo`: one process running a real server and a simulated fleet against it.

The server is the same one `gpufleet serve` runs (uvicorn, HTTP on loopback); the agents
are simulated (`gpufleet.sim`) but speak the real agent protocol over HTTP, so the demo
exercises join tokens, registration, heartbeats and telemetry uploads (one snapshot per
node a minute, `DEMO_TELEMETRY`) exactly as a real fleet would. The data
dir is kept between runs: the second start reuses the state store, the admin token and the
agents' credentials (`--reset` starts over).

Once every GPU has registered, the fleet is put to use (`demo.lifecycle_seed`: quotas,
pools, history, allocations on ~70 % of the GPUs, a queue). That goes through the lifecycle
services one request at a time, which takes longer than the start itself, so it runs in a
worker thread after the banner while the server already answers; it is done once per data
dir. Ctrl-C stops it between two requests; the next start finishes it from its journal
(`demo.seed_journal`) and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import signal
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import uvicorn
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.api.app import create_app
from gpufleet.demo.lifecycle_seed import (
    LifecycleSummary,
    lifecycle_summary,
    seed_lifecycle,
    seeding_todo,
)
from gpufleet.demo.rate_card import seed_rate_card
from gpufleet.demo.seed import seed_people
from gpufleet.demo.seed_journal import FILE_NAME as SEED_JOURNAL
from gpufleet.demo.seed_journal import JournalMismatch
from gpufleet.demo.seeder import SeedProgress
from gpufleet.server import (
    admin_token_path,
    bootstrap_admin_token,
    build_gpufleet,
    tune_garbage_collector,
    uvicorn_config,
)
from gpufleet.settings import (
    Settings,
    default_data_dir,
    load_settings,
    store_login,
    stored_login_url,
)
from gpufleet.sim.fleet_runner import FleetProgress, FleetTelemetry, run_simulated_fleet
from gpufleet.sim.fleet_spec import load_default_spec

log = logging.getLogger(__name__)
console = Console(stderr=True)

DEMO_MARKERS = ("gpufleet.db", "admin-token", "agents")
# One snapshot per node a minute, one batch per snapshot: ~4 batches/s for the default
# 243-node fleet, which a 2-core machine ingests beside everything else the demo does.
# One GPU an allocation holds falls off the bus (XID 79) a minute after the fleet runs, so
# the health loop quarantines it and its owner is told within minutes (docs/operations.md,
# "GPU health and quarantine").
DEMO_TELEMETRY = FleetTelemetry(interval_s=60.0, ticks_per_batch=1, strike_after_s=60.0)
SEED_PROGRESS_EVERY_S = 15.0  # how often the demo says where its seeding stands


class DemoError(Exception):
    """A problem the person running the demo can fix; shown as one line."""


def default_demo_dir() -> Path:
    return default_data_dir() / "demo"


def reset_data_dir(data_dir: Path) -> None:
    """Remove a previous demo's files — only from a directory that holds one."""
    if not data_dir.exists():
        return
    entries = list(data_dir.iterdir())
    if entries and not any((data_dir / marker).exists() for marker in DEMO_MARKERS):
        raise DemoError(f"refusing to reset {data_dir}: it does not look like a gpufleet "
                        "data dir")
    shutil.rmtree(data_dir)


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: connections of a previous run in TIME_WAIT do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise DemoError(f"port {port} on {host} is in use ({exc.strerror}); choose "
                            "another with --port") from None


class _QuietServer(uvicorn.Server):
    """uvicorn without its own signal handling: the demo stops server and fleet together."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


# A fresh demo has no allocation idle for production's 4 hours: at a quarter of an hour,
# `gpufleet idle` and the zombie list show the simulated idle notebooks soon after start.
DEMO_IDLE_WINDOW_HOURS = 0.25
# And a short reclamation policy, so a reclaim happens within ~20 minutes of start: the
# idle-held allocations (docs/operations.md, "Reclamation") are warned after the idle
# window, then released 5 minutes later unless used or exempted.
DEMO_RECLAIM_GRACE_MINUTES = 5.0
DEMO_DEFAULTS = {"idle_window_hours": DEMO_IDLE_WINDOW_HOURS,
                 "reclaim_action": "release",
                 "reclaim_grace_minutes": DEMO_RECLAIM_GRACE_MINUTES,
                 "reclaim_interval_s": 30.0}


def demo_settings(data_dir: Path | None = None, port: int = 8080) -> Settings:
    """The server's settings with the demo's own defaults (DEMO_DEFAULTS: a short idle
    window and reclamation policy), each unless the environment or the config file sets
    it."""
    settings = load_settings(data_dir=data_dir or default_demo_dir(), port=port,
                             host="127.0.0.1")
    for name, value in DEMO_DEFAULTS.items():
        if name not in settings.model_fields_set:
            settings = settings.with_program_value(name, value, "gpufleet demo")
    return settings


def run_demo(data_dir: Path | None = None, port: int = 8080, reset: bool = False,
             seed: int | None = None) -> int:
    """Run the demo until Ctrl-C; returns the exit code (1 with one line on a problem)."""
    settings = demo_settings(data_dir, port)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if reset:
            reset_data_dir(settings.data_dir)
        ensure_port_free(settings.host, settings.port)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_demo(settings, seed))
    except DemoError as exc:
        console.print(f"error: {exc}", style="red", highlight=False)
        return 1
    return 0


async def _demo(settings: Settings, seed: int | None) -> None:
    started_s = time.monotonic()
    tune_garbage_collector()
    gf = build_gpufleet(settings)
    token = bootstrap_admin_token(gf, admin_token_path(settings))
    spec = load_default_spec()
    if seed is not None:
        spec = spec.model_copy(update={"seed": seed})
    seeded = seed_people(gf, spec.seed)
    url = f"http://{settings.host}:{settings.port}"

    server = _QuietServer(uvicorn_config(create_app(gf), settings.model_copy(
        update={"log_level": "warning"})))
    server_task = asyncio.create_task(server.serve())
    while not server.started:
        if server_task.done():
            server_task.result()
            raise DemoError(f"the server could not start on {url}")
        await asyncio.sleep(0.02)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    registered = asyncio.Event()
    progress_bar = _ProgressBar(registered)
    fleet_task = asyncio.create_task(run_simulated_fleet(
        url, token, spec, settings.data_dir / "agents", stop, concurrency=16,
        on_progress=progress_bar.update, telemetry=DEMO_TELEMETRY))
    with progress_bar:
        done, _ = await asyncio.wait({fleet_task, asyncio.create_task(registered.wait())},
                                     return_when=asyncio.FIRST_COMPLETED)
    if fleet_task in done:
        server.should_exit = True
        await server_task
        fleet_task.result()
        raise DemoError("the simulated fleet stopped before it registered")
    seed_rate_card(gf)  # after registration: its rates name the fleet's environments
    journal = settings.data_dir / SEED_JOURNAL
    todo = seeding_todo(gf, journal)
    _banner(url, token, settings, progress_bar.last, time.monotonic() - started_s, seeded,
            todo, None if todo else lifecycle_summary(gf))
    halt = threading.Event()
    seeding = asyncio.create_task(_put_fleet_to_use(gf, spec.seed, halt, journal)) \
        if todo else None
    await stop.wait()
    if seeding is not None:
        halt.set()  # the worker stops after the request it is making
        await seeding
    console.print("stopping: agents, then server …")
    with contextlib.suppress(asyncio.CancelledError):
        await fleet_task
    server.should_exit = True
    await server_task
    gf.close()


async def _put_fleet_to_use(gf, seed: int, halt: threading.Event, journal: Path) -> None:
    """Seed the lifecycle in a worker thread, then print what it made (one line)."""
    out = Console(soft_wrap=True)
    progress = SeedProgress()
    seeding = asyncio.create_task(asyncio.to_thread(seed_lifecycle, gf, seed, halt, progress,
                                                    journal=journal))
    started_s = time.monotonic()
    while not seeding.done():
        await asyncio.wait({seeding}, timeout=SEED_PROGRESS_EVERY_S)
        if not seeding.done() and not halt.is_set():
            out.print(f"  putting the fleet to use: {progress.line()}, "
                      f"{time.monotonic() - started_s:.0f} s", highlight=False)
    try:
        summary = seeding.result()
    except JournalMismatch as exc:
        out.print(f"the demo seeding an earlier start left part-way cannot be finished "
                  f"({exc}); `gpufleet demo --reset` starts over")
        return
    except Exception:  # the demo keeps running without its requests
        log.exception("seeding the demo's requests failed")
        return
    if summary is None:
        return
    if not summary.complete:
        out.print(f"seeding stopped part-way: {summary.line()}; the next `gpufleet demo` on "
                  "this data dir finishes it")
        return
    how = "resumed and finished" if summary.resumed else "seeded"
    out.print(f"\n[bold green]fleet in use[/] ({how} in {summary.seconds:.1f} s): "
              f"{summary.line()}")
    out.print(_try_lifecycle(summary))


def try_billing(month: str) -> str:
    """The banner's billing lines: this month's statement, priced by the demo's rate card
    (demo/rate_card.py), as a table and as CSV (docs/billing.md)."""
    return (f"  gpufleet billing statement --month {month}   (what each project's GPUs cost, "
            "in the demo's USD rate card: gpufleet billing rates ls)\n"
            f"  gpufleet billing export --month {month} --format csv -o statement.csv")


def _try_lifecycle(summary: LifecycleSummary) -> str:
    why = f"   gpufleet request why {summary.waiting_code}" if summary.waiting_code else ""
    return f"  gpufleet request ls --state pending   gpufleet pool ls{why}"


class _ProgressBar:
    """A Rich progress bar fed by the fleet runner's progress callback."""

    def __init__(self, registered: asyncio.Event):
        self.registered = registered
        self.last: FleetProgress | None = None
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("GPUs"), TimeElapsedColumn(),
                                 console=console, transient=False)
        self.task = self.progress.add_task("registering simulated nodes", total=None)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def update(self, progress: FleetProgress) -> None:
        self.last = progress
        self.progress.update(self.task, total=progress.gpus_total,
                             completed=progress.gpus_registered)
        if progress.phase == "running":
            self.registered.set()


def _banner(url: str, token: str, settings: Settings, progress: FleetProgress | None,
            elapsed_s: float, seeded, todo: str | None,
            in_use: LifecycleSummary | None) -> None:
    login_note = "(GPUFLEET_URL / GPUFLEET_TOKEN below)"
    current = stored_login_url()
    if current is None or current.startswith(("http://127.0.0.1", "http://localhost")):
        store_login(url, token)
        login_note = "(stored as your CLI login)"
    gpus = progress.gpus_registered if progress else 0
    nodes = progress.nodes_registered if progress else 0
    out = Console(soft_wrap=True)
    out.print(f"\n[bold green]gpufleet demo[/] is up: {gpus} GPUs on {nodes} nodes "
              f"registered {elapsed_s:.1f} s after start")
    if seeded:
        out.print(f"seeded {seeded.projects} projects, {seeded.users} users")
    if todo == "resume":
        out.print("resuming the demo seeding an earlier start left part-way, in the "
                  "background (a line follows)")
    elif todo == "seed":
        out.print("putting the fleet to use in the background: quotas, pools, past and "
                  "current requests (about 30 s on a quiet machine, a few minutes on a busy "
                  f"one; progress every {SEED_PROGRESS_EVERY_S:.0f} s, then a line)")
    elif in_use is not None:
        out.print(f"in use: {in_use.line()}")
        out.print(_try_lifecycle(in_use))
    out.print(f"  server      {url}   (API docs {url}/docs)")
    out.print(f"  dashboard   {url}/ui/   (sign in with the admin token below)")
    out.print(f"  idle window {settings.idle_window_hours * 60:g} min   (production default "
              "4 h: GPUFLEET_IDLE_WINDOW_HOURS)")
    out.print(f"  reclaim     idle allocations warned after the idle window, then "
              f"{settings.reclaim_action} {settings.reclaim_grace_minutes:g} min later "
              "(`gpufleet reclaim warnings`, `gpufleet reclaim report`)")
    out.print(f"  admin token {token}   {login_note}")
    out.print(f"  token file  {admin_token_path(settings)}")
    out.print(f"  data dir    {settings.data_dir}")
    out.print("\ntry, in another terminal:")
    out.print(f"  export GPUFLEET_URL={url} GPUFLEET_TOKEN={token}")
    out.print("  gpufleet fleet summary")
    out.print("  gpufleet fleet ls --environment onprem-hpc --model H100-80GB")
    out.print("  gpufleet fleet ls --health quarantined   (a GPU falls off the bus in a few "
              "minutes; then gpufleet gpu health GPU)")
    out.print(try_billing(datetime.now(UTC).strftime("%Y-%m")))
    out.print("\nCtrl-C stops the server and the simulated agents.")
