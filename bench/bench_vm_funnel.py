"""The funnel and the idle list on the VictoriaMetrics store: what the minute masks fetch and
cost (tsdb/prometheus_masks.py), at N GPUs with 24 h of history.

    cd bench && ../.venv/bin/python bench_vm_funnel.py --gpus 1000

Starts Debian's `victoria-metrics` on a loopback port, writes 25 h of one sample per minute
of gr_engine_active, sm_active and memory_used per GPU by remote-write (the store's own
`write_columns`), and the state store's inventory and bindings as bench_telemetry_queries.py
does. Then, through the ASGI app: the first funnel (it fills the cache: 25 hours of every
unit), the funnel again (cached), the idle list, and one refresh after one more minute is
rolled up (what the upkeep loop pays each minute). For each: wall time, this process's CPU
time and VictoriaMetrics' (from /proc), and the minute points the engine returned.
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
import zlib
from datetime import timedelta
from pathlib import Path

from fastapi.testclient import TestClient

from bench_ingest import cpu_seconds
from bench_remote_write import start_victoria_metrics
from bench_telemetry_queries import ENVIRONMENTS, METRICS, NOW, load_state
from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import series
from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, SampleColumns, to_ms

GIB = 1024**3
HISTORY_HOURS = 25


def value(metric: int, kind: int, minute: int) -> float:
    """As bench_telemetry_queries: 60 % busy, 25 % idle (a third holding memory), the rest
    switching every 90 minutes."""
    busy = kind < 60 or (kind >= 85 and (minute // 90) % 2 == 0)
    if metric == 0:
        return 75.0 if busy else 1.0
    if metric == 1:
        return 45.0 if busy else 0.0
    return 40e9 if busy or (kind < 85 and kind % 3 == 0) else 1e8


def load_telemetry(store: PrometheusTelemetryStore, gpus: int, vm_url: str) -> None:
    labels = [series(m, f"GPU-{g:08d}", node=f"node-{g // 8:05d}",
                     environment=ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)], model="H100-80GB")
              for g in range(gpus) for m in METRICS]
    kinds = [zlib.crc32(str(g).encode()) % 100 for g in range(gpus)]
    lo = to_ms(NOW) // HOUR_MS * HOUR_MS - (HISTORY_HOURS - 1) * HOUR_MS
    t, written = time.perf_counter(), 0
    for minute in range((to_ms(NOW) - lo) // MINUTE_MS):
        at_ms = lo + minute * MINUTE_MS + 30_000
        values = [value(m, kinds[g], minute) for g in range(gpus) for m in range(len(METRICS))]
        store.write_columns([(f"m{minute}", SampleColumns(labels, range(len(labels)),
                                                         [at_ms] * len(labels), values))])
        written += len(values)
    store._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
    print(f"telemetry: {written:,} samples written in {time.perf_counter() - t:.1f} s")


def cpu_here() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measured(label: str, vm_pid: int, masks_of, work) -> object:
    fetched = masks_of().points_fetched if masks_of() else 0
    wall, here, vm = time.perf_counter(), cpu_here(), cpu_seconds(vm_pid)
    result = work()
    wall, here, vm = time.perf_counter() - wall, cpu_here() - here, cpu_seconds(vm_pid) - vm
    points = masks_of().points_fetched - fetched
    print(f"{label:34s} wall {wall * 1000:9.1f} ms   CPU here {here:7.2f} s   "
          f"VictoriaMetrics {vm:6.2f} s   points fetched {points:>12,}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-vmf-") as tmp:
        root = Path(tmp)
        vm, vm_url = start_victoria_metrics(root / "vm")
        try:
            state = StateStore(f"sqlite:///{root / 'state.db'}")
            state.migrate()
            owners = load_state(state, args.gpus, random.Random(args.seed))
            print(f"state: {args.gpus:,} GPUs, {len(owners):,} bound")
            telemetry = PrometheusTelemetryStore(vm_url, timeout_s=600)
            load_telemetry(telemetry, args.gpus, vm_url)
            clock = ManualClock(NOW)
            settings = Settings(data_dir=root / "data")
            gf = Gpufleet(state, settings, clock, telemetry=telemetry)
            token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
            headers = {"Authorization": f"Bearer {token}"}
            telemetry.rollup(NOW - timedelta(seconds=settings.telemetry_rollup_grace_s))

            def masks():
                return gf.queries._masks[1] if gf.queries._masks else None

            with TestClient(create_app(gf, background_loops=False)) as client:
                def get(path: str, **params):
                    response = client.get(f"/api/v1/telemetry/{path}", params=params,
                                          headers=headers)
                    assert response.status_code == 200, response.text
                    return response.json()
                view = measured("funnel by project, 24 h (cold)", vm.pid, masks,
                                lambda: get("funnel", by="project", window="24h"))
                f = view["fleet"]
                print(f"  {len(view['rows'])} rows; allocated {f['allocated_gpu_hours']:,.0f} "
                      f"active {f['active_gpu_hours']:,.0f} GPU-h, reporting "
                      f"{f['reporting_gpu_hours']:,.0f}")
                for _ in range(2):
                    measured("funnel by project, 24 h (cached)", vm.pid, masks,
                             lambda: get("funnel", by="project", window="24h"))
                idle = measured("idle list (cached)", vm.pid, masks, lambda: get("idle"))
                print(f"  {len(idle['items'])} idle allocations, {idle['unknown']} unknown")
                clock.advance(60)
                telemetry.rollup(clock.now() - timedelta(
                    seconds=settings.telemetry_rollup_grace_s))
                measured("refresh after one more minute", vm.pid, masks,
                         lambda: gf.queries.masks.refresh())
            gf.close()
        finally:
            vm.terminate()
            vm.wait()


if __name__ == "__main__":
    main()
