"""CPU of the agent's telemetry cycle — collect, batch (columnar), encode (gzip JSON) — for
8 GPUs on the `sim` and `dcgm-exporter` backends, and the agent's memory.

    python bench/bench_agent_telemetry.py [--cycles 300] [--ticks-per-batch 3]

Per backend, after a warm-up and `gc.freeze()` (as the agent does after start-up):

- collect: one `collect()` (sim: a dgx-h100, 70 % of units bound; dcgm-exporter: the
  tests' 8-GPU H100 page mapped by `snapshot_from_text`, no HTTP: the scrape's own cost is
  in bench_agent_dcgm_exporter.py);
- batch + encode: `columnar` over `--ticks-per-batch` snapshots and `encode`, once per
  batch, reported per batch and per tick (what a collection cycle pays on average);
- cycle: collect + that tick's share of batch + encode.

Also the compressed size of one batch (the agent seals batches well under 1 MiB) and RSS.
"""

from __future__ import annotations

import argparse
import gc
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench_agent_sim import bound_backend, rss_mib
from common import percentile
from gpufleet.agent.dcgm_exporter import snapshot_from_text
from gpufleet.wire import telemetry_batch

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "dcgm_exporter"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def sim_collector():
    backend = bound_backend("dgx-h100", 0.7, "dcgm", 0.02)
    step = timedelta(seconds=10)
    ticks = iter(range(10**9))
    return lambda: backend.collect(at=START + next(ticks) * step)


def dcgm_collector():
    text = (DATA / "h100_8gpu.txt").read_text()
    ticks = iter(range(10**9))
    return lambda: snapshot_from_text(text, "dgx-h100-07",
                                      START + next(ticks) * timedelta(seconds=10))


def cpu_ms(fn) -> tuple[float, object]:
    started = time.process_time()
    result = fn()
    return (time.process_time() - started) * 1000.0, result


def run(name: str, collect, args: argparse.Namespace) -> None:
    for _ in range(10):
        collect()
    gc.collect()
    gc.freeze()
    before = rss_mib()
    collect_ms, batch_ms, sizes, buffer = [], [], [], []
    for n in range(args.cycles):
        spent, snapshot = cpu_ms(collect)
        collect_ms.append(spent)
        buffer.append(snapshot)
        if len(buffer) == args.ticks_per_batch:
            spent, payload = cpu_ms(lambda ticks=buffer, batch_id=f"b{n}": telemetry_batch.encode(
                telemetry_batch.columnar(batch_id, ticks)))
            batch_ms.append(spent)
            sizes.append(len(payload))
            buffer = []
    gc.unfreeze()
    per_tick = statistics.fmean(batch_ms) / args.ticks_per_batch
    series = sum(len(u.values) + len(u.labelled) for u in snapshot.units)
    print(f"{name:14s} {len(snapshot.units)} units {series} series | collect p50 "
          f"{percentile(collect_ms, 0.5):5.2f} ms p99 {percentile(collect_ms, 0.99):5.2f} ms | "
          f"batch+encode of {args.ticks_per_batch} ticks p50 {percentile(batch_ms, 0.5):5.2f} ms "
          f"p99 {percentile(batch_ms, 0.99):5.2f} ms | cycle mean "
          f"{statistics.fmean(collect_ms) + per_tick:5.2f} ms | batch "
          f"{statistics.fmean(sizes) / 1024:5.1f} KiB gzip | RSS {before:5.1f} -> "
          f"{rss_mib():5.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--ticks-per-batch", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.cycles} cycles, a batch every {args.ticks_per_batch} ticks, gc frozen "
          "after warm-up; CPU time of this process")
    run("sim", sim_collector(), args)
    run("dcgm-exporter", dcgm_collector(), args)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.1f} MiB (the interpreter, pydantic and gpufleet included)")


if __name__ == "__main__":
    main()
