"""Time `gpufleet` commands as whole processes: start-up, one request, print, exit.

    python bench/bench_cli_startup.py [--repeat 15] [--before /tmp/cli-before/src]

Starts a real `gpufleet serve` on a free port with a small simulated fleet, then runs each
command `--repeat` times as a fresh process (`python -c "...run()"`, what the `gpufleet`
console script does) and prints median and p90 of its wall time and its CPU time (user +
sys, from `os.wait4`). With `--before SRC`, the same commands also run from another source
tree (`PYTHONPATH=SRC`, say a worktree of main), alternating run by run with this one so
both see the same load: on a shared machine only a side-by-side figure means anything.
Each command's stdout is compared between the two trees: start-up work must not change
what a command prints (help text excepted).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_fleet_scale import register_fleet
from common import percentile, running_server

THIS_SRC = Path(__file__).resolve().parent.parent / "src"
CONSOLE_SCRIPT = "import sys; from gpufleet.cli.main import run; sys.exit(run())"
COMMANDS = [
    ["--help"],
    ["fleet", "summary"],
    ["fleet", "summary", "--json"],
    ["request", "ls"],
]


def run_once(src: Path, args: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    """(wall ms, CPU ms, stdout) of one `gpufleet <args>` from the tree `src`."""
    with tempfile.TemporaryFile() as stdout:
        started_s = time.perf_counter()
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c", CONSOLE_SCRIPT, *args],
                             {**env, "PYTHONPATH": str(src)},
                             file_actions=[(os.POSIX_SPAWN_DUP2, stdout.fileno(), 1)])
        _, status, usage = os.wait4(pid, 0)
        wall_ms = (time.perf_counter() - started_s) * 1000
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"gpufleet {' '.join(args)} from {src} failed")
        stdout.seek(0)
        return wall_ms, (usage.ru_utime + usage.ru_stime) * 1000, stdout.read()


def describe(values: list[float]) -> str:
    return f"median {statistics.median(values):6.0f}  p90 {percentile(values, 0.9):6.0f}"


def measure(trees: dict[str, Path], repeat: int, env: dict[str, str]) -> None:
    for args in COMMANDS:
        wall: dict[str, list[float]] = {label: [] for label in trees}
        cpu: dict[str, list[float]] = {label: [] for label in trees}
        outputs: dict[str, bytes] = {}
        for _ in range(repeat):
            for label, src in trees.items():
                wall_ms, cpu_ms, stdout = run_once(src, args, env)
                wall[label].append(wall_ms)
                cpu[label].append(cpu_ms)
                outputs[label] = stdout
        print(f"gpufleet {' '.join(args)}  (n={repeat} each)")
        for label in trees:
            print(f"  {label:<6} wall ms {describe(wall[label])}   "
                  f"CPU ms {describe(cpu[label])}")
        if len(set(outputs.values())) > 1 and args != ["--help"]:
            print("  !! stdout differs between the trees")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--before", type=Path, help="another source tree to compare with")
    parser.add_argument("--nodes", type=int, default=4, help="simulated nodes × 8 GPUs")
    args = parser.parse_args()
    trees = {"after": THIS_SRC} if args.before is None else {
        "before": args.before.resolve(), "after": THIS_SRC}
    with tempfile.TemporaryDirectory() as tmp, \
            running_server(Path(tmp), None, heartbeat_interval_s=3600) as (url, token):
        asyncio.run(register_fleet(url, token, args.nodes, concurrency=4))
        env = {name: value for name, value in os.environ.items()
               if not name.startswith("GPUFLEET_")}
        env.update({"GPUFLEET_URL": url, "GPUFLEET_TOKEN": token,
                    "GPUFLEET_CONFIG_DIR": str(Path(tmp) / "config"), "COLUMNS": "120"})
        print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        measure(trees, args.repeat, env)
        print(f"load average at end:   {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
