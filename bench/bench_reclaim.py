"""A reclamation round over a fleet with 24 h of history: the dry run (`reclaim run
--dry-run`: judge and decide, write nothing) and the first real round (warn every idle
allocation: a warning row, an audit event and the notifications, in one transaction).

    .venv/bin/python bench/bench_reclaim.py --gpus 10000

The fleet and its telemetry are bench_telemetry_queries.py's (about 75 % of the GPUs bound,
a quarter of them idle); the server's default policy with the action `release`. Reports
wall time and the process's CPU time per round, and what the round did.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_telemetry_queries import NOW, load_state, load_telemetry
from gpufleet.clock import ManualClock
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore


def timed(label: str, call):
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    print(f"{label}: {time.perf_counter() - wall:.2f} s wall, "
          f"{time.process_time() - cpu:.2f} s CPU; steps "
          f"{dict(Counter(s.step for s in result.steps))}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-reclaim-") as tmp:
        root = Path(tmp)
        state = StateStore(f"sqlite:///{root / 'state.db'}")
        state.migrate()
        owners = load_state(state, args.gpus, random.Random(args.seed))
        telemetry = load_telemetry(root / "telemetry.duckdb", args.gpus)
        settings = Settings(data_dir=root / "data", reclaim_action="release")
        gf = Gpufleet(state, settings, ManualClock(NOW), telemetry=telemetry)
        print(f"{args.gpus:,} GPUs, {len(owners):,} bound")
        timed("dry run (cold caches)", lambda: gf.reclaim.run(SYSTEM, dry_run=True))
        timed("dry run", lambda: gf.reclaim.run(SYSTEM, dry_run=True))
        timed("first round (warns)", gf.reclaim.tick)
        timed("next round (waits)", gf.reclaim.tick)
        gf.close()


if __name__ == "__main__":
    main()
