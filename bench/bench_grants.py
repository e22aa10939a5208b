"""Committed grants through the services: approve → placed, bound and labelled, per second.

    python bench/bench_grants.py --database sqlite   --nodes 1000 --grants 300
    python bench/bench_grants.py --database postgres --nodes 1000 --grants 300

Registers a scaled simulated fleet (N nodes, mixed whole / MIG / shared GPUs — the demo's
mix, sim/scaled.py) through the real registration path, creates `--grants` requests (a mix
of 1 / 2 / 4 whole GPUs, 1g MIG instances and 0.5 fractions), then times
`Lifecycle.approve` for each, one after another, in this process: each one is the approval
transaction plus the grant transaction (placement read, bindings, slot claims, labels,
MIG plans, audit). Prints grants/s and per-grant p50/p99.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_fleet_scale import fresh_postgres_url
from gpufleet.clock import SystemClock
from gpufleet.domain.errors import InvalidInput
from gpufleet.services.app import Gpufleet
from gpufleet.services.principal import SYSTEM
from gpufleet.settings import Settings
from gpufleet.sim.nodes import iter_nodes
from gpufleet.sim.scaled import scaled_spec
from gpufleet.store.database import StateStore
from gpufleet.wire.agent import NodeRegistration
from gpufleet.wire.inventory import EnvironmentCreate, JoinTokenCreate, ProjectCreate
from gpufleet.wire.requests import RequestCreate

MIX = [dict(count=1), dict(count=2, same_node=True), dict(count=4, same_node=True),
       dict(count=1, mig_profile="1g.10gb"), dict(count=1, fraction=0.5)]


def build(database: str, data_dir: Path) -> Gpufleet:
    url = fresh_postgres_url() if database == "postgres" else None
    settings = Settings(data_dir=data_dir, database_url=url, sqlite_synchronous="FULL")
    store = StateStore(settings.effective_database_url)
    store.migrate()
    return Gpufleet(store, settings, SystemClock())


def register(gf: Gpufleet, nodes: int) -> int:
    spec = scaled_spec(nodes)
    for env in spec.environments:
        gf.create_environment(SYSTEM, EnvironmentCreate(**env.model_dump()))
    gpus = 0
    for node in iter_nodes(spec):
        token = gf.create_join_tokens(SYSTEM, JoinTokenCreate(environment=node.environment))
        body: NodeRegistration = node.registration
        gf.register_node(token.tokens[0].token, body)
        gpus += len(body.gpus)
    return gpus


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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gf = build(args.database, Path(tmp))
        started = time.perf_counter()
        gpus = register(gf, args.nodes)
        print(f"registered {args.nodes} nodes / {gpus} GPUs in "
              f"{time.perf_counter() - started:.1f} s ({args.database})")
        gf.create_project(SYSTEM, ProjectCreate(name="bench", organisation="bench"))
        mix = [kind for kind in MIX if offered(gf, kind)]
        print("request mix:", ", ".join(str(kind) for kind in mix))
        codes = [gf.lifecycle.create_request(SYSTEM, RequestCreate(
            project="bench", **mix[i % len(mix)])).code for i in range(args.grants)]
        latencies_ms, active = [], 0
        started = time.perf_counter()
        for code in codes:
            t0 = time.perf_counter()
            active += gf.lifecycle.approve(SYSTEM, code, None).state == "active"
            latencies_ms.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - started
        cuts = statistics.quantiles(latencies_ms, n=100)
        print(f"{args.grants} approvals ({active} granted) in {elapsed:.1f} s: "
              f"{args.grants / elapsed:.0f} grants/s; per grant p50 {cuts[49]:.1f} ms, "
              f"p99 {cuts[98]:.1f} ms")


if __name__ == "__main__":
    main()
