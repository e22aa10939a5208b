"""Embedded telemetry store (DuckDB): write throughput, bytes per raw sample, rollup time and
query latency.

A fleet of N GPUs sends the core catalogue (`catalogue.CORE`, 19 metrics) every 10 s; each
tick of the whole fleet is one `write()` batch. Values have the precision their sources
give: DCGM profiling ratios ×100 (many digits), NVML integers (utilization, temperature,
clocks), memory in MiB, power and energy in milli-units; about a third of the GPUs idle.

    .venv/bin/python bench/bench_tsdb.py                      # 200 GPUs × 2 h, ~1 minute
    .venv/bin/python bench/bench_tsdb.py --gpus 10000 --hours 24 --synthetic

`--synthetic` writes only `--write-ticks` ticks through `write()` (the throughput figure)
and fills the rest of the history in SQL, with values as random as a profiling ratio's —
the pessimistic case for compression — since 10,000 GPUs × 24 h is 1.6 billion samples.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from gpufleet.domain.telemetry.catalogue import CORE
from gpufleet.tsdb import Binding, Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore

T0 = datetime(2026, 11, 1, 0, 0, tzinfo=UTC)
TICK_S = 10
PROFILING = {"gpu.gr_engine_active", "gpu.sm_active", "gpu.sm_occupancy", "gpu.tensor_active",
             "gpu.dram_active"}


class Fleet:
    def __init__(self, gpus: int, seed: int = 1):
        self.rng = random.Random(seed)
        self.load = [0.0 if self.rng.random() < 0.35 else self.rng.uniform(20, 95)
                     for _ in range(gpus)]
        self.series = [[series(m, f"GPU-{g:05d}", node=f"node-{g // 8:04d}",
                               environment=f"env-{g % 4}", model="H100" if g % 2 else "A100")
                        for m in CORE] for g in range(gpus)]
        self.energy = [0.0] * gpus
        self.ecc = [0.0] * gpus
        self.replays = [0.0] * gpus

    def tick(self, i: int) -> list[Sample]:
        at = T0 + timedelta(seconds=i * TICK_S)
        rng = self.rng
        batch = []
        for g, row in enumerate(self.series):
            load = max(0.0, min(100.0, self.load[g] + rng.gauss(0, 5))) if self.load[g] else 0.0
            power = round(70 + load * 6 + rng.random() * 10, 3)
            self.energy[g] += power * TICK_S
            if rng.random() < 1e-4:
                self.ecc[g] += 1
            if rng.random() < 1e-3:
                self.replays[g] += rng.randint(1, 5)
            values = {
                "gpu.utilization": float(round(min(100, load * 1.2))),
                "gpu.memory_used_bytes": float((2000 + int(load * 700)) * 2**20 if load else 0),
                "gpu.memory_total_bytes": float(81559 * 2**20),
                "gpu.power_usage_watts": power,
                "gpu.energy_joules_total": round(self.energy[g], 3),
                "gpu.temperature_celsius": float(30 + int(load / 2)),
                "gpu.memory_temperature_celsius": float(32 + int(load / 2.2)),
                "gpu.sm_clock_mhz": float(1980 if load else 345),
                "gpu.clock_throttle_reasons": 0.0 if load < 90 else 4.0,
                "gpu.xid_last_code": 0.0,
                "gpu.ecc_uncorrected_errors_total": self.ecc[g],
                "gpu.remapped_rows_pending": 0.0,
                "gpu.remapped_rows_failed": 0.0,
                "gpu.pcie_replays_total": self.replays[g],
            }
            for s in row:
                if s.metric in PROFILING:
                    value = load / 100 * rng.uniform(0.6, 1.0) * 100 if load else 0.0
                else:
                    value = values[s.metric]
                batch.append(Sample(s, at, value))
        return batch


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write_history(store: DuckDBTelemetryStore, fleet: Fleet, ticks: int) -> dict[str, float]:
    wall = cpu = 0.0
    samples = 0
    for i in range(ticks):
        batch = fleet.tick(i)
        started, started_cpu = time.perf_counter(), time.process_time()
        samples += store.write(batch)
        wall += time.perf_counter() - started
        cpu += time.process_time() - started_cpu
    return {"samples": samples, "samples_per_s": samples / wall,
            "cpu_s_per_million": cpu / samples * 1e6, "batch_ms": wall / ticks * 1000}


def synthetic_history(store: DuckDBTelemetryStore, first_tick: int, ticks: int) -> float:
    started = time.perf_counter()
    store._con.execute(f"""
        INSERT INTO samples
        SELECT s.series_id, {int(T0.timestamp() * 1000)} + r.range * {TICK_S * 1000},
               CASE WHEN s.metric IN ({", ".join(f"'{m}'" for m in PROFILING)})
                    THEN (hash(s.series_id, r.range) % 100000000) / 1000000.0
                    ELSE (hash(s.series_id, r.range) % 100)::DOUBLE END
        FROM range({first_tick}, {first_tick + ticks}) r, series s ORDER BY r.range""")
    return time.perf_counter() - started


def raw_bytes_per_sample(store: DuckDBTelemetryStore, workdir: Path) -> tuple[float, int]:
    """The raw tier alone, copied in its storage order into a file of its own, less the
    same file with the table empty."""
    workdir.mkdir()
    store.checkpoint()
    con = store._con
    (count,) = con.execute("SELECT count(*) FROM samples").fetchone()
    used = []
    for name, rows in (("empty", "WHERE FALSE"), ("raw", "")):
        path = workdir / f"{name}.duckdb"
        con.execute(f"ATTACH '{path}' AS copy")
        con.execute(f"CREATE TABLE copy.samples AS SELECT * FROM samples {rows}")
        con.execute("DETACH copy")
        copy = duckdb.connect(str(path))
        copy.execute("CHECKPOINT")
        used.append(copy.execute(
            "SELECT used_blocks * block_size FROM pragma_database_size()").fetchone()[0])
        copy.close()
    return (used[1] - used[0]) / count, count


def bindings(rng: random.Random, uuids: list[str], per_project: int,
             start: datetime) -> dict:
    """Every GPU bound to one of many projects for the whole window; one project asked."""
    return {(u, None): [Binding(start, None, f"alloc-{u}", f"p{i // per_project}")]
            for i, u in enumerate(rng.sample(uuids, len(uuids)))}


def time_queries(store: DuckDBTelemetryStore, gpus: int, hours: int, per_project: int,
                 repeats: int) -> dict[str, tuple[float, float]]:
    end = T0 + timedelta(hours=hours)
    start = end - timedelta(hours=min(24, hours))
    rng = random.Random(2)
    uuids = [f"GPU-{g:05d}" for g in range(gpus)]
    cases = {
        "project sm_active mean, 5 min step": lambda: store.query_range(
            "gpu.sm_active", start, end, timedelta(minutes=5),
            filters={"gpu_uuid": rng.sample(uuids, min(per_project, gpus))}),
        "project sm_active mean via bindings, 5 min step": lambda: store.query_range(
            "gpu.sm_active", start, end, timedelta(minutes=5), group_by=["project"],
            filters={"project": ["p0"]}, bindings=bindings(rng, uuids, per_project, start)),
        "project sm_active mean, 1 h step": lambda: store.query_range(
            "gpu.sm_active", start, end, timedelta(hours=1),
            filters={"gpu_uuid": rng.sample(uuids, min(per_project, gpus))}),
        "fleet memory used by environment, 1 h step": lambda: store.query_range(
            "gpu.memory_used_bytes", start, end, timedelta(hours=1), group_by=["environment"]),
        "fleet energy increase, 1 h step": lambda: store.query_range(
            "gpu.energy_joules_total", start, end, timedelta(hours=1)),
        "latest sm_active of every GPU": lambda: store.latest(
            metric="gpu.sm_active", since=end - timedelta(minutes=5)),
    }
    figures = {}
    for name, query in cases.items():
        query()
        took = []
        for _ in range(repeats):
            started = time.perf_counter()
            query()
            took.append((time.perf_counter() - started) * 1000)
        figures[name] = (statistics.median(took), percentile(took, 0.99))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=200)
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--synthetic", action="store_true",
                        help="write --write-ticks ticks, fill the rest of the history in SQL")
    parser.add_argument("--write-ticks", type=int, default=30)
    parser.add_argument("--project-gpus", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=None, help="DuckDB threads")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-tsdb-"))
    try:
        store = DuckDBTelemetryStore(workdir / "telemetry.duckdb", threads=args.threads)
        fleet = Fleet(args.gpus)
        ticks = args.hours * 3600 // TICK_S
        written = min(ticks, args.write_ticks) if args.synthetic else ticks
        print(f"{args.gpus} GPUs × {len(CORE)} metrics every {TICK_S} s, {args.hours} h "
              f"({ticks} ticks, {written} through write())")
        w = write_history(store, fleet, written)
        print(f"write: {w['samples']:,} samples, {w['samples_per_s']:,.0f} samples/s, "
              f"{w['cpu_s_per_million']:.2f} CPU-s per million samples, "
              f"{w['batch_ms']:.1f} ms per {args.gpus}-GPU batch")
        if written < ticks:
            took = synthetic_history(store, written, ticks - written)
            print(f"synthetic fill: {ticks - written} ticks in {took:.1f} s")
        per_sample, count = raw_bytes_per_sample(store, workdir / "as-written")
        print(f"raw tier as written: {count:,} samples, {per_sample:.2f} bytes per sample")
        started, started_cpu = time.perf_counter(), time.process_time()
        store.rollup(T0 + timedelta(hours=args.hours))
        print(f"rollup of {args.hours} h into 1m and 1h (compacting raw): "
              f"{time.perf_counter() - started:.2f} s, "
              f"{time.process_time() - started_cpu:.2f} CPU-s")
        per_sample, count = raw_bytes_per_sample(store, workdir / "compacted")
        print(f"raw tier compacted: {per_sample:.2f} bytes per sample")
        store.checkpoint()
        size = Path(store.path).stat().st_size
        (used,) = store._con.execute(
            "SELECT used_blocks * block_size FROM pragma_database_size()").fetchone()
        print(f"store (raw + rollups + series): {used / 2**20:.1f} MiB in use, "
              f"{used / count:.2f} bytes per raw sample; file {size / 2**20:.1f} MiB "
              "(free blocks are reused, the file does not shrink)")
        for name, (p50, p99) in time_queries(store, args.gpus, args.hours, args.project_gpus,
                                             args.repeats).items():
            print(f"query {name}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
        store.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
