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
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    env.update({"GPUFLEET_DATA_DIR": str(data_dir), "GPUFLEET_PORT": str(port),
                "GPUFLEET_HOST": "127.0.0.1", "GPUFLEET_LOG_LEVEL": "warning"})
    env.update({f"GPUFLEET_{name.upper()}": str(value) for name, value in settings.items()})
    process = subprocess.Popen([sys.executable, "-m", "gpufleet", "serve"], env=env)
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
            assert process.poll() is None, "gpufleet serve exited"
            assert time.monotonic() < deadline, "gpufleet serve did not become ready"
            time.sleep(0.1)
        yield url, (Path(data_dir) / "admin-token").read_text().strip()
    finally:
        process.terminate()
        process.wait(timeout=30)
