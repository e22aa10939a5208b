"""Start a gpufleet server: open the state store, migrate, bootstrap the admin token, serve.

The composition root: the only place (with `demo`) that wires settings, store, services and
the web app together.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import uvicorn

from gpufleet.api.app import create_app
from gpufleet.clock import Clock
from gpufleet.private_files import ensure_private_dir, write_private_file
from gpufleet.services.app import Gpufleet
from gpufleet.services.telemetry.store import open_telemetry_store
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore

log = logging.getLogger(__name__)


def admin_token_path(settings: Settings) -> Path:
    return settings.data_dir / "admin-token"


def bootstrap_admin_token(gf: Gpufleet, token_file: Path) -> str:
    """The admin token kept in `token_file` (mode 600, written atomically): the one already
    there while it is valid, otherwise a new one."""
    current = token_file.read_text().strip() if token_file.is_file() else None
    token = gf.ensure_admin_token(current)
    if token != current:
        write_private_file(token_file, token + "\n")
    return token


def build_gpufleet(settings: Settings, clock: Clock | None = None) -> Gpufleet:
    """The services over a migrated state store; the data dir is created when needed."""
    # Owner-only: the state and telemetry stores in it hold every project's allocations.
    ensure_private_dir(settings.data_dir, tighten=True)
    store = StateStore(settings.effective_database_url,
                       sqlite_synchronous=settings.sqlite_synchronous,
                       pool_size=settings.database_pool_size)
    store.migrate()
    gf = Gpufleet(store, settings, clock, telemetry=open_telemetry_store(settings))
    # The alert loop evaluates the rules in effect (tests choose their own evaluator).
    gf.alert_evaluator = gf.alert_evaluation
    return gf


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# Each telemetry upload allocates thousands of short-lived containers (its decoded batch,
# its columns). At Python's default gen-0 threshold (700) the collector ran every few
# uploads, and a full collection over the whole heap — ~250k objects at 4,000 GPUs,
# ~120 ms each — every ~150: a quarter of the server's ingest CPU (BENCHMARKS.md). Almost
# all of those objects are freed by reference counting; the collector only has cycles to
# find, and finds them as surely ~70 times less often.
GC_THRESHOLDS = (50_000, 20, 10)


def tune_garbage_collector() -> None:
    """Collect cyclic garbage less often than Python's defaults (GC_THRESHOLDS): for a
    server process only, set once at its start."""
    gc.set_threshold(*GC_THRESHOLDS)


def uvicorn_config(app, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(app, host=settings.host, port=settings.port,
                          log_level=settings.log_level, access_log=False,
                          timeout_graceful_shutdown=5)


def run_server(settings: Settings) -> int:
    """`gpufleet serve`: run until interrupted; returns the process exit code."""
    configure_logging(settings)
    tune_garbage_collector()
    gf = build_gpufleet(settings)
    token_file = admin_token_path(settings)
    first_start = not token_file.exists()
    bootstrap_admin_token(gf, token_file)
    url = f"http://{settings.host}:{settings.port}"
    log.info("gpufleet serving %s (API docs %s/docs); state store %s", url, url,
             gf.store.url.render_as_string(hide_password=True))
    if first_start:
        log.info("admin token written to %s (mode 600)", token_file)
    server = uvicorn.Server(uvicorn_config(create_app(gf), settings))
    try:
        server.run()
    finally:
        gf.close()
    return 0
