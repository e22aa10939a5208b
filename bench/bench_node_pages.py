"""Time the dashboard's Nodes and Node pages on a fleet of N nodes × 8 GPUs.

    python bench/bench_node_pages.py --nodes 12500            # 100,000 GPUs, SQLite
    python bench/bench_node_pages.py --nodes 12500 --database postgres

The inventory is written straight into the state store (bulk inserts: registering 12,500
nodes through the agent protocol is bench_fleet_scale.py's job, and takes minutes), then
the pages are fetched through the real ASGI app, signed in as the bootstrap admin. Prints
p50/p99 of the server-side time (`Server-Timing`) and the client-observed time of: the node
list's first page, a page deep in the list (after following 100 cursors), the list
filtered by status, and one Node page (its telemetry store empty: the inventory is what
grows with the fleet). Issue 15 asks for every page ≤ 300 ms at 100,000 GPUs.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, insert, select, text

from common import describe_ms, server_ms
from gpufleet.api.app import create_app
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Environment, Gpu, Node

POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SCHEMA = "gpufleet_bench_node_pages"
GPUS_PER_NODE = 8
GIB = 1024**3


def fresh_postgres_url() -> str:
    engine = create_engine(POSTGRES)
    with engine.begin() as connection:
        connection.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
        connection.execute(text(f"CREATE SCHEMA {SCHEMA}"))
    engine.dispose()
    return f"{POSTGRES}?options=-csearch_path%3D{SCHEMA}"


def fill(store: StateStore, nodes: int) -> None:
    now = datetime.now(UTC)
    with store.write() as session:
        for name in ("onprem-hpc", "aws-us-east-1"):
            session.add(Environment(name=name, kind="onprem", default_sharing_mode="exclusive",
                                    created_at=now))
        session.flush()
        env_ids = list(session.scalars(select(Environment.id)))
        session.execute(insert(Node), [
            {"name": f"node-{n:05d}", "machine_id": f"machine-{n:05d}",
             "environment_id": env_ids[n % 2], "cpu_cores": 112, "memory_bytes": 2048 * GIB,
             "admin_state": "cordoned" if n % 500 == 0 else "active", "reachable": True,
             "status": "cordoned" if n % 500 == 0 else "ready", "registered_at": now,
             "last_seen_at": now, "agent_version": "0.1.0", "driver_version": "550.127.05",
             "cuda_version": "12.4"} for n in range(nodes)])
        ids = dict(session.execute(select(Node.name, Node.id)).all())
        for start in range(0, nodes, 1000):
            session.execute(insert(Gpu), [
                {"uuid": f"GPU-{n:08x}-0000-4000-8000-{i:012x}", "node_id": ids[f"node-{n:05d}"],
                 "environment_id": env_ids[n % 2], "index": i, "model": "H100-80GB",
                 "model_known": True, "reported_name": "NVIDIA H100 80GB HBM3",
                 "memory_bytes": 80 * GIB, "sharing_mode": "exclusive", "health": "healthy",
                 "status": "free", "first_seen_at": now}
                for n in range(start, min(start + 1000, nodes)) for i in range(GPUS_PER_NODE)])


def timed(client: TestClient, path: str, repeats: int) -> tuple[list[float], list[float]]:
    """Server-side (Server-Timing) and client-observed milliseconds of each fetch."""
    server, seen = [], []
    client.get(path)  # warm: the first fetch opens the telemetry store
    for _ in range(repeats):
        began = time.perf_counter()
        response = client.get(path)
        seen.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (path, response.status_code)
        server.append(server_ms(response))
    return server, seen


def deep_page(client: TestClient, hops: int) -> str:
    path = "/ui/nodes"
    for _ in range(hops):
        link = re.search(r'href="(/ui/nodes\?cursor=[^"]+)"', client.get(path).text)
        path = link.group(1).replace("&amp;", "&")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        url = f"sqlite:///{data / 'state.db'}" if args.database == "sqlite" \
            else fresh_postgres_url()
        store = StateStore(url)
        store.migrate()
        began = time.perf_counter()
        fill(store, args.nodes)
        print(f"{args.nodes} nodes, {args.nodes * GPUS_PER_NODE} GPUs written in "
              f"{time.perf_counter() - began:.1f} s ({args.database})")
        settings = Settings(data_dir=data / "data")
        gf = Gpufleet(store, settings)
        token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
        with TestClient(create_app(gf, background_loops=False)) as client:
            form = client.get("/ui/login").text
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
            client.post("/ui/login", data={"token": token, "csrf_token": csrf})
            pages = {"node list, first page": "/ui/nodes",
                     "node list, 101st page": deep_page(client, 100),
                     "node list, status=cordoned": "/ui/nodes?status=cordoned",
                     "node page (8 GPUs)": f"/ui/nodes/node-{args.nodes // 2:05d}"}
            for label, path in pages.items():
                server, seen = timed(client, path, args.repeats)
                print(f"{label:28s} server {describe_ms(server)}")
                print(f"{'':28s} client {describe_ms(seen)}")
        gf.close_telemetry()
        store.dispose()
        if args.database == "postgres":
            engine = create_engine(POSTGRES)
            with engine.begin() as connection:
                connection.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE"))
            engine.dispose()


if __name__ == "__main__":
    main()
