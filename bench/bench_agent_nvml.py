"""CPU time per collection cycle of the agent's nvml backend.

    python bench/bench_agent_nvml.py [--cycles 200] [--fake]

With a working NVML (a driver and GPUs on this machine) it times `NvmlBackend.collect()` over
the real nvidia-ml-py: that figure is the one the target is about (≤ 5 ms CPU per cycle for
8 GPUs). Without one it says so and times the same backend over the tests' fake pynvml
(tests/fake_nvml.py) with 8 H100s (field values, GPM over two samples, NVLink per link,
processes every cycle, a few XID events): a regression figure for our own overhead only,
since the fake answers in Python in microseconds and real NVML calls cost more.

Each cycle is timed with time.process_time (CPU of this process) after a warm-up. By default
every cycle is a slow tick (processes, costly counters), the costliest case; `--process-every 5`
is the agent's default cadence.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fake_nvml import FakeGpu, FakeNvml, FakeProcess

from gpufleet.agent.nvml_backend import DEFAULT_PROCESS_EVERY, NvmlBackend, NvmlUnavailable

CYCLE_TARGET_MS = 5.0
WARM_UP = 5
GPUS = 8


def fake_node() -> FakeNvml:
    gpus = []
    for i in range(GPUS):
        gpu = FakeGpu(f"GPU-bench-{i}", processes=[FakeProcess(1000 + i, 8 << 30)],
                      process_util={1000 + i: 50})
        gpu.fields.update({fid: (3, 0) for fid in (5, 6, 38, 45, 52, 59, 94, 142, 143)})
        gpu.fields.update({82: (1, 60), 144: (3, 0), 145: (3, 0)})
        gpu.gpm.update({mid: 10.0 for mid in range(1, 98)})
        gpus.append(gpu)
    return FakeNvml(gpus)


def cpu_ms_per_cycle(source: NvmlBackend, cycles: int, fake: FakeNvml | None) -> list[float]:
    for _ in range(WARM_UP):
        source.collect()
    times = []
    for n in range(cycles):
        if fake is not None and n % 50 == 0:
            fake.inject_xid(n % GPUS, 79)
        started = time.process_time()
        source.collect()
        times.append((time.process_time() - started) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--fake", action="store_true", help="use the fake even with a GPU")
    parser.add_argument("--process-every", type=int, default=1,
                        help="the slow-tick cadence: processes and costly counters every N "
                             f"collects (1: every collect, the costliest; the agent's "
                             f"default is {DEFAULT_PROCESS_EVERY})")
    args = parser.parse_args()

    fake = None
    source = NvmlBackend("bench", process_every=args.process_every)
    on = "real NVML"
    if not args.fake:
        try:
            source.collect()
        except NvmlUnavailable as exc:
            print(f"no usable NVML here ({exc})")
            args.fake = True
    if args.fake:
        source.close()
        fake = fake_node()
        source = NvmlBackend("bench", lib=fake, process_every=args.process_every)
        on = f"the FAKE pynvml ({GPUS} H100s): our overhead only, not an NVML figure"
    with source:
        snapshot = source.collect()
        values = sum(len(u.values) + len(u.labelled) for u in snapshot.units)
        print(f"running on {on}: {len(snapshot.units)} units, {values} values per snapshot; "
              f"{args.cycles} cycles after {WARM_UP} warm-up, slow tick every "
              f"{args.process_every}")
        times = sorted(cpu_ms_per_cycle(source, args.cycles, fake))
    median = statistics.median(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    gpus = GPUS if fake else len({u.gpu_uuid for u in snapshot.units})
    target_ms = CYCLE_TARGET_MS * gpus / GPUS  # the target is per 8-GPU cycle: prorated
    verdict = "meets" if median <= target_ms else "MISSES"
    print(f"collect, {gpus} GPUs   median {median:6.2f} ms  p95 {p95:6.2f} ms  "
          f"max {times[-1]:6.2f} ms  ({verdict} the target, {CYCLE_TARGET_MS:g} ms per {GPUS} "
          f"GPUs = {target_ms:.2f} ms for {gpus}{'; fake: not the real figure' if fake else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
