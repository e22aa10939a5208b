"""Shared benchmark plumbing: a real `gpufleet` server in its own process, and percentiles.

The server runs as a subprocess so the load generator and the server do not share one
interpreter (and one GIL); figures are what a client on the same machine observes, plus the
server-side time each response reports in its `Server-Timing` header.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import httpx

SERVE = ("from gpufleet.server import run_server; from gpufleet.settings import load_settings;"
         "import sys; sys.exit(run_server(load_settings()))")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_server(data_dir: Path, database_url: str | None, *,
                   on_start: Callable[[subprocess.Popen], None] | None = None, **settings):
    """Start `gpufleet serve` on a free loopback port; yields (url, admin token).
    `on_start` is handed the server's process (to read its CPU time, say)."""
    port = free_port()
    env = {**os.environ, "GPUFLEET_DATA_DIR": str(data_dir), "GPUFLEET_PORT": str(port),
           "GPUFLEET_HOST": "127.0.0.1", "GPUFLEET_LOG_LEVEL": "warning"}
    if database_url:
        env["GPUFLEET_DATABASE_URL"] = database_url
    for name, value in settings.items():
        env[f"GPUFLEET_{name.upper()}"] = str(value)
    process = subprocess.Popen([sys.executable, "-c", SERVE], env=env)
    if on_start is not None:
        on_start(process)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the gpufleet server did not start")
            time.sleep(0.1)
        yield url, (data_dir / "admin-token").read_text().strip()
    finally:
        process.terminate()
        process.wait(timeout=30)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def describe_ms(values: list[float]) -> str:
    return (f"p50 {percentile(values, 0.5):7.2f} ms  p99 {percentile(values, 0.99):7.2f} ms  "
            f"mean {statistics.fmean(values):7.2f} ms  (n={len(values)})")


def server_ms(response: httpx.Response) -> float:
    """The server-side duration from `Server-Timing: app;dur=<ms>`."""
    header = response.headers.get("server-timing", "")
    return float(header.split("dur=")[1]) if "dur=" in header else float("nan")
