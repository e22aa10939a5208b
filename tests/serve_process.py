"""`gpufleet serve` as a real process on a free loopback port, for the tests that need
uvicorn's own HTTP stack or a client in another process (the CLI as a user runs it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve_process(data_dir: Path, *, on_start: Callable[[subprocess.Popen], None] | None = None,
                  port: int | None = None, **settings: object) -> Iterator[tuple[str, str]]:
    """Run `python -m gpufleet serve` with `GPUFLEET_<NAME>` for each setting given;
    yields (its URL, the admin token) once it is ready, and stops it after. `on_start` is
    handed the process (a test that kills it); `port` is a free one unless given."""
    with serve_processes([data_dir], on_start=on_start, port=port, **settings) as [served]:
        yield served


@contextmanager
def serve_processes(data_dirs: list[Path], *,
                    on_start: Callable[[subprocess.Popen], None] | None = None,
                    port: int | None = None, **settings: object
                    ) -> Iterator[list[tuple[str, str]]]:
    """As `serve_process`, one server per data dir, all started at once (replicas on one
    database: they start together, as a deployment's do); yields their (URL, admin token)
    once every one is ready. A `port` given is for a single server."""
    started: list[tuple[subprocess.Popen, str]] = []
    try:
        for data_dir in data_dirs:
            process, url = _start(data_dir, port or free_port(), settings)
            started.append((process, url))
            if on_start is not None:
                on_start(process)
        for process, url in started:
            _wait_until_ready(process, url)
        yield [(url, (Path(data_dir) / "admin-token").read_text().strip())
               for (_, url), data_dir in zip(started, data_dirs, strict=True)]
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait(timeout=30)


def _start(data_dir: Path, port: int, settings: dict[str, object]
           ) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update({"GPUFLEET_DATA_DIR": str(data_dir), "GPUFLEET_PORT": str(port),
                "GPUFLEET_HOST": "127.0.0.1", "GPUFLEET_LOG_LEVEL": "warning"})
    env.update({f"GPUFLEET_{name.upper()}": str(value) for name, value in settings.items()})
    process = subprocess.Popen([sys.executable, "-m", "gpufleet", "serve"], env=env)
    return process, f"http://127.0.0.1:{port}"


def _wait_until_ready(process: subprocess.Popen, url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, "gpufleet serve exited"
        assert time.monotonic() < deadline, "gpufleet serve did not become ready"
        time.sleep(0.1)
