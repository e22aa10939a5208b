"""Billing statements at 100,000 bindings: a month's statement through the API, computed
once (cold), then answered from the kept statements (docs/billing.md, "Statements from the
store").

    .venv/bin/python bench/bench_billing_statements.py --bindings 100000 --telemetry-hours 2

The fleet is bench_telemetry_queries.py's (its `load_state`: bulk inserts into SQLite,
75 % of the GPUs bound, bindings started up to 36 h before NOW, some ended; 200 projects)
sized to the asked number of bindings, with rate cards for H100-80GB in each environment
and for any. Telemetry (its `load_telemetry`) covers the last `--telemetry-hours` hours,
so the bindings' activity is known there and unknown before (loading 24 h at 100,000 GPUs
takes ~9 minutes). Measured through the ASGI app (`TestClient`): the first call for the
month (the whole computation: reading the store and the masks, the exact arithmetic), the
p50 of the next calls for the same month with other roll-ups and groupings (kept
statements), a closed window (computed, then kept; kept after a binding ends now;
brought up to date by the upkeep after an edit inside it), and the month when its kept
answer is too old (computed again on a call, then by the upkeep with the views asked); then
showback for /metrics: the upkeep keeping the month nobody asked for (computed, then not
yet due) and a scrape of /metrics with the `gpufleet_cost_*` series. Wall and process CPU
time.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import select

from bench_telemetry_queries import ENVIRONMENTS, NOW, load_state, load_telemetry
from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.services.billing import showback
from gpufleet.services.billing.rates import rate_card
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Binding
from gpufleet.wire.billing import RateSet

PATH = "/api/v1/billing/statements"
MONTH = NOW.strftime("%Y-%m")


def call(client: TestClient, token: str, params: dict) -> tuple[float, float, dict]:
    wall, cpu = time.perf_counter(), time.process_time()
    response = client.get(PATH, params=params, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.text
    body = response.json() if params.get("format") != "csv" else {}
    return ((time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, body)


def report(label: str, wall: float, cpu: float, body: dict | None = None) -> None:
    summary = ""
    if body is not None:
        t = body["total"]
        summary = (f"   {len(body['rows'])} rows; allocated {t['allocated_gpu_hours']:,.0f} "
                   f"active {t['active_gpu_hours']:,.0f} idle {t['idle_gpu_hours']:,.0f} "
                   f"GPU-h; cost {t['total_cost']} {body['currency']}")
    print(f"{label:<44} {wall:9.1f} ms wall {cpu:9.1f} ms CPU{summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=int, default=100_000)
    parser.add_argument("--telemetry-hours", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    gpus = round(args.bindings / 0.75 / 8) * 8  # whole nodes of 8
    with tempfile.TemporaryDirectory(prefix="bench-billing-") as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        state = StateStore(f"sqlite:///{root / 'state.db'}")
        state.migrate()
        owners = load_state(state, gpus, random.Random(args.seed))
        print(f"state: {gpus:,} GPUs, {len(owners):,} bindings, in "
              f"{time.perf_counter() - t:.1f} s")
        telemetry = load_telemetry(root / "telemetry.duckdb", gpus, args.telemetry_hours)
        settings = Settings(data_dir=root / "data")
        clock = ManualClock(NOW)
        gf = Gpufleet(state, settings, clock, telemetry=telemetry)
        token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
        start = NOW - timedelta(days=40)
        for environment in (None, *ENVIRONMENTS):
            gf.set_billing_rate(SYSTEM, RateSet(
                flavour="H100-80GB", environment=environment, currency="EUR",
                price_per_unit_hour="2.45" if environment is None else "2.10",
                effective_from=start))
            gf.set_billing_rate(SYSTEM, RateSet(  # a change inside the month: a cut
                flavour="H100-80GB", environment=environment, currency="EUR",
                price_per_unit_hour="2.50" if environment is None else "2.20",
                effective_from=NOW - timedelta(hours=12)))
        with TestClient(create_app(gf, background_loops=False)) as client:
            wall, cpu, body = call(client, token, {"month": MONTH})
            report(f"month {MONTH}, first call (computed)", wall, cpu, body)
            asks = [{"month": MONTH, "by": by, "group": group}
                    for by in ("project", "organisation") for group in (None, "model")]
            walls, cpus = [], []
            for i in range(args.repeats):
                wall, cpu, _ = call(client, token,
                                    {k: v for k, v in asks[i % len(asks)].items() if v})
                walls.append(wall)
                cpus.append(cpu)
            report(f"month, next {args.repeats} calls (kept) p50", statistics.median(walls),
                   statistics.median(cpus))
            wall, cpu, _ = call(client, token, {"month": MONTH, "format": "csv",
                                                "group": "environment"})
            report("month as CSV by environment (kept)", wall, cpu)
            closed = {"start": (NOW - timedelta(days=1)).isoformat(),
                      "end": (NOW - timedelta(hours=1)).isoformat()}
            wall, cpu, body = call(client, token, closed)
            report("closed 23 h window, first call", wall, cpu, body)
            wall, cpu, _ = call(client, token, {**closed, "by": "department"})
            report("closed window again (kept)", wall, cpu)
            with state.write() as session:  # a binding from now on: the window is kept
                row = session.scalars(select(Binding).where(Binding.ended_at.is_(None))
                                      .limit(1)).one()
                row.ended_at = NOW
            wall, cpu, _ = call(client, token, closed)
            report("closed window after a binding ended now", wall, cpu)
            with state.write() as session:  # ended inside the window: computed again
                session.get(Binding, row.id).ended_at = NOW - timedelta(hours=2)
            wall, cpu = time.perf_counter(), time.process_time()
            gf.billing.warm_asked_windows()
            report("upkeep: bring the asked windows up to date", (time.perf_counter() - wall)
                   * 1000, (time.process_time() - cpu) * 1000)
            wall, cpu, _ = call(client, token, closed)
            report("closed window after an edit inside it", wall, cpu)
            clock.advance(400)  # past the 6 minutes an open window's answer is reused
            wall, cpu, _ = call(client, token, {"month": MONTH})
            report("month 400 s later (computed again)", wall, cpu)
            clock.advance(310)  # past the 5 minutes after which the upkeep recomputes it
            wall, cpu = time.perf_counter(), time.process_time()
            gf.billing.warm_asked_windows()
            report("upkeep 310 s later: month + its views", (time.perf_counter() - wall)
                   * 1000, (time.process_time() - cpu) * 1000)
            wall, cpu, _ = call(client, token, {"month": MONTH, "by": "organisation",
                                                "group": "model"})
            report("month after warming, a view asked before", wall, cpu)
            wall, cpu, _ = call(client, token, {"month": MONTH, "by": "cost_centre"})
            report("month after warming, a new roll-up", wall, cpu)
            # Showback (/metrics): the upkeep keeps this month whether or not it is asked.
            clock.advance(16 * 60)  # nobody asked for 15 minutes; the kept answer is old
            gf.billing.warm_asked_windows()
            wall, cpu = time.perf_counter(), time.process_time()
            gf.billing.warm_showback()
            report("upkeep: month for /metrics, unasked", (time.perf_counter() - wall)
                   * 1000, (time.process_time() - cpu) * 1000)
            clock.advance(60)
            wall, cpu = time.perf_counter(), time.process_time()
            gf.billing.warm_showback()
            report("upkeep: month for /metrics, not yet due", (time.perf_counter() - wall)
                   * 1000, (time.process_time() - cpu) * 1000)
            scrapes = []
            for _ in range(args.repeats):
                wall, cpu = time.perf_counter(), time.process_time()
                response = client.get("/metrics",
                                      headers={"Authorization": f"Bearer {token}"})
                assert response.status_code == 200 and \
                    "gpufleet_cost_month_to_date{" in response.text
                scrapes.append(((time.perf_counter() - wall) * 1000,
                                (time.process_time() - cpu) * 1000))
            report(f"/metrics with cost series, {args.repeats} scrapes p50",
                   statistics.median(w for w, _ in scrapes),
                   statistics.median(c for _, c in scrapes))
            wall, cpu = time.perf_counter(), time.process_time()
            with state.read() as session:
                found = showback.families(gf.billing.showback, rate_card(session),
                                          clock.now())
            report(f"  of which the cost families ({sum(len(f.samples) for f in found)} "
                   "samples)", (time.perf_counter() - wall) * 1000,
                   (time.process_time() - cpu) * 1000)
        gf.close()


if __name__ == "__main__":
    main()
