"""The dashboard's GPU page at fleet scale: server time of `/ui/gpus/{uuid}` for 1 h, 24 h
and 7 d, as an admin and as a member, against issue 15's 300 ms per page.

    .venv/bin/python bench/bench_gpu_page.py --gpus 100000 --hours 2

State and telemetry are bench_telemetry_queries.py's (bulk-inserted inventory, 75 % of
GPUs bound to 200 projects; 1-minute and hourly rollups of three metrics for every GPU over
`--hours` up to now). Every other metric the page charts gets one old sample per GPU, so
the series dictionary has its full size (100,000 GPUs × 17 metrics) — the page's cost that
grows with the fleet. Each page load goes through the ASGI app (`TestClient`); the figure
is its `Server-Timing` (time inside the app). GPUs rotate across loads, so no answer is
served twice from a warm cache of the same GPU.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from bench_telemetry_queries import ENVIRONMENTS, METRICS, NOW, load_state, load_telemetry
from gpufleet.api.app import create_app
from gpufleet.api.web.pages.gpu_charts import GROUPS
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import Sample, series

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
TIMING = re.compile(r"app;dur=([0-9.]+)")


def fill_dictionary(store, gpus: int) -> None:
    """One sample, two days old, of every other charted metric per GPU."""
    others = sorted({line.metric for g in GROUPS for line in g.lines} - set(METRICS))
    before = NOW - timedelta(days=2)
    for lo in range(0, gpus, 10_000):
        store.write([Sample(series(m, f"GPU-{g:08d}", node=f"node-{g // 8:05d}",
                                   environment=ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)],
                                   model="H100-80GB"), before, 1.0)
                     for g in range(lo, min(gpus, lo + 10_000)) for m in others])


def signed_in(app, token: str) -> TestClient:
    client = TestClient(app)
    form = client.get("/ui/login")
    client.post("/ui/login", data={"token": token, "csrf_token": CSRF.search(form.text)[1]})
    return client


def measure(client: TestClient, label: str, uuids: list[str], range_: str,
            repeats: int) -> None:
    times, cpu = [], []
    for i in range(repeats + 1):
        c = time.process_time()
        response = client.get(f"/ui/gpus/{uuids[i % len(uuids)]}", params={"range": range_})
        cpu.append((time.process_time() - c) * 1000)
        assert response.status_code == 200, response.text[:500]
        times.append(float(TIMING.search(response.headers["server-timing"])[1]))
    first, rest = times[0], sorted(times[1:])
    p99 = rest[min(len(rest) - 1, int(len(rest) * 0.99))]
    # CPU of the whole process (every thread), steadier than wall time on a shared machine.
    print(f"{label:7} range={range_:4}  first {first:7.1f} ms   p50 "
          f"{statistics.median(rest):7.1f} ms   p99 {p99:7.1f} ms   CPU p50 "
          f"{statistics.median(cpu[1:]):7.1f} ms   ({repeats} GPUs)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-page-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        state = StateStore(f"sqlite:///{root / 'state.db'}")
        state.migrate()
        owners = load_state(state, args.gpus, rng)
        telemetry = load_telemetry(root / "telemetry.duckdb", args.gpus, args.hours)
        fill_dictionary(telemetry, args.gpus)
        print(f"loaded {args.gpus:,} GPUs ({len(owners):,} bound) in "
              f"{time.perf_counter() - t:.1f} s")
        settings = Settings(data_dir=root / "data")
        gf = Gpufleet(state, settings, ManualClock(NOW), telemetry=telemetry)
        admin = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
        app = create_app(gf, background_loops=False)
        with signed_in(app, admin) as client:
            project = f"project-{owners[0][2] - 1:03d}"
            api = {"Authorization": f"Bearer {admin}"}
            client.post("/api/v1/users", json={"name": "mia", "role": "member"}, headers=api)
            client.post(f"/api/v1/projects/{project}/members", json={"user": "mia"},
                        headers=api)
            member = client.post("/api/v1/tokens", json={"name": "mia", "user": "mia"},
                                 headers=api).json()["token"]
            everyone = [uuid for uuid, _, _ in rng.sample(owners, args.repeats + 1)]
            theirs = [uuid for uuid, _, p in owners if p == owners[0][2]][:args.repeats + 1]
            for range_ in ("1h", "24h", "7d"):
                measure(client, "admin", everyone, range_, args.repeats)
        with signed_in(app, member) as client:
            for range_ in ("1h", "24h", "7d"):
                measure(client, "member", theirs, range_, args.repeats)


if __name__ == "__main__":
    main()
