"""One evaluation of the default alert rule pack on VictoriaMetrics (the Prometheus-
compatible telemetry store): CPU here and in VictoriaMetrics.

    cd bench && ../.venv/bin/python -u bench_alert_rules_vm.py --gpus 1000
    cd bench && ../.venv/bin/python -u bench_alert_rules_vm.py --gpus 100000 --without-funnel

Debian's VictoriaMetrics on a loopback port. The state store and 25 h of gr_engine_active,
sm_active and memory_used per GPU as bench_vm_funnel.py writes them (remote-write's own
path, `write_columns`); the health metrics the pack reads (as bench_alert_rules.py: a few
GPUs over each threshold) for the last `--health-minutes`, one sample a minute. Then
`Gpufleet.evaluate_alert_rules` with the default pack: the first evaluation (the idle
rule's masks fill from the engine: cold) and the median of the repeats, each rule's own.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import zlib
from collections import Counter
from datetime import timedelta
from pathlib import Path

from bench_alert_rules import XID
from bench_ingest import cpu_seconds
from bench_remote_write import start_victoria_metrics
from bench_telemetry_queries import ENVIRONMENTS, NOW, load_state
from bench_vm_funnel import cpu_here, load_telemetry
from gpufleet.clock import ManualClock
from gpufleet.domain.operations.rule_files import default_rules
from gpufleet.server import tune_garbage_collector
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb import series
from gpufleet.tsdb.prometheus_store import PrometheusTelemetryStore
from gpufleet.tsdb.protocol import MINUTE_MS, SampleColumns, to_ms

GIB = 1024**3


def health_value(metric: str, k: int, minute: int, last: int) -> float | None:
    """As bench_alert_rules.HEALTH, in Python (k: the GPU's hash % 1000)."""
    if metric == "gpu.memory_total_bytes":
        return 80.0 * GIB
    if metric == "gpu.temperature_celsius":
        return 88.0 if k < 10 else 55.0 + (k + minute) % 20
    if metric == "gpu.clock_throttle_reasons":
        return 64.0 if k < 10 else 4.0 if k < 500 else 0.0
    if metric == "gpu.ecc_uncorrected_errors_total":
        return 1.0 if k < 2 and minute >= last - 3 else 0.0
    if metric == "gpu.remapped_rows_pending":
        return 1.0 if k < 3 else 0.0
    if metric == "gpu.remapped_rows_failed":
        return 1.0 if k < 1 else 0.0
    if metric == "gpu.nvlink_recovery_errors_total":
        return float(minute) if k < 2 else 0.0
    return None


HEALTH = ("gpu.memory_total_bytes", "gpu.temperature_celsius", "gpu.clock_throttle_reasons",
          "gpu.ecc_uncorrected_errors_total", "gpu.remapped_rows_pending",
          "gpu.remapped_rows_failed", "gpu.nvlink_recovery_errors_total")


def load_health(store: PrometheusTelemetryStore, gpus: int, minutes: int, vm_url: str) -> None:
    def attrs(g: int) -> dict:
        return {"node": f"node-{g // 8:05d}", "model": "H100-80GB",
                "environment": ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)]}
    labels = [series(m, f"GPU-{g:08d}", **attrs(g)) for g in range(gpus) for m in HEALTH]
    xid = [series(XID, f"GPU-{g:08d}", labels={"xid": "79"}, **attrs(g))
           for g in range(0, gpus, 100)]
    ks = [zlib.crc32(f"k{g}".encode()) % 1000 for g in range(gpus)]
    t, written = time.perf_counter(), 0
    lo = to_ms(NOW) - minutes * MINUTE_MS
    for minute in range(minutes):
        at_ms = lo + minute * MINUTE_MS + 30_000
        values = [health_value(m, ks[g], minute, minutes - 1)
                  for g in range(gpus) for m in HEALTH]
        values += [1.0 if minute >= minutes - 6 and (g // 100) % 2 == 0 else 0.0
                   for g in range(0, gpus, 100)]
        every = [*labels, *xid]
        store.write_columns([(f"h{minute}", SampleColumns(every, range(len(every)),
                                                         [at_ms] * len(every), values))])
        written += len(values)
    store._client.get(f"{vm_url}/internal/force_flush").raise_for_status()
    print(f"health: {written:,} samples written in {time.perf_counter() - t:.1f} s")


def measured(vm_pid: int, work):
    wall, here, vm = time.perf_counter(), cpu_here(), cpu_seconds(vm_pid)
    result = work()
    return result, cpu_here() - here, cpu_seconds(vm_pid) - vm, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--health-minutes", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--without-funnel", action="store_true",
                        help="write no funnel metrics and leave out the idle-allocation "
                             "rule (its minute masks read 25 h of them: 450 M samples at "
                             "100,000 GPUs): the per-unit telemetry rules at fleet scale")
    args = parser.parse_args()
    tune_garbage_collector()
    with tempfile.TemporaryDirectory(prefix="bench-rules-vm-") as tmp:
        root = Path(tmp)
        vm, vm_url = start_victoria_metrics(root / "vm")
        try:
            state = StateStore(f"sqlite:///{root / 'state.db'}")
            state.migrate()
            load_state(state, args.gpus, random.Random(args.seed))
            telemetry = PrometheusTelemetryStore(vm_url, timeout_s=600)
            if not args.without_funnel:
                load_telemetry(telemetry, args.gpus, vm_url)
            load_health(telemetry, args.gpus, args.health_minutes, vm_url)
            settings = Settings(data_dir=root / "data")
            gf = Gpufleet(state, settings, ManualClock(NOW), telemetry=telemetry)
            telemetry.rollup(NOW - timedelta(seconds=settings.telemetry_rollup_grace_s))
            rules = [r for r in default_rules()
                     if not args.without_funnel or r.name != "idle-allocation"]
            result, here, in_vm, wall = measured(vm.pid,
                                                 lambda: gf.evaluate_alert_rules(rules))
            assert not result.unavailable, result.unavailable
            print(f"first evaluation (cold masks): CPU here {here:.2f} s, VictoriaMetrics "
                  f"{in_vm:.2f} s, wall {wall:.2f} s, {len(result.observations):,} observations")
            runs = [measured(vm.pid, lambda: gf.evaluate_alert_rules(rules))
                    for _ in range(args.repeats)]
            print(f"default pack, {len(rules)} rules, {args.gpus:,} GPUs: CPU here p50 "
                  f"{statistics.median(r[1] for r in runs):.2f} s, VictoriaMetrics p50 "
                  f"{statistics.median(r[2] for r in runs):.2f} s, wall p50 "
                  f"{statistics.median(r[3] for r in runs):.2f} s ({args.repeats} repeats)")
            found = Counter(o.rule for o in runs[-1][0].observations)
            for rule in rules:
                _, here, in_vm, wall = measured(
                    vm.pid, lambda rule=rule: gf.evaluate_alert_rules([rule]))
                print(f"  {rule.name:28s} CPU here {here * 1000:6.0f} ms  VM "
                      f"{in_vm * 1000:6.0f} ms  wall {wall * 1000:6.0f} ms  "
                      f"{found.get(rule.name, 0):5,} observations")
            gf.close()
        finally:
            vm.terminate()
            vm.wait()


if __name__ == "__main__":
    main()
