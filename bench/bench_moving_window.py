"""The project average over the last 24 h asked as a live dashboard asks it: once the clock
has moved a minute, with the minute just past written and rolled up — what a caller pays
when the window moves, kept sums' upkeep included.

    .venv/bin/python -u bench/bench_moving_window.py --data-dir /tmp/qb-mid --minutes 15

Reads a copy of the stores bench_telemetry_vs_vm.py loaded in `--data-dir` (their data
end at its NOW, 12:00; the copy goes at exit). Then, per minute from 12:00: the clock
advances 60 s (ManualClock), the minute just past is written as raw samples for every GPU
(rows as the ingest path stores them, straight into the raw tier, like the loader), the
store's upkeep rolls minutes up to the clock less the default grace (120 s: the window's
last ~2 minutes are raw samples), and the project average (by project, since 24h, one
step) is asked through the ASGI app once — the first call after the window moved — and
`--asks` times more. Prints per minute the rollup's CPU (the same code either way), the
first call's wall and CPU, and the other calls' CPU p50; then the first calls' mean
over the minutes after the first: what a caller asking once a minute pays. The first
minute also folds the window's whole hours, as does the first call after the hourly
rollup (13:02 with the grace: `--minutes` past 62 includes it).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from bench_telemetry_queries import METRICS, NOW
from bench_telemetry_vs_vm import HOURS, OFFSET_MS, PER_MINUTE, SAMPLE_MS, raw_hour, read_fleet
from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import MINUTE_MS, to_ms

GRACE = timedelta(seconds=120)  # telemetry_rollup_grace_s's default


def write_minute(store: DuckDBTelemetryStore, sids: np.ndarray, values: np.ndarray,
                 minute_ms: int) -> None:
    """One minute of raw samples (`values`: metric × GPU × 6) into the raw tier."""
    ts = minute_ms + OFFSET_MS + SAMPLE_MS * np.arange(PER_MINUTE, dtype=np.int64)
    flat = values.reshape(-1, PER_MINUTE)
    with store._lock:  # the writer's lock, as ingest holds it
        con = store._con.cursor()
        con.register("minute_chunk", {"series_id": np.tile(sids.ravel(), PER_MINUTE),
                                      "ts_ms": np.repeat(ts, sids.size),
                                      "value": np.ascontiguousarray(flat.T).ravel()})
        con.execute("INSERT INTO samples SELECT series_id, ts_ms, value FROM minute_chunk")
        con.close()
        # As the store's writes do after their commit (raw_writes.py); a store without
        # that log (the code before it) keeps no raw minutes.
        raw_writes = getattr(store._edge_sums, "raw_writes", None)
        if raw_writes is not None:
            raw_writes.wrote(int(ts[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=int, default=15)
    parser.add_argument("--asks", type=int, default=5)
    parser.add_argument("--answers", type=Path,
                        help="write each minute's first answer here (JSON lines), to "
                             "compare two versions' answers with `cmp`")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-moving-", dir=args.data_dir.parent) as tmp:
        root = Path(tmp)
        for name in ("telemetry.duckdb", "state.db"):
            shutil.copy(args.data_dir / name, root / name)
        run(args, root)


def run(args, root: Path) -> None:
    state = StateStore(f"sqlite:///{root / 'state.db'}")
    telemetry = DuckDBTelemetryStore(root / "telemetry.duckdb", apply_interval_s=None)
    fleet = read_fleet(state, args.gpus, args.seed)
    ids = {(labels.gpu_uuid, labels.metric): sid for labels, sid in telemetry._ids.items()}
    sids = np.array([[ids[(f"GPU-{g:08d}", m)] for g in range(args.gpus)] for m in METRICS],
                    dtype=np.int32)
    settings = Settings(data_dir=root / "data")
    clock = ManualClock(NOW)
    gf = Gpufleet(state, settings, clock, telemetry=telemetry)
    headers = {"Authorization":
               f"Bearer {bootstrap_admin_token(gf, settings.data_dir / 'admin-token')}"}
    params = {"metric": "gpu.sm_active", "by": "project", "since": "24h", "step": "24h"}
    firsts, rest = [], []
    with TestClient(create_app(gf, background_loops=False)) as client:
        answers = args.answers.open("w") if args.answers else None

        def ask(record: bool = False) -> tuple[float, float]:
            t, c = time.perf_counter(), time.process_time()
            response = client.get("/api/v1/telemetry/query", params=params, headers=headers)
            assert response.status_code == 200, response.text
            ms = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
            if answers is not None and record:
                answers.write(response.text + "\n")
            return ms

        print("minute  rollup CPU  first call wall / CPU  then CPU p50")
        for minute in range(args.minutes):
            now = clock.advance(60)
            if minute % 60 == 0:  # the hours after the data's end
                gr, sm, memory = raw_hour(fleet, HOURS + minute // 60, args.seed)
            cols = slice(minute % 60 * PER_MINUTE, (minute % 60 + 1) * PER_MINUTE)
            values = np.stack([gr[:, cols].astype(np.float64), sm[:, cols].astype(np.float64),
                               np.repeat(memory[:, None], PER_MINUTE, axis=1)])
            write_minute(telemetry, sids, values, to_ms(now) - MINUTE_MS)
            c = time.process_time()
            telemetry.rollup(now - GRACE)
            rollup_ms = (time.process_time() - c) * 1000
            first_wall, first_cpu = ask(record=True)
            then = [ask()[1] for _ in range(args.asks)]
            print(f"{now:%H:%M}  {rollup_ms:8.1f} ms  {first_wall:8.1f} / {first_cpu:6.1f} ms"
                  f"  {statistics.median(then):8.1f} ms")
            if minute:
                firsts.append(first_cpu)
                rest.extend(then)
    if answers is not None:
        answers.close()
    if firsts:
        print(f"minutes 2-{args.minutes}: first call CPU mean {statistics.fmean(firsts):.1f} ms"
              f" (p50 {statistics.median(firsts):.1f}, max {max(firsts):.1f}); other calls "
              f"CPU mean {statistics.fmean(rest):.1f} ms")
    gf.close()


if __name__ == "__main__":
    main()
