"""Time `gpufleet demo` from process start to every simulated GPU registered.

    python bench/bench_demo.py [--runs 3]

Each run starts the demo afresh (`--reset`) in a temporary data dir on a free port, waits
for its "is up" banner, checks the server's fleet summary counts every GPU of the default
fleet, then stops it with SIGINT. Prints the wall time of each run (process start to banner,
Python start-up included) and the demo's own figure (server start to all registered). A
second start on the same data dir (reuse) is timed too.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from common import free_port

DEMO = ("import sys; from pathlib import Path; from gpufleet.demo import run_demo;"
        "sys.exit(run_demo(Path(sys.argv[1]), int(sys.argv[2]), reset=sys.argv[3] == 'reset'))")
BANNER = re.compile(r"is up: (\d+) GPUs on (\d+) nodes registered ([\d.]+) s after start")


def one_run(data_dir: Path, reset: bool) -> tuple[float, float, int]:
    port = free_port()
    env = {**os.environ, "GPUFLEET_CONFIG_DIR": str(data_dir / "config")}
    started_s = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-c", DEMO, str(data_dir), str(port), "reset" if reset else "keep"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        for line in process.stdout:
            match = BANNER.search(line)
            if match:
                wall_s = time.perf_counter() - started_s
                gpus, own_s = int(match.group(1)), float(match.group(3))
                break
        else:
            raise RuntimeError("the demo exited before its banner")
        token = (data_dir / "admin-token").read_text().strip()
        summary = httpx.get(f"http://127.0.0.1:{port}/api/v1/fleet/summary",
                            headers={"Authorization": f"Bearer {token}"}).json()
        assert summary["total_gpus"] == gpus, (summary["total_gpus"], gpus)
        return wall_s, own_s, gpus
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "demo"
        for run in range(1, args.runs + 1):
            wall_s, own_s, gpus = one_run(data_dir, reset=True)
            print(f"fresh run {run}: {gpus} GPUs registered; {wall_s:.1f} s from process "
                  f"start ({own_s:.1f} s from server start)")
        wall_s, own_s, gpus = one_run(data_dir, reset=False)
        print(f"reuse run: {gpus} GPUs re-registered; {wall_s:.1f} s from process start "
              f"({own_s:.1f} s from server start)")


if __name__ == "__main__":
    main()
