"""CPU time of one telemetry collection cycle of the `sim` agent backend, and its memory.

    python bench/bench_agent_sim.py --cycles 2000

For each node shape, a SimBackend with about `--bound` of its units bound to allocations
(seeded workload kinds, seeded faults) collects `--cycles` snapshots `--every-s` simulated
seconds apart, as the agent's loop would. Prints the process CPU time per cycle (the
agent's budget is 5 ms per cycle on NVML; the simulator should stay well under it), the
units and series per snapshot, and the process RSS before and after (a growing RSS over
the cycles would be a leak: the backend caches per unit, never per tick).

The p99 is the interpreter's full garbage collections (every ~100 cycles here, ~15 ms):
each snapshot's objects outlive a cycle, so they reach the oldest generation, and a full
collection walks every object the process has. `--freeze-gc` calls `gc.freeze()` after
warm-up, as a long-running agent can after start-up, so those walks skip the start-up heap.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta

from common import percentile
from gpufleet.sim.backend import SimBackend, standalone_backend
from gpufleet.wire.agent import DesiredState

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def bound_backend(shape: str, bound: float, coverage: str, fault_rate: float) -> SimBackend:
    node = standalone_backend(shape, f"bench-{shape}", seed=1).node
    backend = SimBackend(node, coverage=coverage, fault_rate=fault_rate)
    bindings = []
    for gpu in backend.discover().gpus:
        units = [({"unit": f"{gpu.uuid}/mig/{i.profile_id}@{i.placement_start}",
                   "mig_profile_id": i.profile_id, "placement_start": i.placement_start})
                 for i in gpu.mig_instances] or [{"unit": gpu.uuid}]
        for unit in units:
            number = len(bindings) + 1
            if (number * 0.618) % 1.0 < bound:
                bindings.append({**unit, "gpu_uuid": gpu.uuid, "project": "bench",
                                 "allocation": f"GR-{1000 + number}"})
    backend.apply_desired_state(DesiredState.model_validate(
        {"version": 1, "bindings": bindings}))
    return backend


def run(shape: str, args: argparse.Namespace) -> None:
    backend = bound_backend(shape, args.bound, args.coverage, args.fault_rate)
    step = timedelta(seconds=args.every_s)
    for n in range(20):  # warm the caches (workloads, GPUs, offered metrics)
        backend.collect(at=START + n * step)
    if args.freeze_gc:
        gc.collect()
        gc.freeze()
    before = rss_mib()
    cpu_ms = []
    for n in range(args.cycles):
        at = START + (20 + n) * step
        started = time.process_time()
        snapshot = backend.collect(at=at)
        cpu_ms.append((time.process_time() - started) * 1000.0)
    after = rss_mib()
    units = len(snapshot.units)
    series = sum(len(u.values) + len(u.labelled)
                 + sum(len(p.values) for p in u.processes) for u in snapshot.units)
    gpus = len(backend.discover().gpus)
    print(f"{shape:18s} {gpus} GPUs {units:3d} units {series:5d} series | CPU per cycle "
          f"p50 {percentile(cpu_ms, 0.5):5.2f} ms  p99 {percentile(cpu_ms, 0.99):5.2f} ms  "
          f"mean {statistics.fmean(cpu_ms):5.2f} ms | RSS {before:6.1f} -> {after:6.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+",
                        default=["dgx-h100", "mig-h100", "l40s-8", "hgx-a100"])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--every-s", type=float, default=10.0)
    parser.add_argument("--bound", type=float, default=0.7, help="share of units bound")
    parser.add_argument("--coverage", choices=["dcgm", "nvml"], default="dcgm")
    parser.add_argument("--fault-rate", type=float, default=0.02)
    parser.add_argument("--freeze-gc", action="store_true",
                        help="gc.freeze() after warm-up, as a long-running agent may")
    args = parser.parse_args()
    print(f"sim backend: {args.cycles} cycles {args.every_s:g} s apart, {args.bound:.0%} of "
          f"units bound, coverage {args.coverage}, fault rate {args.fault_rate:g}"
          f"{', gc frozen after warm-up' if args.freeze_gc else ''}")
    for shape in args.shapes:
        run(shape, args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.1f} MiB (the interpreter, pydantic and gpufleet included)")


if __name__ == "__main__":
    main()
