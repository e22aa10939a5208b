"""CPU time per collection cycle of the agent's dcgm-exporter backend, and its memory.

    python bench/bench_agent_dcgm_exporter.py [--cycles 200]

Three cycles, each timed with time.process_time (CPU of this process only) after a warm-up:

- map, full page: `snapshot_from_text` (parse + map + snapshot) of the 8-GPU H100 page of
  the tests (tests/data/dcgm_exporter/h100_8gpu.txt: default counters, profiling fields,
  ECC, remapping, XID counter and all 18 NVLink links per direction: 555 samples);
- map, default page: the same page less the per-link NVLink series (267 samples), about
  what dcgm-exporter's default and DCP counter files produce;
- collect over HTTP: `DcgmExporterBackend.collect()` of the full page from a real HTTP
  server in another process (`python -m http.server`), so its CPU is not counted here.

Targets: ≤ 20 ms CPU per cycle for an 8-GPU page; ≤ 100 MiB peak RSS (getrusage maxrss).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from common import free_port
from gpufleet.agent.dcgm_exporter import DcgmExporterBackend, snapshot_from_text

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "dcgm_exporter"
PAGE = "h100_8gpu.txt"
CYCLE_TARGET_MS = 20.0
RSS_TARGET_MIB = 100.0
WARM_UP = 5


def cpu_ms_per_cycle(cycle, cycles: int) -> list[float]:
    for _ in range(WARM_UP):
        cycle()
    times = []
    for _ in range(cycles):
        started = time.process_time()
        cycle()
        times.append((time.process_time() - started) * 1000)
    return times


def report(name: str, times: list[float]) -> float:
    ordered = sorted(times)
    median = statistics.median(ordered)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    verdict = "meets" if median <= CYCLE_TARGET_MS else "MISSES"
    print(f"{name:<26} median {median:6.2f} ms  p95 {p95:6.2f} ms  max {ordered[-1]:6.2f} ms"
          f"  ({verdict} the {CYCLE_TARGET_MS:g} ms target)")
    return median


def serve(directory: Path, port: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
         "--directory", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/{PAGE}", timeout=1).raise_for_status()
            return process
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the page server did not start") from None
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()

    full = (DATA / PAGE).read_text()
    default = "".join(line for line in full.splitlines(keepends=True)
                      if "DCGM_FI_PROF_NVLINK_L" not in line)
    at = datetime.now(UTC)
    snapshot = snapshot_from_text(full, "bench", at)
    print(f"page: {PAGE}, {len(full.splitlines())} lines, {len(snapshot.units)} units, "
          f"{sum(len(u.values) + len(u.labelled) for u in snapshot.units)} values; "
          f"{args.cycles} cycles each after {WARM_UP} warm-up")

    report("map, full page", cpu_ms_per_cycle(
        lambda: snapshot_from_text(full, "bench", at), args.cycles))
    report("map, default page", cpu_ms_per_cycle(
        lambda: snapshot_from_text(default, "bench", at), args.cycles))

    port = free_port()
    server = serve(DATA, port)
    try:
        with DcgmExporterBackend(f"http://127.0.0.1:{port}/{PAGE}", "bench") as source:
            report("collect over HTTP, full", cpu_ms_per_cycle(source.collect, args.cycles))
    finally:
        server.terminate()
        server.wait(timeout=30)

    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    verdict = "meets" if rss_mib <= RSS_TARGET_MIB else "MISSES"
    print(f"peak RSS of this process: {rss_mib:.1f} MiB ({verdict} the "
          f"{RSS_TARGET_MIB:g} MiB target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
