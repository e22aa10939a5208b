"""A real VictoriaMetrics for the tests of the Prometheus-compatible store: one process per
test module, started on a free loopback port with flags that make a write queryable at once
(`-search.latencyOffset=0s`, `-search.disableCache`), and a store that calls
`/internal/force_flush` after every write, since VictoriaMetrics otherwise makes samples
searchable within a second or two, not at once. `clear(url)` empties the engine of gpufleet
series between tests.

Without the binary the tests skip; with GPUFLEET_TEST_REQUIRE_VICTORIAMETRICS=1 (.ci/run
sets it) they fail instead.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time

import httpx
import pytest

from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore

# Read at import: the suite's autouse fixture clears GPUFLEET_* variables before each test.
REQUIRED = os.environ.get("GPUFLEET_TEST_REQUIRE_VICTORIAMETRICS") == "1"
BINARY = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
GPUFLEET_SERIES = '{__name__=~"gpufleet_.+"}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def victoria_metrics(tmp_path_factory):
    """The URL of a VictoriaMetrics started for this module."""
    if not os.access(BINARY, os.X_OK):
        message = f"VictoriaMetrics is not installed ({BINARY}): apt-get install victoria-metrics"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    port = free_port()
    process = subprocess.Popen(
        [BINARY, f"-httpListenAddr=127.0.0.1:{port}",
         f"-storageDataPath={tmp_path_factory.mktemp('victoria-metrics')}",
         "-retentionPeriod=100y",  # the tests' samples are from 2026-11-02
         "-search.latencyOffset=0s", "-search.disableCache", "-dedup.minScrapeInterval=1ms",
         "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_healthy(url: str, process: subprocess.Popen, attempts: int = 600) -> None:
    for _ in range(attempts):
        if process.poll() is not None:
            pytest.fail(f"VictoriaMetrics exited: {process.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail("VictoriaMetrics did not answer /health")


class FlushingStore(PrometheusTelemetryStore):
    """The store, with every write made searchable at once (a test's read follows it)."""

    def write(self, batch):
        stored = super().write(batch)
        self._flush()
        return stored

    def write_columns(self, batches):
        answers = super().write_columns(batches)
        self._flush()
        return answers

    def _mask_engine(self):
        engine = super()._mask_engine()
        imported = engine.import_lines

        def import_lines(body: bytes) -> None:  # the recorded masks, searchable at once
            imported(body)
            self._flush()
        engine.import_lines = import_lines
        return engine

    def _flush(self) -> None:
        self._client.get(f"{self.write_url}/internal/force_flush").raise_for_status()


def clear(url: str) -> None:
    """Delete every gpufleet series (each test starts from an empty engine)."""
    httpx.post(f"{url}/api/v1/admin/tsdb/delete_series",
               data={"match[]": GPUFLEET_SERIES}).raise_for_status()
