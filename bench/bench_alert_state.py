"""Recording alert evaluations: rounds per second of CPU for N alerts, through the services.

    python bench/bench_alert_state.py --database sqlite   --alerts 10000
    python bench/bench_alert_state.py --database postgres --alerts 10000

Times `Gpufleet.record_alert_evaluation` (the alert state's whole share of one evaluation:
load, label lookup, state machine, silences, notifications queued through the outbox,
history, commit) for N observations of one rule with no `for`, with one receiver taking
everything, over the rounds an evaluation goes through: every alert new (pending and
firing at once, N notifications queued), a steady round (nothing changes), a round past
the repeat interval (N repeats queued) and a round where everything resolves. The units
named are not in the inventory, so the label lookup reads and finds nothing; the figures
are the state store's and the state machine's, not the evaluator's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpufleet.clock import ManualClock
from gpufleet.domain.operations.notifications import Severity
from gpufleet.domain.operations.observations import Observation
from gpufleet.services.app import Gpufleet
from gpufleet.services.operations.alerts import AlertEvaluation
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Receiver


@dataclass(frozen=True)
class Rule:
    name: str = "gpu-hot"
    severity: Severity = Severity.WARNING
    for_s: float = 0
    labels: dict = field(default_factory=dict)
    group_by: tuple = ()
    summary: str = "GPU hot"
    description: str = ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--alerts", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = (f"sqlite:///{Path(tmp) / 'bench.db'}" if args.database == "sqlite" else
               os.environ.get("GPUFLEET_BENCH_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/test"))
        store = StateStore(url)
        store.migrate()
        clock = ManualClock(datetime(2026, 11, 2, 9, 0, tzinfo=UTC))
        gf = Gpufleet(store, Settings(data_dir=Path(tmp)), clock)
        with store.write() as s:
            s.add(Receiver(name="bench-all", kind="webhook", config={}, matchers=[], kinds=[],
                           min_severity="info", broadcast=True, tells_owners=False,
                           enabled=True, created_by="bench", created_at=clock.now()))
        rule = Rule()

        def observations():
            return [Observation(rule=rule.name, at=clock.now(), value=90.0,
                                labels={"gpu": f"GPU-bench-{i:06d}", "node": f"n{i // 8}"},
                                evidence="gpu.temperature_c 90 ≥ 87")
                    for i in range(args.alerts)]

        rounds = [("all new: pending → firing, told", 0, observations),
                  ("steady: nothing changes", 60, observations),
                  ("repeat interval passed: repeats told", gf.settings.alert_repeat_interval_s,
                   observations),
                  ("all resolve, told", 60, list)]
        print(f"{args.alerts} alerts, {args.database}")
        for name, step_s, make in rounds:
            clock.advance(step_s)
            evaluation = AlertEvaluation([rule], frozenset([rule.name]), make())
            wall, cpu = time.perf_counter(), time.process_time()
            outcome = gf.record_alert_evaluation(evaluation)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(f"  {name:40s} wall {wall:7.2f} s  cpu {cpu:7.2f} s  "
                  f"queued {outcome.notifications}")
        store.dispose()


if __name__ == "__main__":
    main()
