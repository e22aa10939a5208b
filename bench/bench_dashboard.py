"""Dashboard pages' server time at 10,000 and 100,000 GPUs, against issue 15's target:
every page ≤ 300 ms (paged and aggregated on the server).

    .venv/bin/python bench/bench_dashboard.py --gpus 10000 --keep /tmp/bench-fleets
    .venv/bin/python bench/bench_dashboard.py --gpus 100000 --keep /tmp/bench-fleets --repeats 5

The fleet is bench_telemetry_queries.py's (state store by bulk insert: nodes of 8 GPUs,
200 projects, 75 % of GPUs bound; DuckDB with 24 h of 1-minute rollups and their hourly
rollups), plus an audit log of `--audit-per-gpu` events a GPU by bulk insert. `--keep DIR`
loads it once into DIR and reuses it on later runs with the same --gpus, as
bench_alert_rules.py does (loading 100,000 GPUs takes many minutes).

The app runs in this process (`TestClient`: the ASGI app with real HTTP semantics) on the
fleet's clock, signed in through the sign-in form as the bootstrap admin (who sees the
most). The upkeep loop's warming of the dashboard's fleet-wide funnels is run (and timed)
first, as the server does at start and each round. Each page is fetched once to warm
caches, then `--repeats` times; reported: the
`Server-Timing` figure (time inside the app, the page's server time) p50 and max, the
first fetch apart, and the process's CPU time a fetch (p50). A page whose URL no route
answers yet is reported "not built" — the list below names every page of issue 15, one
line each. With `--sections`, each page's sections (the `section(...)` calls of its
module) are timed as well: which service call costs what.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import insert
from starlette.routing import Match

from bench_telemetry_queries import NOW, load_state, load_telemetry
from common import server_ms
from gpufleet.api.app import create_app
from gpufleet.api.web import routes
from gpufleet.clock import ManualClock
from gpufleet.domain.requests import request_code
from gpufleet.server import bootstrap_admin_token, tune_garbage_collector
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import AuditEvent
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore

TARGET_MS = 300.0
# (name, URL): one line a page. Names a loaded fleet has: node-00042, GPU-00000042,
# project-007, request 42, onprem-hpc.
PAGES = [
    ("fleet", "/ui/"),
    ("fleet, 1h", "/ui/?window=1h"),
    ("environments", "/ui/environments"),
    ("environment", "/ui/environments/onprem-hpc"),
    ("projects", "/ui/projects"),
    ("project", "/ui/projects/project-007"),
    ("nodes", "/ui/nodes"),
    ("node", "/ui/nodes/node-00042"),
    ("gpu", "/ui/gpus/GPU-00000042"),
    ("requests", "/ui/requests"),
    ("request", f"/ui/requests/{request_code(42)}"),
    ("new request", "/ui/requests/new"),
    ("pools", "/ui/pools"),
    ("audit", "/ui/audit"),
    ("audit, one GPU", "/ui/audit?subject_kind=gpu&subject=GPU-00000042"),
    ("audit, one action", "/ui/audit?action=request.approved"),
    ("billing", "/ui/billing"),
    ("billing, by dept", "/ui/billing?by=department&group=model"),
]
AUDIT_ACTIONS = (("gpu", "gpu.health_changed"), ("request", "request.created"),
                 ("request", "request.approved"), ("node", "node.registered"))


def load_audit(store: StateStore, gpus: int, per_gpu: int) -> int:
    """`per_gpu` events a GPU over the last 3 days, in id (and time) order."""
    count = gpus * per_gpu
    span_s = 3 * 86400
    rows = []
    for i in range(count):
        kind, action = AUDIT_ACTIONS[i % len(AUDIT_ACTIONS)]
        g = (i * 7919) % gpus
        subject = {"gpu": f"GPU-{g:08d}", "node": f"node-{g // 8:05d}"}.get(
            kind, request_code(g + 1))
        rows.append({"at": NOW - timedelta(seconds=span_s * (count - i) / count),
                     "actor": "user:bench" if kind == "request" else f"node:node-{g // 8:05d}",
                     "action": action, "subject_kind": kind, "subject": subject,
                     "reason": "bench load" if i % 3 == 0 else None,
                     "details": {"gpu": f"GPU-{g:08d}", "index": g % 8},
                     "seq": i + 1})
    with store.write() as session:
        for start in range(0, count, 50_000):
            session.execute(insert(AuditEvent), rows[start:start + 50_000])
    return count


def load(root: Path, args: argparse.Namespace) -> tuple[StateStore, DuckDBTelemetryStore]:
    t = time.perf_counter()
    state = StateStore(f"sqlite:///{root / 'state.db'}")
    state.migrate()
    owners = load_state(state, args.gpus, random.Random(args.seed))
    events = load_audit(state, args.gpus, args.audit_per_gpu)
    print(f"state: {args.gpus:,} GPUs, {len(owners):,} bound, {events:,} audit events, in "
          f"{time.perf_counter() - t:.1f} s")
    telemetry = load_telemetry(root / "telemetry.duckdb", args.gpus)
    return state, telemetry


def built(app, path: str) -> bool:
    """Whether a route of the app answers this path (else the page is not built yet)."""
    scope = {"type": "http", "path": path.split("?")[0], "method": "GET"}
    return any(route.matches(scope)[0] is Match.FULL for route in app.router.routes)


def sign_in(client: TestClient, token: str) -> None:
    form = client.get("/ui/login").text
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', form).group(1)
    reply = client.post("/ui/login", data={"token": token, "csrf_token": csrf},
                        follow_redirects=False)
    assert reply.status_code == 303, reply.text


class SectionClock:
    """Times each `section(api, compute)` call of the page modules: (page module, api) → ms."""

    def __init__(self):
        self.ms: dict[str, list[float]] = defaultdict(list)

    def install(self) -> None:
        for page in routes.PAGES:
            original = getattr(page, "section", None)
            if original is not None:
                page.section = self._timed(original)

    def _timed(self, original):
        def section(api, compute):
            t = time.perf_counter()
            try:
                return original(api, compute)
            finally:
                self.ms[api].append((time.perf_counter() - t) * 1000)
        return section


def measure(client: TestClient, path: str, repeats: int
            ) -> tuple[float, list[float], list[float], int]:
    """The first fetch's server time, then each repeat's server time and the process's CPU
    time (every thread: the app's and DuckDB's — steadier than wall time on a shared
    machine, where a page may wait for a core)."""
    first = client.get(path)
    times, cpu = [], []
    for _ in range(repeats):
        c = time.process_time()
        reply = client.get(path)
        cpu.append((time.process_time() - c) * 1000)
        times.append(server_ms(reply))
    return server_ms(first), times, cpu, first.status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--audit-per-gpu", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sections", action="store_true",
                        help="also time each page's sections (its service calls)")
    parser.add_argument("--only", metavar="NAME", action="append",
                        help="time only these pages (by name; repeatable)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="load the fleet into DIR once and reuse it on later runs with "
                             "the same --gpus")
    args = parser.parse_args()
    tune_garbage_collector()  # the pages are served by the server's process, so tuned
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as tmp:
        root = args.keep / f"dashboard-{args.gpus}-gpus" if args.keep else Path(tmp)
        loaded = root / "loaded"
        if loaded.exists():
            state = StateStore(f"sqlite:///{root / 'state.db'}")
            telemetry = DuckDBTelemetryStore(root / "telemetry.duckdb")
            print(f"reusing the fleet loaded in {root}")
        else:
            root.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            state, telemetry = load(root, args)
            loaded.touch()
            print(f"loaded in {time.perf_counter() - t:.0f} s")
        settings = Settings(data_dir=root / "data")
        gf = Gpufleet(state, settings, ManualClock(NOW), telemetry=telemetry)
        token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
        sections = SectionClock()
        if args.sections:
            sections.install()
        app = create_app(gf, background_loops=False)
        print(f"{args.gpus:,} GPUs, {args.repeats} repeats a page, server time "
              f"(Server-Timing), target ≤ {TARGET_MS:.0f} ms")
        print(f"{'page':20s} {'URL':50s} {'status':>6s} {'first':>9s} {'p50':>9s} "
              f"{'max':>9s} {'CPU p50':>9s}  target")
        with TestClient(app) as client:
            sign_in(client, token)
            # What the server's upkeep loop does each round (here the loops are off): the
            # fleet-wide funnels of the default window, counted afresh and kept for pages.
            # The first round folds the minute masks too; the second is each later round's.
            for round_ in ("first", "next"):
                t, c = time.perf_counter(), time.process_time()
                gf.queries.warm_recent_funnels()
                gf.queries.warm_recent_idle()
                print(f"upkeep, {round_} round: the dashboard's fleet-wide funnels and idle "
                      f"list warmed in "
                      f"{time.perf_counter() - t:.1f} s ({time.process_time() - c:.1f} s "
                      f"CPU), in the background")
            for name, path in PAGES:
                if args.only and name not in args.only:
                    continue
                if not built(app, path):
                    print(f"{name:20s} {path:50s} {'':>6s} {'not built':>9s}")
                    continue
                sections.ms.clear()
                first, times, cpu, status = measure(client, path, args.repeats)
                p50, worst = statistics.median(times), max(times)
                verdict = "met" if worst <= TARGET_MS else (
                    "p50 met, max over" if p50 <= TARGET_MS else "OVER")
                print(f"{name:20s} {path:50s} {status:6d} {first:7.1f}ms {p50:7.1f}ms "
                      f"{worst:7.1f}ms {statistics.median(cpu):7.1f}ms  {verdict}")
                for api, ms in sections.ms.items():
                    print(f"{'':22s}section {api:60s} p50 {statistics.median(ms):7.1f} ms")
        gf.close()


if __name__ == "__main__":
    main()
