"""One evaluation of the default alert rule pack (docs/operations.md, "Alert rules") on the
embedded (DuckDB) telemetry store: CPU seconds, at 10,000 and 100,000 GPUs with 24 h of
history.

    .venv/bin/python bench/bench_alert_rules.py --gpus 10000 --hours 24
    .venv/bin/python bench/bench_alert_rules.py --gpus 100000 --hours 24 --repeats 3

The fleet is bench_telemetry_queries.py's: the state store by bulk insert (nodes of 8
GPUs, 200 projects, 75 % of GPUs bound), the telemetry store with `--hours` of 1-minute
rollups (and their hourly rollups) of gr_engine_active, sm_active and memory_used per GPU.
On top, the health metrics the pack reads — memory total, temperature, clock throttle
reasons, ECC, row remapping, NVLink recovery errors, and an XID counter on 1 % of GPUs —
for the last `--health-minutes` (default 120: the pack's windows are ≤ 15 min, older rows
are not read) as 1-minute rollups — the closed hour as compaction leaves it (by series),
the last hour in time order as the minute fold appends it — and the raw tier's last 15
minutes (one sample a minute, in time order, memory used's too: the latest-value path
reads them), with a few GPUs over each threshold so every rule has something to find.

The process's garbage collector is tuned as the server's is (`tune_garbage_collector`):
with Python's defaults, full collections over the heap (the store's series dictionary,
the cached bindings) took half of an evaluation's CPU at 10,000 GPUs.

Reported: the process's CPU time (every thread: Python's and DuckDB's) and wall time of
`Gpufleet.evaluate_alert_rules` with the default pack — the first evaluation (cold: the
funnel's minute masks fold every kept minute) apart from the median of the repeats — and
each rule's own CPU, and how many observations each made.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from bench_telemetry_queries import ENVIRONMENTS, NOW, load_state, load_telemetry
from gpufleet.clock import ManualClock
from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.server import tune_garbage_collector
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, to_ms

GIB = 1024**3
# metric → SQL value per (k: the GPU's hash % 1000, m: minute index, h: a per-minute hash)
HEALTH = {
    "gpu.memory_total_bytes": f"{80 * GIB}",
    "gpu.temperature_celsius": "CASE WHEN k < 10 THEN 88 ELSE 55 + (h % 20) END",
    "gpu.clock_throttle_reasons": "CASE WHEN k < 10 THEN 64 WHEN k < 500 THEN 4 ELSE 0 END",
    "gpu.ecc_uncorrected_errors_total": "CASE WHEN k < 2 AND m >= mx - 3 THEN 1 ELSE 0 END",
    "gpu.remapped_rows_pending": "CASE WHEN k < 3 THEN 1 ELSE 0 END",
    "gpu.remapped_rows_failed": "CASE WHEN k < 1 THEN 1 ELSE 0 END",
    "gpu.nvlink_recovery_errors_total": "CASE WHEN k < 2 THEN m ELSE 0 END",
}
XID = "gpu.xid_errors_total"
RAW_MINUTES = 15


def load_health(store: DuckDBTelemetryStore, gpus: int, minutes: int) -> None:
    """The health metrics of every GPU (the XID counter of 1 % of them) for the last
    `minutes`, as the store's compaction leaves them: 1-minute rollups by SQL."""
    t = time.perf_counter()
    before = NOW - timedelta(days=2)
    attrs = lambda g: {"node": f"node-{g // 8:05d}",  # noqa: E731
                       "environment": ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)],
                       "model": "H100-80GB"}
    store.write([Sample(series(m, f"GPU-{g:08d}", **attrs(g)), before, 0.0)
                 for g in range(gpus) for m in HEALTH])
    xid_gpus = range(0, gpus, 100)
    store.write([Sample(series(XID, f"GPU-{g:08d}", labels={"xid": "79"}, **attrs(g)),
                        before, 0.0) for g in xid_gpus])
    names = [*HEALTH, XID]
    ids = [(sid, int(labels.gpu_uuid[4:]), names.index(labels.metric))
           for labels, sid in store._ids.items() if labels.metric in names]
    con = store._con
    con.execute("CREATE OR REPLACE TEMP TABLE health_map (sid INTEGER, g INTEGER, "
                "metric TINYINT)")
    con.execute("INSERT INTO health_map SELECT unnest($1::INTEGER[]), unnest($2::INTEGER[]),"
                " unnest($3::TINYINT[])", [[i[0] for i in ids], [i[1] for i in ids],
                                            [i[2] for i in ids]])
    cases = " ".join(f"WHEN {n} THEN ({sql})::DOUBLE" for n, sql in enumerate(HEALTH.values()))
    xid_value = f"WHEN {len(HEALTH)} THEN (CASE WHEN k % 2 = 0 AND m >= mx - 5 THEN 1 " \
                "ELSE 0 END)::DOUBLE"
    hi = to_ms(NOW)
    lo = hi - minutes * MINUTE_MS
    value = f"CASE metric {cases} {xid_value} END"
    rows = f"""SELECT sid, {lo} + m * {MINUTE_MS} AS bucket_ms, {value} AS v
          FROM (SELECT sid, metric, hash(g) % 1000 AS k, hash(g * 1440 + m) % 1000 AS h,
                       m, {minutes - 1} AS mx
                FROM health_map, range({minutes}) t(m))"""
    # Closed hours as the store's compaction leaves them, (series, time); the last hour in
    # time order, as the minute fold appends it.
    last_hour = hi - HOUR_MS
    for start in range(lo // HOUR_MS * HOUR_MS, hi, HOUR_MS):
        order = "bucket_ms, sid" if start >= last_hour else "sid, bucket_ms"
        con.execute(f"""INSERT INTO rollup_1m SELECT sid, bucket_ms, v, v, v, v, v, 1, 0
            FROM ({rows}) WHERE bucket_ms >= {max(start, lo)} AND bucket_ms < {start + HOUR_MS}
            ORDER BY {order}""")
    # The raw tier's newest rows (what the latest-value path reads): one sample a minute
    # in the last `RAW_MINUTES`, in time order as uploads append them; and memory used's.
    con.execute(f"""INSERT INTO samples SELECT sid, bucket_ms + 30000, v FROM ({rows})
        WHERE bucket_ms >= {hi - RAW_MINUTES * MINUTE_MS} ORDER BY bucket_ms, sid""")
    used = [sid for labels, sid in store._ids.items()
            if labels.metric == "gpu.memory_used_bytes"]
    con.execute(f"""INSERT INTO samples SELECT s.sid, {hi} - m * {MINUTE_MS} - 30000,
        r.v_last FROM (SELECT unnest($1::INTEGER[]) AS sid) s, range(1, {RAW_MINUTES + 1}) t(m),
        (SELECT series_id, arg_max(v_last, bucket_ms) AS v_last FROM rollup_1m
         WHERE bucket_ms >= {hi - MINUTE_MS} GROUP BY series_id) r
        WHERE r.series_id = s.sid ORDER BY 2, 1""", [used])
    con.execute("CHECKPOINT")
    print(f"health: {len(ids):,} series, {len(ids) * minutes:,} 1-minute rows, "
          f"{(len(ids) + len(used)) * RAW_MINUTES:,} raw samples in "
          f"{time.perf_counter() - t:.1f} s")


def load(root: Path, args: argparse.Namespace, rng: random.Random
         ) -> tuple[StateStore, DuckDBTelemetryStore]:
    t = time.perf_counter()
    state = StateStore(f"sqlite:///{root / 'state.db'}")
    state.migrate()
    owners = load_state(state, args.gpus, rng)
    print(f"state: {args.gpus:,} GPUs, {len(owners):,} bound, in "
          f"{time.perf_counter() - t:.1f} s")
    telemetry = load_telemetry(root / "telemetry.duckdb", args.gpus)
    load_health(telemetry, args.gpus, args.health_minutes)
    return state, telemetry


def timed(call):
    t, c = time.perf_counter(), time.process_time()
    result = call()
    return result, time.process_time() - c, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--health-minutes", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="load the fleet into DIR once and reuse it on later runs with "
                             "the same --gpus (loading 100,000 GPUs takes ~10 minutes)")
    args = parser.parse_args()
    tune_garbage_collector()  # the evaluation runs in the server, with its collector
    if args.hours != 24:
        raise SystemExit("--hours: bench_telemetry_queries.load_telemetry loads 24 h")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-rules-") as tmp:
        root = args.keep / f"{args.gpus}-gpus" if args.keep else Path(tmp)
        loaded = root / "loaded"
        if loaded.exists():
            state = StateStore(f"sqlite:///{root / 'state.db'}")
            telemetry = DuckDBTelemetryStore(root / "telemetry.duckdb")
            print(f"reusing the fleet loaded in {root}")
        else:
            root.mkdir(parents=True, exist_ok=True)
            state, telemetry = load(root, args, rng)
            loaded.touch()
        gf = Gpufleet(state, Settings(data_dir=root / "data"), ManualClock(NOW),
                      telemetry=telemetry)
        rules = list(default_rules())
        result, cpu, wall = timed(lambda: gf.evaluate_alert_rules(rules))
        assert not result.unavailable, result.unavailable
        print(f"first evaluation (cold masks): CPU {cpu:.2f} s, wall {wall:.2f} s, "
              f"{len(result.observations):,} observations")
        cpus, walls = [], []
        for _ in range(args.repeats):
            result, cpu, wall = timed(lambda: gf.evaluate_alert_rules(rules))
            cpus.append(cpu)
            walls.append(wall)
        print(f"default pack, {len(rules)} rules, {args.gpus:,} GPUs: CPU p50 "
              f"{statistics.median(cpus):.2f} s (max {max(cpus):.2f}), wall p50 "
              f"{statistics.median(walls):.2f} s ({args.repeats} repeats)")
        found = Counter(o.rule for o in result.observations)
        for rule in rules:
            _, cpu, wall = timed(lambda rule=rule: gf.evaluate_alert_rules([rule]))
            print(f"  {rule.name:28s} CPU {cpu * 1000:7.0f} ms  wall {wall * 1000:7.0f} ms"
                  f"  {found.get(rule.name, 0):6,} observations")
        gf.close()


if __name__ == "__main__":
    main()
