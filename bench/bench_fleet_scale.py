"""Register a simulated fleet of N nodes × 8 GPUs, then time the inventory queries.

    python bench/bench_fleet_scale.py --database sqlite   --nodes 12500
    python bench/bench_fleet_scale.py --database postgres --nodes 12500

Prints: total registration time, nodes/s, per-node registration latency (client-observed
and server-side), then p50/p99 of `GET /api/v1/fleet/summary` and of a filtered, sorted
first page of `GET /api/v1/gpus` (server-side, from Server-Timing, and client-observed).
Registration goes through the real agent protocol: join tokens, then one POST per node.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from common import describe_ms, running_server, server_ms
from gpufleet.sim.nodes import iter_nodes
from gpufleet.sim.scaled import scaled_spec

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
BENCH_SCHEMA = "gpufleet_bench"
QUERIES = {
    "fleet summary": "/api/v1/fleet/summary",
    "gpus first page (env+model filter, sort node, 100)":
        "/api/v1/gpus?environment=onprem-hpc&model=H100-80GB&sort=node&limit=100",
    "gpus first page (status filter, sort -memory, 100)":
        "/api/v1/gpus?status=free&sort=-memory&limit=100",
}


def fresh_postgres_url() -> str:
    engine = create_engine(POSTGRES)
    with engine.begin() as connection:
        connection.execute(text(f"DROP SCHEMA IF EXISTS {BENCH_SCHEMA} CASCADE"))
        connection.execute(text(f"CREATE SCHEMA {BENCH_SCHEMA}"))
    engine.dispose()
    return f"{POSTGRES}?options=-csearch_path%3D{BENCH_SCHEMA}"


async def register_fleet(url: str, token: str, nodes: int, concurrency: int) -> None:
    spec = scaled_spec(nodes)
    fleet = list(iter_nodes(spec))
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits,
                                 timeout=120) as http:
        for env in spec.environments:
            body = env.model_dump(mode="json", exclude_none=True)
            await http.post("/api/v1/environments", json=body)
        join_tokens: dict[str, list[str]] = {}
        for env in spec.environments:
            wanted = sum(1 for n in fleet if n.environment == env.name)
            join_tokens[env.name] = []
            while len(join_tokens[env.name]) < wanted:
                count = min(1000, wanted - len(join_tokens[env.name]))
                reply = await http.post("/api/v1/join-tokens",
                                        json={"environment": env.name, "count": count})
                reply.raise_for_status()
                join_tokens[env.name] += [t["token"] for t in reply.json()["tokens"]]
        queue: asyncio.Queue = asyncio.Queue()
        for node in fleet:
            queue.put_nowait((node, join_tokens[node.environment].pop()))
        client_ms: list[float] = []
        server_side_ms: list[float] = []

        async def worker():
            while not queue.empty():
                node, join_token = queue.get_nowait()
                started_s = time.perf_counter()
                reply = await http.post(
                    "/api/v1/agent/register",
                    headers={"Authorization": f"Bearer {join_token}",
                             "Content-Type": "application/json"},
                    content=node.registration.model_dump_json(exclude_none=True))
                client_ms.append((time.perf_counter() - started_s) * 1000)
                server_side_ms.append(server_ms(reply))
                reply.raise_for_status()

        started_s = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        total_s = time.perf_counter() - started_s
    gpus = sum(n.gpu_count for n in fleet)
    print(f"registered {len(fleet)} nodes / {gpus} GPUs in {total_s:.1f} s "
          f"({len(fleet) / total_s:.0f} nodes/s, {gpus / total_s:.0f} GPUs/s, "
          f"concurrency {concurrency})")
    print(f"  per-node registration, client:      {describe_ms(client_ms)}")
    print(f"  per-node registration, server-side: {describe_ms(server_side_ms)}")


def time_queries(url: str, token: str, repeats: int) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=60) as http:
        for name, path in QUERIES.items():
            http.get(path).raise_for_status()  # warm caches
            client_ms, server_side_ms = [], []
            for _ in range(repeats):
                started_s = time.perf_counter()
                reply = http.get(path)
                client_ms.append((time.perf_counter() - started_s) * 1000)
                reply.raise_for_status()
                server_side_ms.append(server_ms(reply))
            print(f"{name}:")
            print(f"  server-side: {describe_ms(server_side_ms)}")
            print(f"  client:      {describe_ms(client_ms)}")


def analyze_postgres(database_url: str) -> None:
    """What autovacuum does within minutes of a bulk load: visibility map and statistics."""
    engine = create_engine(database_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text("VACUUM ANALYZE"))
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    database_url = fresh_postgres_url() if args.database == "postgres" else None
    with tempfile.TemporaryDirectory() as tmp, \
            running_server(Path(tmp), database_url,
                           # registration only: no agent heartbeats here, so keep the
                           # silent-node sweep from marking the fleet unreachable mid-run
                           heartbeat_interval_s=3600) as (url, token):
        print(f"== {args.database}: {args.nodes} nodes × 8 GPUs")
        asyncio.run(register_fleet(url, token, args.nodes, args.concurrency))
        if database_url:
            print("-- right after the bulk load (no statistics yet):")
            time_queries(url, token, args.repeats)
            analyze_postgres(database_url)
            print("-- after VACUUM ANALYZE (what autovacuum does shortly after):")
        time_queries(url, token, args.repeats)


if __name__ == "__main__":
    main()
