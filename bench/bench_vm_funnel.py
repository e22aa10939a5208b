"""The funnel and the idle list on the VictoriaMetrics store: what the minute masks cost
(tsdb/prometheus_masks.py, computed in the engine by tsdb/engine_masks.py), at N GPUs.

    cd bench && ../.venv/bin/python -u bench_vm_funnel.py --gpus 10000
    cd bench && ../.venv/bin/python -u bench_vm_funnel.py --gpus 100000 --raw-hours 2

Starts Debian's `victoria-metrics` on a loopback port and loads `--raw-hours` (24) of one
sample per minute of gr_engine_active, sm_active and memory_used per GPU through
`/api/v1/import` (JSON lines made from a few precomputed value arrays: remote-write from
Python takes ~1 min per million samples), and the state store's inventory and bindings as
bench_telemetry_queries.py does. Then:

1. the leader: `record_closed_hours()` computes every closed hour of the cache's 25 in the
   engine and records it (what the first deployment pays; then one hour per hour);
2. with `--raw-hours` under 24, the bench copies the newest closed hour's recorded masks to
   the older hours (so a cold replica finds 24 recorded hours of the full fleet) — said in
   the output;
3. a cold start's two parts measured apart (reading the recorded hours; computing the open
   hour), then a cold replica (a new store object and services): the first funnel (both),
   the idle list, the funnel again (warm), the idle list again, and one refresh after one
   more minute is rolled up (what the upkeep loop pays each minute).

For each: wall time, this process's CPU time and VictoriaMetrics' (from /proc), and the
numbers the engine returned.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import random
import resource
import subprocess
import tempfile
import time
import zlib
from datetime import timedelta
from pathlib import Path

import numpy as np
import orjson
from fastapi.testclient import TestClient

from bench_ingest import cpu_seconds
from bench_remote_write import start_victoria_metrics
from bench_telemetry_queries import ENVIRONMENTS, METRICS, NOW, load_state
from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.services.telemetry.queries import thresholds_of
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import prometheus_masks, series
from gpufleet.tsdb.engine_masks import (
    RECORDED_NAME,
    SLOT_MS,
    SLOTS,
    marker_line,
    threshold_labels,
)
from gpufleet.tsdb.prometheus_names import exposition_labels
from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, to_ms

GIB = 1024**3
HISTORY_HOURS = 24  # up to NOW (an hour's start): 23 closed hours and the open one


def value(metric: int, kind: int, minute: int) -> float:
    """As bench_telemetry_queries: 60 % busy, 25 % idle (a third holding memory), the rest
    switching every 90 minutes."""
    busy = kind < 60 or (kind >= 85 and (minute // 90) % 2 == 0)
    if metric == 0:
        return 75.0 if busy else 1.0
    if metric == 1:
        return 45.0 if busy else 0.0
    return 40e9 if busy or (kind < 85 and kind % 3 == 0) else 1e8


# A kind standing for each class of GPUs: busy, idle, idle holding memory, switching.
CLASS_KINDS = {0: 0, 1: 60, 2: 63, 3: 85}


def kind_class(kind: int) -> int:
    return 0 if kind < 60 else 3 if kind >= 85 else 2 if kind % 3 == 0 else 1


def load_telemetry(store: PrometheusTelemetryStore, gpus: int, vm_url: str,
                   raw_hours: int) -> None:
    lo = to_ms(NOW) - raw_hours * HOUR_MS
    minutes = (to_ms(NOW) - lo) // MINUTE_MS
    # `value` switches on the minutes since the full history's start
    first_minute = (lo - (to_ms(NOW) - HISTORY_HOURS * HOUR_MS)) // MINUTE_MS
    # Every GPU of one class sends the same values: one JSON array per (metric, class).
    runs = {(m, c): orjson.dumps([value(m, kind, minute)
                                  for minute in range(first_minute, first_minute + minutes)])
            for m in range(len(METRICS)) for c, kind in CLASS_KINDS.items()}
    stamps = orjson.dumps([lo + m * MINUTE_MS + 30_000 for m in range(minutes)])
    t, written, cpu = time.perf_counter(), 0, cpu_here()
    body: list[bytes] = []
    for g in range(gpus):
        kind = kind_class(zlib.crc32(str(g).encode()) % 100)
        for m, metric in enumerate(METRICS):
            labels = exposition_labels(series(
                metric, f"GPU-{g:08d}", node=f"node-{g // 8:05d}",
                environment=ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)], model="H100-80GB"))
            body.append(b'{"metric":' + orjson.dumps(labels) + b',"values":' + runs[(m, kind)]
                        + b',"timestamps":' + stamps + b"}")
            written += minutes
        if len(body) >= 3000 or g == gpus - 1:
            store._client.post(f"{vm_url}/api/v1/import",
                               content=b"\n".join(body)).raise_for_status()
            body = []
    store._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
    print(f"telemetry: {written:,} samples imported in {time.perf_counter() - t:.1f} s "
          f"({cpu_here() - cpu:.1f} CPU-s here), {raw_hours} h of raw history")


def cpu_here() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


PROFILES: dict[str, Path] = {}  # label → where its cProfile stats go (`--profile`)


def measured(label: str, vm_pid: int, masks, work) -> object:
    """Run `work`, print its wall time, CPU here and in VictoriaMetrics, and the numbers
    the engine returned to `masks` (the masks object, or a function giving it); profiled
    where PROFILES names the label (the figures then include the profiler's cost)."""
    def of():
        return masks() if callable(masks) and not hasattr(masks, "refresh") else masks
    fetched = of().values_fetched if of() else 0
    gc.collect()
    profile = cProfile.Profile() if label in PROFILES else None
    wall, here, vm = time.perf_counter(), cpu_here(), cpu_seconds(vm_pid)
    result = work() if profile is None else profile.runcall(work)
    wall, here, vm = time.perf_counter() - wall, cpu_here() - here, cpu_seconds(vm_pid) - vm
    values = (of().values_fetched - fetched) if of() else 0
    print(f"{label:44s} wall {wall * 1000:9.1f} ms   CPU here {here:7.2f} s   "
          f"VictoriaMetrics {vm:6.2f} s   values {values:>11,}", flush=True)
    if profile is not None:
        profile.dump_stats(PROFILES[label])
    return result


def start_engine(data_dir: Path) -> tuple[subprocess.Popen, str]:
    """VictoriaMetrics with the limits a 100,000-GPU fleet's mask queries need
    (docs/telemetry-store.md): ~3 series per GPU in one query, and a minute to answer."""
    return start_victoria_metrics(data_dir, "-search.maxUniqueTimeseries=1000000",
                                  "-search.maxQueryDuration=10m",
                                  "-dedup.minScrapeInterval=1ms")


def copy_recorded_hour(telemetry: PrometheusTelemetryStore, leader, source_ms: int) -> int:
    """Record the masks of hour `source_ms` again at every older hour of the cache's window
    that holds no raw data (a bench with fewer raw hours than 25), as the leader's import
    would (the same series, values and marker), but one line per series for all the copied
    hours: a cold replica then reads 24 recorded hours of the whole fleet."""
    hour = leader._hours[source_ms]
    hours = [h for h in range(to_ms(NOW) - HISTORY_HOURS * HOUR_MS, source_ms, HOUR_MS)
             if h not in leader._hours or not len(leader._hours[h].units())]
    uids = hour.units()
    rows = np.column_stack([c.astype(np.float64) for c in hour.codes(uids)]).tolist()
    extra = threshold_labels(leader.thresholds)
    stamps = orjson.dumps([h + slot * SLOT_MS for h in hours for slot in range(len(SLOTS))])
    engine = telemetry._mask_engine()
    lines = [b'{"metric":' + orjson.dumps({"__name__": RECORDED_NAME,
                                           **leader._unit_labels[uid], **extra})
             + b',"values":' + orjson.dumps(row * len(hours)) + b',"timestamps":' + stamps
             + b"}" for uid, row in zip(uids.tolist(), rows, strict=True)]
    for at in range(0, len(lines), 20_000):
        engine.import_lines(b"\n".join(lines[at:at + 20_000]) + b"\n")
    for hour_ms in hours:
        engine.import_lines(marker_line(hour_ms, len(uids), leader.thresholds))
    return len(hours)


def record_hours(vm: subprocess.Popen, vm_url: str, args: argparse.Namespace,
                 grace: timedelta, settings: Settings) -> None:
    """Step 1: load the raw samples; the leader computes and records the closed hours."""
    writer = PrometheusTelemetryStore(vm_url, timeout_s=1200)
    load_telemetry(writer, args.gpus, vm_url, args.raw_hours)

    # 1. The leader records the closed hours (computed in the engine).
    writer.rollup(NOW - grace)
    leader = writer.minute_masks(thresholds_of(settings))
    measured("leader: refresh (cold, nothing recorded)", vm.pid, leader,
             leader.refresh)
    computed = leader.hours_computed
    print(f"  {computed} closed hours computed in the engine "
          f"({min(args.raw_hours, HISTORY_HOURS) - 1} of them with data), and the "
          "open hour")
    newest = to_ms(NOW - grace) // HOUR_MS * HOUR_MS - HOUR_MS
    measured("leader: compute one closed hour again", vm.pid, leader,
             lambda: leader._compute(newest, newest + HOUR_MS))
    if args.raw_hours < HISTORY_HOURS - 1:
        copied = measured("bench: copy the newest closed hour", vm.pid, None,
                          lambda: copy_recorded_hour(writer, leader, newest))
        print(f"  {copied} older hours recorded as copies of the newest closed one")
        writer._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
    recorded = measured("leader: record the closed hours", vm.pid, leader,
                        leader.record_closed_hours)
    print(f"  {recorded} hours recorded, from the leader's cache")
    writer._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
    writer._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
    writer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--raw-hours", type=int, default=HISTORY_HOURS,
                        help="hours of raw samples up to NOW (the older ones of the 24 are "
                        "recorded as copies of the newest closed hour)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the engine's data and the state store in DIR: a first run "
                        "loads them and records the hours (step 1), later runs with the "
                        "same DIR (and sizes) skip step 1 and measure the replica's parts")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="write cProfile stats of the cold start's two parts and of the "
                        "warm idle list (asked of the service in this thread, after the "
                        "route's) to DIR")
    parser.add_argument("--queries-at-once", type=int, metavar="N",
                        help="prometheus_masks.QUERIES_AT_ONCE for this run")
    args = parser.parse_args()
    if args.queries_at_once:
        prometheus_masks.QUERIES_AT_ONCE = args.queries_at_once
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        PROFILES.update({"cold part: read the recorded hours": args.profile / "cold-read.prof",
                         "cold part: compute the open hour so far":
                         args.profile / "cold-compute.prof",
                         "replica: idle list (warm, the service)":
                         args.profile / "warm-idle.prof"})
    with tempfile.TemporaryDirectory(prefix="bench-vmf-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        ready = root / "ready"
        vm, vm_url = start_engine(root / "vm")
        try:
            state = StateStore(f"sqlite:///{root / 'state.db'}")
            settings = Settings(data_dir=root / "data")
            grace = timedelta(seconds=settings.telemetry_rollup_grace_s)
            if ready.is_file():
                print(f"kept: {ready.read_text().strip()} (step 1 skipped)")
            else:
                state.migrate()
                owners = load_state(state, args.gpus, random.Random(args.seed))
                print(f"state: {args.gpus:,} GPUs, {len(owners):,} bound")
                record_hours(vm, vm_url, args, grace, settings)
                ready.write_text(f"{args.gpus} GPUs, {args.raw_hours} raw hours\n")

            # 2. What a cold start costs, in its two parts (a throwaway masks object).
            parts = PrometheusTelemetryStore(vm_url, timeout_s=1200)
            parts.rollup(NOW - grace)
            probe = parts.minute_masks(thresholds_of(settings))
            done = to_ms(NOW - grace) // MINUTE_MS * MINUTE_MS
            open_hour = done // HOUR_MS * HOUR_MS
            half_ms = getattr(prometheus_masks, "HALF_MS", None)  # None: code before halves
            if half_ms is not None and done >= open_hour + half_ms:
                # Data kept from a run before halves were recorded: the leader's part now
                # (computed in the engine: a leader's cache would hold it), once.
                leader = parts.minute_masks(thresholds_of(settings))
                measured("leader: record the open hour's first half", vm.pid, leader,
                         lambda: leader._record_half(open_hour))
                print(f"  halves recorded: {leader.halves_recorded} (0: found recorded)")
                parts._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
            read = measured("cold part: read the recorded hours", vm.pid, probe,
                            lambda: probe._read_recorded(open_hour - 25 * HOUR_MS, open_hour))
            print(f"  {len(read)} hours read")
            measured("cold part: compute the open hour so far", vm.pid, probe,
                     lambda: probe._compute(open_hour, done))
            if half_ms is not None and done >= open_hour + half_ms:
                half = measured("cold part: read the open hour's first half", vm.pid, probe,
                                lambda: probe._read_half(open_hour))
                print(f"  first half read: {half is not None}")
                measured("cold part: compute the open half so far", vm.pid, probe,
                         lambda: probe._compute(open_hour + half_ms, done))
            parts.close()

            # 3. A replica starting cold.
            telemetry = PrometheusTelemetryStore(vm_url, timeout_s=1200)
            clock = ManualClock(NOW)
            gf = Gpufleet(state, settings, clock, telemetry=telemetry)
            token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
            headers = {"Authorization": f"Bearer {token}"}
            telemetry.rollup(NOW - grace)

            def masks():
                return gf.queries._masks[1] if gf.queries._masks else None

            with TestClient(create_app(gf, background_loops=False)) as client:
                def get(path: str, **params):
                    response = client.get(f"/api/v1/telemetry/{path}", params=params,
                                          headers=headers)
                    assert response.status_code == 200, response.text
                    return response.json()
                view = measured("replica: funnel by project, 24 h (cold)", vm.pid, masks,
                                lambda: get("funnel", by="project", window="24h"))
                f = view["fleet"]
                m = masks()
                print(f"  {len(view['rows'])} rows; allocated {f['allocated_gpu_hours']:,.0f} "
                      f"active {f['active_gpu_hours']:,.0f} GPU-h, reporting "
                      f"{f['reporting_gpu_hours']:,.0f}; hours read {m.hours_read}, "
                      f"computed {m.hours_computed}, halves read "
                      f"{getattr(m, 'halves_read', '-')}")
                idle = measured("replica: idle list (after the cold funnel)", vm.pid, masks,
                                lambda: get("idle"))
                print(f"  {len(idle['items'])} idle allocations, {idle['unknown']} unknown; "
                      f"held {sum(i['state'] == 'idle_held' for i in idle['items'])}, "
                      f"answer's crc32 {zlib.crc32(orjson.dumps(idle)):08x}")
                for _ in range(2):
                    measured("replica: funnel by project, 24 h (warm)", vm.pid, masks,
                             lambda: get("funnel", by="project", window="24h"))
                measured("replica: funnel of the fleet, 24 h (warm)", vm.pid, masks,
                         lambda: get("funnel", window="24h"))
                again = measured("replica: idle list (warm)", vm.pid, masks, lambda: get("idle"))
                print(f"  the same answer: {again == idle}")
                if args.profile:  # the route runs in another thread, out of cProfile's sight
                    measured("replica: idle list (warm, the service)", vm.pid, masks,
                             lambda: gf.queries.idle(SYSTEM))
                clock.advance(60)
                telemetry.rollup(clock.now() - grace)
                measured("replica: refresh after one more minute", vm.pid, masks,
                         lambda: gf.queries.masks.refresh())
            gf.close()
        finally:
            vm.terminate()
            vm.wait()


if __name__ == "__main__":
    main()
