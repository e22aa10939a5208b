"""One evaluation of the GPU health rules (docs/operations.md, "GPU health and quarantine",
"MIG instances") on the embedded (DuckDB) telemetry store: CPU seconds, and what reading
the MIG instances' XIDs adds.

    .venv/bin/python bench/bench_health_loop.py --gpus 10000

The fleet is bench_alert_rules.py's: the state store by bulk insert (nodes of 8 GPUs,
75 % of GPUs bound) and the health metrics the rules read for the last `--health-minutes`
(an XID counter on 1 % of GPUs, a few GPUs with ECC, remapping and throttling), plus an
XID 94 counter filed under a MIG instance on 0.5 % of GPUs (as the nvml agent files an
event that names a GPU instance). The state store has no MIG instances, so no instance
moves: what is timed is the reading.

Reported: CPU and wall time of `Gpufleet.evaluate_gpu_health` (the first, which moves
GPUs, apart from the median of the repeats, which find them moved), and of its two
fleet-wide telemetry reads alone: the GPUs' signals (`read_signals`) and the instances'
XIDs (`instance_xids`), the part MIG instance health added.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench_alert_rules import load_health, timed
from bench_telemetry_queries import ENVIRONMENTS, NOW, load_state
from gpufleet.clock import ManualClock
from gpufleet.server import tune_garbage_collector
from gpufleet.services.app import Gpufleet
from gpufleet.services.operations.health_signals import (
    contained_per_gpu,
    instance_xids,
    read_signals,
)
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore


def load_instance_xids(store: DuckDBTelemetryStore, gpus: int) -> int:
    """An XID 94 counter on one MIG instance of every 200th GPU, risen a minute ago."""
    struck = range(5, gpus, 200)
    for minutes_ago, value in ((30, 0.0), (1, 1.0)):
        store.write([Sample(series("gpu.xid_errors_total", f"GPU-{g:08d}", f"MIG-{g:08d}-0",
                                   labels={"xid": "94"}, node=f"node-{g // 8:05d}",
                                   environment=ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)],
                                   model="H100-80GB"),
                            NOW - timedelta(minutes=minutes_ago), value) for g in struck])
    return len(struck)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--health-minutes", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    tune_garbage_collector()
    with tempfile.TemporaryDirectory(prefix="bench-health-") as tmp:
        root = Path(tmp)
        state = StateStore(f"sqlite:///{root / 'state.db'}")
        state.migrate()
        load_state(state, args.gpus, random.Random(args.seed))
        telemetry = DuckDBTelemetryStore(root / "telemetry.duckdb")
        load_health(telemetry, args.gpus, args.health_minutes)
        print(f"MIG instance XID series: {load_instance_xids(telemetry, args.gpus):,}")
        settings = Settings(data_dir=root / "data")
        gf = Gpufleet(state, settings, ManualClock(NOW), telemetry=telemetry)
        window = timedelta(seconds=settings.health_window_s)

        moves, cpu, wall = timed(gf.evaluate_gpu_health)
        print(f"first evaluation: CPU {cpu:.2f} s, wall {wall:.2f} s, {len(moves):,} moves")
        rows = {"evaluate_gpu_health": [], "read_signals": [], "instance_xids": []}
        uuids = {f"GPU-{g:08d}": None for g in range(args.gpus)}
        for _ in range(args.repeats):
            rows["evaluate_gpu_health"].append(timed(gf.evaluate_gpu_health)[1:])
            xids, *spent = timed(lambda: instance_xids(telemetry, NOW, window))
            rows["instance_xids"].append(spent)
            contained = contained_per_gpu(xids)
            rows["read_signals"].append(timed(lambda c=contained: read_signals(
                telemetry, uuids, NOW, window, contained=c))[1:])
        for name, spent in rows.items():
            print(f"{name}: median CPU {statistics.median(c for c, _ in spent):.3f} s, "
                  f"wall {statistics.median(w for _, w in spent):.3f} s "
                  f"({args.repeats} repeats)")
        print(f"instances with XIDs: {len(xids):,}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"total {time.perf_counter() - t0:.1f} s")
