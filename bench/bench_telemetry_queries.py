"""Telemetry queries at the API: project-average sm_active over 24 h, the funnel by project
over 24 h (and its trend in 30-minute steps), and the idle list, at 10,000 and 100,000
GPUs with 24 h of history.

    .venv/bin/python bench/bench_telemetry_queries.py --gpus 10000
    .venv/bin/python bench/bench_telemetry_queries.py --gpus 100000 --repeats 10

The state store (SQLite) gets environments, nodes, GPUs, projects, requests and bindings by
bulk insert (registration through the API is bench_fleet_scale's subject). The embedded
DuckDB store gets the series dictionary through `write()`, then 24 h of 1-minute rollups of
gr_engine_active, sm_active and memory_used per GPU by SQL, laid out as the store's own
compaction leaves closed hours (series, time), and their 1-hour rollups. About 60 % of the
GPUs are busy, 25 % idle (a third of those holding memory), the rest switch; 75 % are bound,
some bindings ending and others starting inside the window. Each query then runs through
the ASGI app (`TestClient`, real HTTP semantics in-process): the first call (cold caches)
is reported apart from the p50 / p99 of the rest, and the process's CPU time per call (all
threads). The idle list is paged: its first page (the default size), and a page of 1,000.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import insert

from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Binding, Environment, Gpu, GpuRequest, Node, Project
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, to_ms

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
METRICS = ("gpu.gr_engine_active", "gpu.sm_active", "gpu.memory_used_bytes")
ENVIRONMENTS = ("azure-koreacentral", "onprem-hpc", "onprem-slicing", "aws-us-east-1")
PROJECTS = 200
GIB = 1024**3


def load_state(store: StateStore, gpus: int, rng: random.Random) -> list[tuple[str, int, int]]:
    """Inventory and bindings; returns (uuid, node index, project id) of every GPU."""
    t0 = NOW - timedelta(days=3)
    nodes = gpus // 8
    with store.write() as s:
        s.execute(insert(Environment), [
            {"id": i + 1, "name": name, "kind": "cloud", "default_sharing_mode": "exclusive",
             "created_at": t0} for i, name in enumerate(ENVIRONMENTS)])
        s.execute(insert(Node), [
            {"id": n + 1, "name": f"node-{n:05d}", "machine_id": f"m-{n}",
             "environment_id": n % len(ENVIRONMENTS) + 1, "cpu_cores": 112,
             "memory_bytes": 2048 * GIB, "admin_state": "active", "reachable": True,
             "status": "ready", "registered_at": t0, "last_seen_at": NOW,
             "desired_state_version": 1} for n in range(nodes)])
        s.execute(insert(Gpu), [
            {"id": g + 1, "uuid": f"GPU-{g:08d}", "node_id": g // 8 + 1,
             "environment_id": (g // 8) % len(ENVIRONMENTS) + 1, "index": g % 8,
             "model": "H100-80GB", "model_known": True, "reported_name": "NVIDIA H100",
             "memory_bytes": 80 * GIB, "sharing_mode": "exclusive", "health": "healthy",
             "status": "allocated", "allocated": True, "used_milli": 0, "first_seen_at": t0}
            for g in range(gpus)])
        s.execute(insert(Project), [
            {"id": p + 1, "name": f"project-{p:03d}", "organisation": "research",
             "created_at": t0} for p in range(PROJECTS)])
        requests, bindings, owners = [], [], []
        for g in range(gpus):
            if rng.random() >= 0.75:
                continue
            project = rng.randrange(PROJECTS) + 1
            start = NOW - timedelta(hours=rng.uniform(2, 36))
            end = None if rng.random() < 0.85 else start + timedelta(hours=rng.uniform(1, 10))
            if end is not None and end > NOW:
                end = None
            rid = len(requests) + 1
            requests.append({"id": rid, "project_id": project, "requested_by": "bench",
                             "kind": "whole", "milli": 1000, "count": 1,
                             "state": "active" if end is None else "released",
                             "created_at": start})
            bindings.append({"request_id": rid, "project_id": project, "gpu_id": g + 1,
                             "node_id": g // 8 + 1, "kind": "whole", "milli": 1000,
                             "started_at": start, "ended_at": end})
            owners.append((f"GPU-{g:08d}", g // 8, project))
        s.execute(insert(GpuRequest), requests)
        s.execute(insert(Binding), bindings)
    return owners


def load_telemetry(path: Path, gpus: int, hours: int = 24) -> DuckDBTelemetryStore:
    """`hours` of history up to NOW (bench_gpu_page.py asks for fewer)."""
    store = DuckDBTelemetryStore(path)
    before = NOW - timedelta(days=2)
    store.write([Sample(series(m, f"GPU-{g:08d}", node=f"node-{g // 8:05d}",
                               environment=ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)],
                               model="H100-80GB"), before, 0.0)
                 for g in range(gpus) for m in METRICS])
    ids = {(labels.gpu_uuid, labels.metric): sid for labels, sid in store._ids.items()}
    con = store._con
    con.execute("CREATE TEMP TABLE sid_map (sid INTEGER, g INTEGER, metric TINYINT)")
    con.execute("INSERT INTO sid_map SELECT unnest($1::INTEGER[]), unnest($2::INTEGER[]), "
                "unnest($3::TINYINT[])", [
                    [ids[(f"GPU-{g:08d}", m)] for g in range(gpus) for m in METRICS],
                    [g for g in range(gpus) for _ in METRICS],
                    [i for _ in range(gpus) for i in range(len(METRICS))]])
    lo = to_ms(NOW - timedelta(hours=hours)) // HOUR_MS * HOUR_MS
    hi = to_ms(NOW)
    # Per GPU a kind (hash): 0–59 busy, 60–84 idle (a third holding memory), 85–99 switching.
    value = """CASE metric
        WHEN 0 THEN CASE WHEN k < 60 THEN 70 + (h % 25) WHEN k < 85 THEN (h % 3)::DOUBLE
                         ELSE (CASE WHEN (m // 90) % 2 = 0 THEN 60 ELSE 1 END) END
        WHEN 1 THEN CASE WHEN k < 60 THEN 35 + (h % 40) WHEN k < 85 THEN 0
                         ELSE (CASE WHEN (m // 90) % 2 = 0 THEN 45 ELSE 0 END) END
        ELSE CASE WHEN k < 60 OR (k < 85 AND k % 3 = 0) THEN 40e9 ELSE 1e8 END END"""
    t = time.perf_counter()
    for hour in range(lo, hi, HOUR_MS):
        con.execute(f"""INSERT INTO rollup_1m
            SELECT sid, bucket_ms, v, v, v, v, v, 6, 0 FROM (
              SELECT sid, {hour} + minute * {MINUTE_MS} AS bucket_ms, {value} AS v
              FROM (SELECT sid, metric, hash(g) % 100 AS k, hash(g * 1440 + minute) % 1000 AS h,
                           (({hour} - {lo}) // {MINUTE_MS} + minute)::BIGINT AS m, minute
                    FROM sid_map, range(60) t(minute)
                    WHERE {hour} + minute * {MINUTE_MS} < {hi}))
            ORDER BY sid, bucket_ms""")
    con.execute(f"""INSERT INTO rollup_1h SELECT series_id, bucket_ms // {HOUR_MS} * {HOUR_MS},
        arg_min(v_first, bucket_ms), arg_max(v_last, bucket_ms), avg(v_mean), min(v_min),
        max(v_max), sum(n)::INTEGER, 0 FROM rollup_1m WHERE bucket_ms < {hi // HOUR_MS * HOUR_MS}
        GROUP BY ALL ORDER BY 1, 2""")
    con.execute("INSERT OR REPLACE INTO rollup_state VALUES ('1m', $1), ('1h', $2)",
                [hi // MINUTE_MS * MINUTE_MS, hi // HOUR_MS * HOUR_MS])
    con.execute("CHECKPOINT")
    rows = con.execute("SELECT count(*) FROM rollup_1m").fetchone()[0]
    print(f"telemetry: {rows:,} 1-minute rollup rows loaded in {time.perf_counter() - t:.1f} s")
    return store


def measure(client: TestClient, token: str, path: str, params: dict, repeats: int) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    times, cpu = [], []
    for i in range(repeats + 1):
        t, c = time.perf_counter(), time.process_time()
        response = client.get(path, params=params, headers=headers)
        elapsed = (time.perf_counter() - t) * 1000
        assert response.status_code == 200, response.text
        if i == 0:
            first, body = elapsed, response.json()
        else:
            times.append(elapsed)
            cpu.append((time.process_time() - c) * 1000)
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    # CPU of the whole process (every thread: the app's and DuckDB's), steadier than wall
    # time on a shared machine.
    print(f"{path} {params}\n  first {first:8.1f} ms   p50 {statistics.median(times):8.1f} ms"
          f"   p99 {p99:8.1f} ms   CPU p50 {statistics.median(cpu):8.1f} ms"
          f"   ({repeats} repeats)   {_summary(body)}")


def _summary(body: dict) -> str:
    if "fleet" in body and "rows" in body:
        f = body["fleet"]
        return (f"{len(body['rows'])} rows; fleet allocated {f['allocated_gpu_hours']:,.0f} "
                f"active {f['active_gpu_hours']:,.0f} effective "
                f"{f['effective_gpu_hours']:,.0f} GPU-h")
    if "series" in body:
        return f"{len(body['series'])} series"
    more = " (more pages)" if body.get("next_cursor") else ""
    return f"{len(body.get('items', []))} items{more}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-tq-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        state = StateStore(f"sqlite:///{root / 'state.db'}")
        state.migrate()
        owners = load_state(state, args.gpus, rng)
        print(f"state: {args.gpus:,} GPUs, {len(owners):,} bound, in "
              f"{time.perf_counter() - t:.1f} s")
        telemetry = load_telemetry(root / "telemetry.duckdb", args.gpus)
        settings = Settings(data_dir=root / "data")
        gf = Gpufleet(state, settings, ManualClock(NOW), telemetry=telemetry)
        token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
        with TestClient(create_app(gf, background_loops=False)) as client:
            measure(client, token, "/api/v1/telemetry/query",
                    {"metric": "gpu.sm_active", "by": "project", "since": "24h",
                     "step": "24h"}, args.repeats)
            measure(client, token, "/api/v1/telemetry/funnel",
                    {"by": "project", "window": "24h"}, args.repeats)
            measure(client, token, "/api/v1/telemetry/funnel",
                    {"by": "environment", "window": "24h"}, args.repeats)
            measure(client, token, "/api/v1/telemetry/funnel",  # the Fleet page's trend
                    {"window": "24h", "step": "30m"}, args.repeats)
            measure(client, token, "/api/v1/telemetry/funnel",  # an Environment page's
                    {"by": "environment", "window": "24h", "step": "30m"}, args.repeats)
            measure(client, token, "/api/v1/telemetry/idle", {}, args.repeats)
            measure(client, token, "/api/v1/telemetry/idle", {"limit": 1000}, args.repeats)
        gf.close()


if __name__ == "__main__":
    main()
