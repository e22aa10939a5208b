"""Prometheus remote-write in: gpufleet's receiver beside VictoriaMetrics, on identical bodies.

    python -u bench/bench_remote_write.py --nodes 500 --scrapes 6

Builds what a Prometheus scraping dcgm-exporter on `--nodes` × 8 GPUs would push: the core
catalogue under dcgm-exporter's names and labels, one sample per series per scrape (15 s
apart), in bodies of `--samples-per-body` series (Prometheus' `max_samples_per_send`,
2,000 by default). The same pre-encoded bodies are posted, from a separate process, to a
VictoriaMetrics (Debian's `victoria-metrics`, started here on a loopback port) and to a
gpufleet server with the fleet registered; each server's CPU time is read from /proc.
Prints CPU-seconds per million samples for each, and their ratio, and each server's
resident memory (VmRSS) before and after, per million active series (`nodes` × 8 × the
catalogue's core metrics: every series the bodies name is active).
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from bench_fleet_scale import register_fleet
from bench_ingest import CLOCK_TICKS_S, cpu_seconds, plausible
from common import free_port, running_server
from gpufleet.domain.telemetry.catalogue import CORE, metric
from gpufleet.sim.nodes import iter_nodes
from gpufleet.sim.scaled import scaled_spec
from gpufleet.wire.remote_write import REQUEST_HEADERS, encode_write_request

SCRAPE_S = 15
GPUFLEET_PATH = "/api/v1/telemetry/remote-write"


def dcgm_bodies(nodes: int, scrapes: int, per_body: int, seed: int = 3) -> tuple[list[bytes], int]:
    """Remote-write bodies of every node's dcgm-exporter series, oldest scrape first."""
    rng = random.Random(seed)
    names = [(m, metric(m).prometheus.name) for m in CORE]
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    start_ms = now_ms - scrapes * SCRAPE_S * 1000
    fleet = list(iter_nodes(scaled_spec(nodes)))
    series: list[tuple[dict[str, str], list[tuple[int, float]]]] = []
    for scrape in range(scrapes):
        at_ms = start_ms + scrape * SCRAPE_S * 1000
        for node in fleet:
            for index, gpu in enumerate(node.registration.gpus):
                for catalogue_name, name in names:
                    labels = {"__name__": name, "gpu": str(index), "UUID": gpu.uuid,
                              "device": f"nvidia{index}", "modelName": gpu.name,
                              "Hostname": node.hostname, "DCGM_FI_DRIVER_VERSION": "550.54",
                              "instance": f"{node.hostname}:9400", "job": "dcgm-exporter"}
                    series.append((labels, [(at_ms, plausible(catalogue_name, rng) / 100
                                             if name.startswith("DCGM_FI_PROF") else
                                             plausible(catalogue_name, rng))]))
    bodies = [encode_write_request(series[i:i + per_body])
              for i in range(0, len(series), per_body)]
    return bodies, len(series)


async def post_all(url: str, headers: dict[str, str], bodies: list[bytes],
                   concurrency: int) -> None:
    queue = list(reversed(bodies))
    async with httpx.AsyncClient(headers={**REQUEST_HEADERS, **headers}, timeout=300,
                                 limits=httpx.Limits(max_connections=concurrency)) as http:
        async def worker() -> None:
            while queue:
                response = await http.post(url, content=queue.pop())
                response.raise_for_status()
                if "X-Gpufleet-Dropped" in response.headers:  # the figure must be of stored
                    raise SystemExit(f"gpufleet dropped samples: "
                                     f"{response.headers['X-Gpufleet-Dropped']}")

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (VmRSS), from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def thread_cpu_seconds(pid: int) -> dict[int, float]:
    """utime + stime of each thread of a process, by thread id (/proc/<pid>/task)."""
    spent = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        spent[int(task.name)] = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S
    return spent


def timed_push(pid: int, url: str, token: str, body_file: Path, concurrency: int,
               samples: int, active_series: int) -> float:
    """Post every body from a separate process; the server's CPU-s per million samples.
    Also prints where it went by thread: the main one (tid = pid; for gpufleet uvicorn's
    event loop: HTTP, routing) and the busiest others (gpufleet: the request worker
    threads running ingest, the journal applier, DuckDB's own threads)."""
    rss_before = rss_bytes(pid)
    threads_before = thread_cpu_seconds(pid)
    before_s, started_s = cpu_seconds(pid), time.perf_counter()
    subprocess.run([sys.executable, __file__, "--concurrency", str(concurrency),
                    "--push", url, token, str(body_file)], check=True)
    cpu_s, wall_s = cpu_seconds(pid) - before_s, time.perf_counter() - started_s
    threads = {tid: spent - threads_before.get(tid, 0.0)
               for tid, spent in thread_cpu_seconds(pid).items()}
    print(f"  CPU {cpu_s:.1f} s over {wall_s:.1f} s wall: "
          f"{cpu_s / samples * 1e6:.2f} CPU-s per million samples, "
          f"{samples / wall_s:,.0f} samples/s")
    busiest = sorted((s for tid, s in threads.items() if tid != pid), reverse=True)[:6]
    print(f"  by thread, CPU-s per million samples: main {threads.get(pid, 0) / samples * 1e6:.2f}"
          f"; others {', '.join(f'{s / samples * 1e6:.2f}' for s in busiest)}"
          f" (of {len(threads)} live at the end)")
    rss_after = rss_bytes(pid)
    print(f"  RSS {rss_before / 2**20:,.0f} MiB before, {rss_after / 2**20:,.0f} MiB after "
          f"{active_series:,} active series: {rss_after / 2**30 / active_series * 1e6:.2f} GiB "
          f"per million (growth {(rss_after - rss_before) / 2**30 / active_series * 1e6:.2f})")
    return cpu_s / samples * 1e6


def start_victoria_metrics(data_dir: Path, *flags: str) -> tuple[subprocess.Popen, str]:
    """Debian's VictoriaMetrics on a free loopback port; `flags` are added to its command."""
    binary = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
    port = free_port()
    process = subprocess.Popen([binary, f"-httpListenAddr=127.0.0.1:{port}",
                                f"-storageDataPath={data_dir}", "-retentionPeriod=100y",
                                "-loggerLevel=ERROR", *flags])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(0.1)
    process.terminate()
    raise RuntimeError("VictoriaMetrics did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=6)
    parser.add_argument("--samples-per-body", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--push", nargs=3, metavar=("URL", "TOKEN", "FILE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.push:
        url, token, body_file = args.push
        headers = {"Authorization": f"Bearer {token}"} if token != "-" else {}
        asyncio.run(post_all(url, headers, pickle.loads(Path(body_file).read_bytes()),
                             args.concurrency))
        return
    bodies, samples = dcgm_bodies(args.nodes, args.scrapes, args.samples_per_body)
    active_series = samples // args.scrapes
    print(f"== {len(bodies)} bodies, {samples:,} samples, "
          f"{sum(map(len, bodies)) / samples:.2f} wire bytes/sample")
    with tempfile.TemporaryDirectory() as tmp:
        body_file = Path(tmp) / "bodies.pickle"
        body_file.write_bytes(pickle.dumps(bodies))
        vm, vm_url = start_victoria_metrics(Path(tmp) / "vm")
        try:
            print("VictoriaMetrics /api/v1/write:")
            vm_cost = timed_push(vm.pid, f"{vm_url}/api/v1/write", "-", body_file,
                                 args.concurrency, samples, active_series)
        finally:
            vm.terminate()
            vm.wait(30)
        server: list[subprocess.Popen] = []
        with running_server(Path(tmp) / "data", None, heartbeat_interval_s=3600,
                            telemetry_rollup_interval_s=3600,
                            on_start=server.append) as (url, admin):
            asyncio.run(register_fleet(url, admin, args.nodes, 16))
            token = httpx.post(f"{url}/api/v1/tokens", json={"name": "prom", "role": "ingest"},
                               headers={"Authorization": f"Bearer {admin}"}).json()["token"]
            print(f"gpufleet {GPUFLEET_PATH}:")
            ours = timed_push(server[0].pid, url + GPUFLEET_PATH, token, body_file,
                              args.concurrency, samples, active_series)
    print(f"gpufleet / VictoriaMetrics CPU per sample: {ours / vm_cost:.1f}×")


if __name__ == "__main__":
    main()
