"""Committed grants through the services: approve → placed, bound and labelled, per second.

    python bench/bench_grants.py --database postgres --nodes 12500 --grants 2000 --clients 16
    python bench/bench_grants.py --database sqlite   --nodes 12500 --grants 2000 --clients 16

Registers a scaled simulated fleet (N nodes, mixed whole / MIG / shared GPUs — the demo's
mix, sim/scaled.py; 12,500 nodes are 100,000 GPUs) through the real registration path,
once: the registered fleet is kept as a template (a PostgreSQL database
`gpufleet_bench_fleet_<N>`, or a SQLite file under bench/results/) and each run starts from
a copy of it (`--rebuild` registers it again). A run loads the server's placement cache
(timed on its own: a server does it at start), creates `--grants` requests of the mix
below, then `--clients` threads call `Lifecycle.approve` on them as operators would: each
call is the approval transaction, the grant (placement on the cache, bindings, slot
claims, labels, MIG plans, audit — batched with whatever other approvals arrived
meanwhile) and the view returned. Prints grants/s and per-approval p50/p99.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import create_engine, text

from gpufleet.clock import SystemClock
from gpufleet.domain.errors import InvalidInput
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.sim.nodes import iter_nodes
from gpufleet.sim.scaled import scaled_spec
from gpufleet.store.database import StateStore
from gpufleet.wire.inventory import EnvironmentCreate, JoinTokenCreate, ProjectCreate
from gpufleet.wire.requests import RequestCreate

POSTGRES_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"
RESULTS = Path(__file__).parent / "results"
MIX = [dict(count=1), dict(count=2, same_node=True), dict(count=4, same_node=True),
       dict(count=1, mig_profile="1g.10gb"), dict(count=1, fraction=0.5)]


def open_fleet(url: str | None, data_dir: Path) -> Gpufleet:
    settings = Settings(data_dir=data_dir, database_url=url, sqlite_synchronous="FULL")
    store = StateStore(settings.effective_database_url,
                       pool_size=settings.database_pool_size)
    store.migrate()
    return Gpufleet(store, settings, SystemClock())


def register(gf: Gpufleet, nodes: int, threads: int) -> int:
    spec = scaled_spec(nodes)
    for env in spec.environments:
        gf.create_environment(SYSTEM, EnvironmentCreate(**env.model_dump()))

    def join(node) -> int:
        token = gf.create_join_tokens(SYSTEM, JoinTokenCreate(environment=node.environment))
        gf.register_node(token.tokens[0].token, node.registration)
        return len(node.registration.gpus)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return sum(pool.map(join, iter_nodes(spec)))


def _admin(sql: str) -> None:
    engine = create_engine(f"{POSTGRES_SERVER}/test", isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.execute(text(sql))
    engine.dispose()


def postgres_run_url(nodes: int, rebuild: bool, threads: int) -> str:
    """A fresh database copied from the registered-fleet template (built if missing)."""
    template = f"gpufleet_bench_fleet_{nodes}"
    engine = create_engine(f"{POSTGRES_SERVER}/test")
    with engine.connect() as connection:
        exists = connection.scalar(text("SELECT 1 FROM pg_database WHERE datname = :name"),
                                   {"name": template})
    engine.dispose()
    if rebuild or not exists:
        _admin(f"DROP DATABASE IF EXISTS {template}")
        _admin(f"CREATE DATABASE {template}")
        with tempfile.TemporaryDirectory() as tmp:
            _build(f"{POSTGRES_SERVER}/{template}", Path(tmp), nodes, threads)
    _admin("DROP DATABASE IF EXISTS gpufleet_bench_grants")
    _admin(f"CREATE DATABASE gpufleet_bench_grants TEMPLATE {template}")
    return f"{POSTGRES_SERVER}/gpufleet_bench_grants"


def sqlite_run_url(nodes: int, rebuild: bool, threads: int, run_dir: Path) -> str:
    template = RESULTS / f"fleet-{nodes}.sqlite"
    if rebuild or not template.exists():
        RESULTS.mkdir(exist_ok=True)
        template.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            _build(f"sqlite:///{template}", Path(tmp), nodes, threads)
    copy = run_dir / "fleet.sqlite"
    shutil.copyfile(template, copy)
    return f"sqlite:///{copy}"


def _build(url: str, data_dir: Path, nodes: int, threads: int) -> None:
    gf = open_fleet(url, data_dir)
    started = time.perf_counter()
    gpus = register(gf, nodes, threads)
    gf.create_project(SYSTEM, ProjectCreate(name="bench", organisation="bench"))
    gf.store.dispose()
    print(f"registered {nodes} nodes / {gpus} GPUs in {time.perf_counter() - started:.0f} s "
          f"(kept as the template for later runs)")


def db_cpu_s() -> float:
    """CPU seconds used so far by the local PostgreSQL server: its live processes plus the
    backends it has reaped (Linux /proc; 0 where that cannot be read)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
            command = (stat.parent / "comm").read_text().strip()
        except OSError:
            continue
        if command.startswith("postgres"):
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / tick


def offered(gf: Gpufleet, kind: dict) -> bool:
    """Whether the scaled fleet has GPUs for this kind of request (small ones may not)."""
    try:
        code = gf.lifecycle.create_request(SYSTEM, RequestCreate(project="bench", **kind)).code
    except InvalidInput:
        return False
    gf.lifecycle.cancel(SYSTEM, code, "probe")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--grants", type=int, default=300)
    parser.add_argument("--clients", type=int, default=1,
                        help="threads approving at once (operators, API workers)")
    parser.add_argument("--register-threads", type=int, default=4)
    parser.add_argument("--rebuild", action="store_true",
                        help="register the fleet again instead of copying the template")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.database == "postgres":
            url = postgres_run_url(args.nodes, args.rebuild, args.register_threads)
        else:
            url = sqlite_run_url(args.nodes, args.rebuild, args.register_threads, Path(tmp))
        gf = open_fleet(url, Path(tmp))
        started = time.perf_counter()
        gf.lifecycle.warm()
        print(f"{args.database}, {args.nodes} nodes: placement cache loaded in "
              f"{time.perf_counter() - started:.1f} s")
        mix = [kind for kind in MIX if offered(gf, kind)]
        print("request mix:", ", ".join(str(kind) for kind in mix))
        codes = [gf.lifecycle.create_request(SYSTEM, RequestCreate(
            project="bench", **mix[i % len(mix)])).code for i in range(args.grants)]

        def approve(code: str) -> tuple[float, bool]:
            t0 = time.perf_counter()
            active = gf.lifecycle.approve(SYSTEM, code, None).state == "active"
            return (time.perf_counter() - t0) * 1000, active

        started, cpu_started, db_started = time.perf_counter(), time.process_time(), db_cpu_s()
        with ThreadPoolExecutor(max_workers=args.clients) as pool:
            results = list(pool.map(approve, codes))
        elapsed = time.perf_counter() - started
        cpu_ms = (time.process_time() - cpu_started) * 1000 / args.grants
        db_ms = (db_cpu_s() - db_started) * 1000 / args.grants
        latencies_ms = [ms for ms, _ in results]
        granted = sum(active for _, active in results)
        cuts = statistics.quantiles(latencies_ms, n=100)
        print(f"{args.grants} approvals by {args.clients} clients ({granted} granted) in "
              f"{elapsed:.1f} s: {granted / elapsed:.0f} grants/s; per approval p50 "
              f"{cuts[49]:.1f} ms, p99 {cuts[98]:.1f} ms")
        print(f"CPU per approval: this process {cpu_ms:.1f} ms"
              + (f", local PostgreSQL {db_ms:.1f} ms" if args.database == "postgres" else ""))
        gf.store.dispose()


if __name__ == "__main__":
    main()
