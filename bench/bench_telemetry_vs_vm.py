"""Telemetry queries side by side with VictoriaMetrics: each question answered by gpufleet
(the embedded DuckDB store, through the ASGI app) and by Debian's VictoriaMetrics fed the same
raw samples, in one run, with the ratio of their p50s.

    .venv/bin/python -u bench/bench_telemetry_vs_vm.py --gpus 10000

Data: 24 h of raw samples every 10 s of gr_engine_active, sm_active and memory_used per GPU,
generated with numpy an hour at a time (per GPU a kind: 60 % busy, 25 % idle — a third of
those holding memory — the rest switching every 90 minutes; integer noise per sample). The
state store is bench_telemetry_queries.py's (`load_state`: 75 % of GPUs bound to 200
projects, some bindings ending or starting inside the window).

Each hour of raw values goes to both stores:
- VictoriaMetrics gets them through `/api/v1/import` (JSON lines: one line per series and
  hour with `values` and `timestamps`). It has no bindings, so a sample carries the label
  `project` while its GPU is bound, as an exporter tagged by gpufleet would label it.
- The DuckDB store gets the same raw samples in its raw tier (`samples`) and their 1-minute
  rollups (first / last / mean / min / max / count of those very samples) by SQL from numpy
  columns, laid out as its own compaction leaves closed hours, then the hourly rollups.
  Feeding 259 M samples through `write()` (the ingest path) would take far longer than the
  queries' subject warrants; the rows are the ones ingest and rollup would have made.

Then each question, `--repeats` times after a first call, both ways: gpufleet through the
ASGI app (wall time and this process's CPU per call); VictoriaMetrics through `/api/v1/query`
at the same instant (wall time and its process's CPU per call, from /proc), once with its
result cache bypassed (`nocache=1`: the engine computes the answer) and once as deployed
(its cache on). The MetricsQL for each question, and where it differs from gpufleet's
definition, is beside it below (`VM_QUESTIONS`). The answers are compared and the largest
difference printed.

`--end-minutes-before N` asks both sides N minutes before the data's end (gpufleet's clock,
VictoriaMetrics' `time`): a "last 24 h" window then ends mid-hour, as a live one does
(`--end-minutes-before 23`: at :37).
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import select

from bench_ingest import cpu_seconds
from bench_remote_write import start_victoria_metrics
from bench_telemetry_queries import ENVIRONMENTS, METRICS, NOW, load_state
from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Binding, Project
from gpufleet.tsdb import Sample, series
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS, to_ms

HOURS = 24
SAMPLE_MS = 10_000
PER_MINUTE = MINUTE_MS // SAMPLE_MS  # 6
PER_HOUR = HOUR_MS // SAMPLE_MS  # 360
OFFSET_MS = 5_000  # samples at :05, :15, … so a minute's six never sit on a window's edge
VM_NAMES = ("gpu_gr_engine_active", "gpu_sm_active", "gpu_memory_used_bytes")
GIB = 1024**3
IDLE_FULL = 4 * 60 * PER_MINUTE * 9 // 10  # 90 % of 4 h of samples: "known ≥ 90 %"

# The questions for VictoriaMetrics, evaluated at NOW (or --end-minutes-before it). Where
# they differ from gpufleet's:
# - project average: gpufleet attributes a GPU's samples to the binding holding it at each
#   instant (the binding intervals); here the `project` label does the same. Both average
#   each series' (slot's) mean over the window, then the series of a project.
# - funnel: gpufleet's allocated hours are the bindings' time; VictoriaMetrics knows only
#   the time a bound GPU reported (its samples × 10 s), equal here as every GPU reports.
#   Active / effective: minutes whose 1-minute mean of gr_engine_active is ≥ 5 % (and of
#   sm_active ≥ 50 %), as gpufleet's masks judge them; a minute cut by a binding's edge
#   counts here with the samples on its side, in gpufleet by where the minute starts.
# - idle: a bound GPU whose 1-minute means of gr_engine_active stayed below 5 % over the
#   last 4 h with ≥ 90 % of its samples there (gpufleet: ≥ 90 % of its minutes known, and
#   bound since before the window: a binding 3.6 h old passes here, not there), and its
#   memory in the last 5 minutes (idle-held at ≥ 1 GiB). gpufleet also gives the time
#   since when it is idle (a 24 h look back), not asked of VictoriaMetrics.
_BOUND = '{project!=""}'
VM_QUESTIONS = {
    "project average": (
        f"avg by (project) (avg_over_time(gpu_sm_active{_BOUND}[24h]))"),
    "funnel by project": (
        "union("
        f"label_set(sum by (project) (count_over_time(gpu_gr_engine_active{_BOUND}[24h]))"
        f" / {60 * PER_MINUTE}, \"hours\", \"allocated\"), "
        f"label_set(sum by (project) (count_over_time((avg_over_time("
        f"gpu_gr_engine_active{_BOUND}[1m]) >= 5)[24h:1m])) / 60, \"hours\", \"active\"), "
        f"label_set(sum by (project) (count_over_time(((avg_over_time("
        f"gpu_gr_engine_active{_BOUND}[1m]) >= 5) and on (gpu_uuid, project) "
        f"(avg_over_time(gpu_sm_active{_BOUND}[1m]) >= 50))[24h:1m])) / 60, "
        "\"hours\", \"effective\"))"),
    "idle list": (
        f"last_over_time(gpu_memory_used_bytes{_BOUND}[5m]) and on (gpu_uuid) "
        f"(max_over_time(avg_over_time(gpu_gr_engine_active{_BOUND}[1m])[4h:1m]) < 5) "
        f"and on (gpu_uuid) (count_over_time(gpu_gr_engine_active{_BOUND}[4h]) "
        f">= {IDLE_FULL})"),
}


@dataclass
class Fleet:
    """What the generator needs of the fleet: each GPU's kind and its binding, if any."""

    kinds: np.ndarray  # per GPU, 0–99
    bound_from_ms: np.ndarray  # per GPU; int64 max where never bound
    bound_to_ms: np.ndarray  # per GPU; int64 max while open
    projects: list[str | None]  # per GPU


def read_fleet(state: StateStore, gpus: int, seed: int) -> Fleet:
    never = np.iinfo(np.int64).max
    lo, hi = np.full(gpus, never), np.full(gpus, never)
    projects: list[str | None] = [None] * gpus
    with state.read() as session:
        for gpu_id, name, started, ended in session.execute(
                select(Binding.gpu_id, Project.name, Binding.started_at, Binding.ended_at)
                .join(Project, Project.id == Binding.project_id)):
            g = gpu_id - 1
            lo[g] = to_ms(started)
            hi[g] = never if ended is None else to_ms(ended)
            projects[g] = name
    kinds = np.random.default_rng(seed).integers(0, 100, gpus)
    return Fleet(kinds, lo, hi, projects)


def raw_hour(fleet: Fleet, hour: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """gr_engine_active and sm_active (uint8, GPUs × 360) and memory_used (float per GPU)
    for hour `hour` (0 = the window's first) of the window."""
    rng = np.random.default_rng([seed, hour])
    gpus = len(fleet.kinds)
    minute = hour * 60 + np.arange(PER_HOUR) // PER_MINUTE
    k = fleet.kinds[:, None]
    switching_busy = ((minute // 90) % 2 == 0)[None, :]
    busy = (k < 60) | ((k >= 85) & switching_busy)
    noise = rng.integers(0, 25, (gpus, PER_HOUR), dtype=np.uint8)
    low = rng.integers(0, 3, (gpus, PER_HOUR), dtype=np.uint8)
    gr = np.where(busy, np.where(k < 60, 70 + noise, 60 + noise % 5), low).astype(np.uint8)
    sm = np.where(busy, np.where(k < 60, 35 + (noise * 7) % 40, 45 + noise % 5), 0)
    sm = sm.astype(np.uint8)
    kinds = fleet.kinds
    memory = np.where((kinds < 60) | ((kinds < 85) & (kinds % 3 == 0)), 40e9, 1e8)
    return gr, sm, memory


class DuckDBLoader:
    """The raw tier and the 1-minute rollups, an hour at a time, from the raw values."""

    def __init__(self, path: Path, gpus: int):
        self.store = DuckDBTelemetryStore(path)
        self.gpus = gpus
        before = NOW - timedelta(days=2)
        self.store.write([Sample(series(m, f"GPU-{g:08d}", node=f"node-{g // 8:05d}",
                                        environment=ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)],
                                        model="H100-80GB"), before, 0.0)
                          for g in range(gpus) for m in METRICS])
        ids = {(labels.gpu_uuid, labels.metric): sid for labels, sid in self.store._ids.items()}
        # Series id per (metric, GPU), rows ordered by id as the store's compaction lays out.
        self.sids = np.array([[ids[(f"GPU-{g:08d}", m)] for g in range(gpus)]
                              for m in METRICS], dtype=np.int32)
        self.order = np.argsort(self.sids.ravel(), kind="stable")
        self.seconds = 0.0

    def add_hour(self, hour_ms: int, gr: np.ndarray, sm: np.ndarray,
                 memory: np.ndarray) -> None:
        t = time.perf_counter()
        con = self.store._con
        values = np.stack([gr.astype(np.float64), sm.astype(np.float64),
                           np.repeat(memory[:, None], PER_HOUR, axis=1)])  # metric, GPU, sample
        flat = values.reshape(-1, PER_HOUR)[self.order]  # series in id order
        sids = self.sids.ravel()[self.order]
        ts = hour_ms + OFFSET_MS + SAMPLE_MS * np.arange(PER_HOUR, dtype=np.int64)
        # Raw tier: in arrival order (time, then series).
        raw = {"series_id": np.tile(sids, PER_HOUR), "ts_ms": np.repeat(ts, len(sids)),
               "value": np.ascontiguousarray(flat.T).ravel()}
        con.register("raw_chunk", raw)
        con.execute("INSERT INTO samples SELECT series_id, ts_ms, value FROM raw_chunk")
        con.unregister("raw_chunk")
        minutes = flat.reshape(len(sids), 60, PER_MINUTE)
        rows = len(sids) * 60
        rollup = {
            "series_id": np.repeat(sids, 60),
            "bucket_ms": np.tile(hour_ms + MINUTE_MS * np.arange(60, dtype=np.int64),
                                 len(sids)),
            "v_first": minutes[:, :, 0].ravel(), "v_last": minutes[:, :, -1].ravel(),
            "v_mean": minutes.mean(axis=2).ravel(), "v_min": minutes.min(axis=2).ravel(),
            "v_max": minutes.max(axis=2).ravel(),
            "n": np.full(rows, PER_MINUTE, dtype=np.int32), "inc": np.zeros(rows)}
        con.register("rollup_chunk", rollup)
        con.execute("INSERT INTO rollup_1m SELECT series_id, bucket_ms, v_first, v_last, "
                    "v_mean, v_min, v_max, n, inc FROM rollup_chunk")
        con.unregister("rollup_chunk")
        self.seconds += time.perf_counter() - t

    def finish(self, hi_ms: int) -> DuckDBTelemetryStore:
        t = time.perf_counter()
        con = self.store._con
        con.execute(f"""INSERT INTO rollup_1h SELECT series_id,
            bucket_ms // {HOUR_MS} * {HOUR_MS}, arg_min(v_first, bucket_ms),
            arg_max(v_last, bucket_ms), avg(v_mean), min(v_min), max(v_max), sum(n)::INTEGER, 0
            FROM rollup_1m WHERE bucket_ms < {hi_ms // HOUR_MS * HOUR_MS}
            GROUP BY ALL ORDER BY 1, 2""")
        con.execute("INSERT OR REPLACE INTO rollup_state VALUES ('1m', $1), ('1h', $2)",
                    [hi_ms // MINUTE_MS * MINUTE_MS, hi_ms // HOUR_MS * HOUR_MS])
        con.execute("CHECKPOINT")
        self.seconds += time.perf_counter() - t
        return self.store


class VictoriaMetricsLoader:
    """JSON lines for /api/v1/import, posted from a thread while the next hour is made."""

    def __init__(self, url: str, fleet: Fleet):
        self.url = url
        self.fleet = fleet
        self.http = httpx.Client(timeout=600)
        self.pending: queue.Queue = queue.Queue(maxsize=2)
        self.failed: list[BaseException] = []
        self.posted_s = 0.0
        self.worker = threading.Thread(target=self._post, daemon=True)
        self.worker.start()
        gpus = len(fleet.kinds)
        self.labels = [[self._labels(name, g) for g in range(gpus)] for name in VM_NAMES]
        # Fixed-width numbers: "  7," (JSON allows the spaces), so a row formats in numpy.
        self.cells = np.array([f"{v:>3},".encode() for v in range(256)], dtype="S4")

    def _labels(self, name: str, g: int) -> tuple[bytes, bytes]:
        """A series' metric object, unbound and bound (its project)."""
        base = {"__name__": name, "gpu_uuid": f"GPU-{g:08d}", "node": f"node-{g // 8:05d}",
                "environment": ENVIRONMENTS[(g // 8) % len(ENVIRONMENTS)],
                "model": "H100-80GB"}
        project = self.fleet.projects[g]
        bound = {**base, "project": project} if project else base
        return (json.dumps({"metric": base}, separators=(",", ":"))[:-1].encode(),
                json.dumps({"metric": bound}, separators=(",", ":"))[:-1].encode())

    def add_hour(self, hour_ms: int, gr: np.ndarray, sm: np.ndarray,
                 memory: np.ndarray) -> int:
        ts = hour_ms + OFFSET_MS + SAMPLE_MS * np.arange(PER_HOUR, dtype=np.int64)
        stamps = b'],"timestamps":[' + ",".join(map(str, ts.tolist())).encode() + b"]}\n"
        f = self.fleet
        lo, hi = f.bound_from_ms[:, None], f.bound_to_ms[:, None]
        bound = (ts[None, :] >= lo) & (ts[None, :] < hi)  # GPU × sample
        whole = bound.all(axis=1)
        none = ~bound.any(axis=1)
        lines = 0
        for m, name_labels in enumerate(self.labels):
            if m < 2:
                cells = self.cells[gr if m == 0 else sm]  # GPU × sample of 4 bytes
                text = cells.tobytes()
                width = PER_HOUR * 4

                def row(g: int, _text=text, _width=width) -> bytes:
                    return _text[g * _width:(g + 1) * _width - 1]
            else:
                memo: dict[float, bytes] = {}

                def row(g: int, _memo=memo) -> bytes:
                    v = float(memory[g])
                    if v not in _memo:
                        _memo[v] = ",".join([str(int(v))] * PER_HOUR).encode()
                    return _memo[v]
            parts: list[bytes] = []
            for g, (unbound_labels, bound_labels) in enumerate(name_labels):
                if whole[g] or none[g]:
                    parts += [bound_labels if whole[g] else unbound_labels, b',"values":[',
                              row(g), stamps]
                    lines += 1
                    continue
                values = row(g).split(b",")  # an edge inside this hour: one line per side
                for side, labels in ((True, bound_labels), (False, unbound_labels)):
                    keep = np.flatnonzero(bound[g] == side)
                    if len(keep):
                        parts += [labels, b',"values":[',
                                  b",".join(values[i].strip() for i in keep),
                                  b'],"timestamps":[',
                                  ",".join(map(str, ts[keep].tolist())).encode(), b"]}\n"]
                        lines += 1
            self._raise_failed()
            self.pending.put(b"".join(parts))
        return lines

    def _post(self) -> None:
        while (body := self.pending.get()) is not None:
            try:
                t = time.perf_counter()
                self.http.post(f"{self.url}/api/v1/import", content=body).raise_for_status()
                self.posted_s += time.perf_counter() - t
            except BaseException as error:  # reported by the next add_hour / finish
                self.failed.append(error)

    def _raise_failed(self) -> None:
        if self.failed:
            raise RuntimeError(f"VictoriaMetrics import failed: {self.failed[0]}")

    def finish(self) -> None:
        self.pending.put(None)
        self.worker.join()
        self._raise_failed()
        self.http.get(f"{self.url}/internal/force_flush").raise_for_status()


@dataclass
class Timing:
    first_ms: float
    wall_ms: list[float]
    cpu_ms: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.wall_ms)

    @property
    def cpu_p50(self) -> float:
        return statistics.median(self.cpu_ms)

    @property
    def cpu_mean(self) -> float:
        """/proc counts CPU in ticks (10 ms): the mean over the repeats is the finer figure."""
        return statistics.fmean(self.cpu_ms)


def timed(call, cpu_now, repeats: int) -> tuple[Timing, object]:
    wall, cpu, first, answer = [], [], 0.0, None
    for i in range(repeats + 1):
        t, c = time.perf_counter(), cpu_now()
        answer = call()
        elapsed = (time.perf_counter() - t) * 1000
        if i == 0:
            first = elapsed
        else:
            wall.append(elapsed)
            cpu.append((cpu_now() - c) * 1000)
    return Timing(first, wall, cpu), answer


def vm_query(http: httpx.Client, url: str, expr: str, at: datetime, *,
             cache: bool) -> list[dict]:
    params = {"query": expr, "time": f"{to_ms(at) / 1000:.3f}"}
    if not cache:
        params["nocache"] = "1"
    response = http.get(f"{url}/api/v1/query", params=params)
    response.raise_for_status()
    body = response.json()
    if body.get("status") != "success":
        raise RuntimeError(f"VictoriaMetrics: {body}")
    return body["data"]["result"]


def compare(question: str, ours: object, theirs: list[dict]) -> str:
    """A line on how the two answers agree."""
    if question == "project average":
        mine = {s["labels"]["project"]: s["points"][0][1] for s in ours["series"]}
        vm = {r["metric"].get("project"): float(r["value"][1]) for r in theirs}
        common = mine.keys() & vm.keys()
        worst = max((abs(mine[p] - vm[p]) for p in common), default=float("nan"))
        return (f"{len(mine)} projects here, {len(vm)} there, {len(common)} in both; "
                f"largest difference {worst:.3f} percentage points")
    if question == "funnel by project":
        got: dict[str, dict[str, float]] = {}
        for r in theirs:
            got.setdefault(r["metric"]["hours"], {})[r["metric"].get("project")] = \
                float(r["value"][1])
        rows = {r["group"]["project"]: r for r in ours["rows"]}
        out = []
        for what, field in (("allocated", "allocated_gpu_hours"), ("active", "active_gpu_hours"),
                            ("effective", "effective_gpu_hours")):
            here = sum(r[field] for r in rows.values())
            there = sum(got.get(what, {}).values())
            worst = max((abs(rows[p][field] - v) for p, v in got.get(what, {}).items()
                         if p in rows), default=float("nan"))
            out.append(f"{what} {here:,.0f} vs {there:,.0f} GPU-h (worst project "
                       f"{worst:.2f} h)")
        return "; ".join(out)
    items = ours["items"]
    here = {i["gpu_uuid"] for i in items}
    there = {r["metric"]["gpu_uuid"] for r in theirs}
    held_here = sum(1 for i in items if i["state"] == "idle_held")
    held_there = sum(1 for r in theirs if float(r["value"][1]) >= GIB)
    return (f"{len(here)} idle here ({held_here} held), {len(there)} there ({held_there} "
            f"held); {len(here & there)} in both")


def every_page(client: TestClient, path: str, headers: dict, limit: int) -> dict:
    """The whole idle list, page after page."""
    params: dict = {"limit": limit}
    items: list = []
    while True:
        body = client.get(path, params=params, headers=headers).json()
        items += body["items"]
        if not body.get("next_cursor"):
            return {**body, "items": items}
        params["cursor"] = body["next_cursor"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-force-merge", action="store_true",
                        help="query VictoriaMetrics without merging its parts first")
    parser.add_argument("--vm-repeats", type=int,
                        help="repeats of each VictoriaMetrics question (default: --repeats)")
    parser.add_argument("--no-vm", action="store_true",
                        help="gpufleet's side only (comparing two versions of gpufleet)")
    parser.add_argument("--data-dir", type=Path,
                        help="keep the loaded stores here; a later run with the same "
                             "--gpus and --seed asks its questions without loading again")
    parser.add_argument("--duckdb-threads", type=int,
                        help="DuckDB's threads for the store asked (as the setting "
                             "telemetry_duckdb_threads; default: DuckDB's, one per core)")
    parser.add_argument("--end-minutes-before", type=int, default=0, metavar="N",
                        help="ask both sides at N minutes before the data's end (gpufleet's "
                             "clock, VictoriaMetrics' `time`): a moving window ending "
                             "mid-hour, e.g. 23 for one ending at :37")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tvm-") as tmp:
        root = args.data_dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        vm, vm_url = start_victoria_metrics(
            root / "vm", "-search.maxQueryDuration=600s")
        try:
            run(args, root, vm, vm_url)
        finally:
            vm.terminate()
            vm.wait()


def run(args, root: Path, vm, vm_url: str) -> None:
    loaded = root / f"loaded-{args.gpus}-{args.seed}"
    state = StateStore(f"sqlite:///{root / 'state.db'}")
    if loaded.exists():
        telemetry = DuckDBTelemetryStore(root / "telemetry.duckdb",
                                         threads=args.duckdb_threads)
        print(f"stores loaded earlier, in {root}")
    else:
        telemetry = load(args, root, vm, vm_url, state)
        loaded.touch()
    ask(args, root, vm, vm_url, state, telemetry)


def load(args, root: Path, vm, vm_url: str, state: StateStore) -> DuckDBTelemetryStore:
    t = time.perf_counter()
    state.migrate()
    owners = load_state(state, args.gpus, random.Random(args.seed))
    fleet = read_fleet(state, args.gpus, args.seed)
    print(f"state: {args.gpus:,} GPUs, {len(owners):,} bound, in "
          f"{time.perf_counter() - t:.1f} s")
    duck = DuckDBLoader(root / "telemetry.duckdb", args.gpus)
    vml = VictoriaMetricsLoader(vm_url, fleet)
    hi = to_ms(NOW)
    lo = hi - HOURS * HOUR_MS
    t, vm_cpu, lines, generate_s = time.perf_counter(), cpu_seconds(vm.pid), 0, 0.0
    for hour in range(HOURS):
        g = time.perf_counter()
        gr, sm, memory = raw_hour(fleet, hour, args.seed)
        generate_s += time.perf_counter() - g
        hour_ms = lo + hour * HOUR_MS
        duck.add_hour(hour_ms, gr, sm, memory)
        g = time.perf_counter()
        lines += vml.add_hour(hour_ms, gr, sm, memory)
        generate_s += time.perf_counter() - g
        if hour % 6 == 5:
            print(f"  {hour + 1} h of 24 loaded, {time.perf_counter() - t:.0f} s")
    vml.finish()
    telemetry = duck.finish(hi)
    samples = args.gpus * len(METRICS) * HOURS * PER_HOUR
    print(f"telemetry: {samples:,} raw samples ({lines:,} JSON lines) in "
          f"{time.perf_counter() - t:.1f} s: generating {generate_s:.1f} s, DuckDB "
          f"{duck.seconds:.1f} s, VictoriaMetrics import {cpu_seconds(vm.pid) - vm_cpu:.1f} "
          f"CPU-s")
    if not args.no_force_merge:
        t, c = time.perf_counter(), cpu_seconds(vm.pid)
        httpx.get(f"{vm_url}/internal/force_merge", timeout=3600).raise_for_status()
        print(f"VictoriaMetrics force_merge: {time.perf_counter() - t:.1f} s, "
              f"{cpu_seconds(vm.pid) - c:.1f} CPU-s")
    return telemetry


def ask(args, root: Path, vm, vm_url: str, state: StateStore,
        telemetry: DuckDBTelemetryStore) -> None:
    settings = Settings(data_dir=root / "data")
    at = NOW - timedelta(minutes=args.end_minutes_before)
    if args.end_minutes_before:
        print(f"asked at {at:%H:%M} UTC of the data's day ({args.end_minutes_before} min "
              "before its end)")
    gf = Gpufleet(state, settings, ManualClock(at), telemetry=telemetry)
    token = bootstrap_admin_token(gf, settings.data_dir / "admin-token")
    headers = {"Authorization": f"Bearer {token}"}
    ours = {
        "project average": ("/api/v1/telemetry/query",
                            {"metric": "gpu.sm_active", "by": "project", "since": "24h",
                             "step": "24h"}),
        "funnel by project": ("/api/v1/telemetry/funnel", {"by": "project", "window": "24h"}),
        "idle list": ("/api/v1/telemetry/idle", {}),
    }
    http = httpx.Client(timeout=600)
    rows = []
    with TestClient(create_app(gf, background_loops=False)) as client:
        for question, (path, params) in ours.items():
            def ask(path=path, params=params):
                response = client.get(path, params=params, headers=headers)
                assert response.status_code == 200, response.text
                return response.json()
            here, _ = timed(ask, time.process_time, args.repeats)
            whole = ask() if question != "idle list" else \
                every_page(client, path, headers, settings.page_size_max)
            if args.no_vm:
                print(f"{question}: gpufleet p50 {here.p50:8.1f} ms  CPU p50 "
                      f"{here.cpu_p50:8.1f} ms  mean {here.cpu_mean:8.1f} ms")
                continue
            expr = VM_QUESTIONS[question]
            vm_repeats = args.vm_repeats or args.repeats
            computed, theirs = timed(lambda e=expr: vm_query(http, vm_url, e, at, cache=False),
                                     lambda: cpu_seconds(vm.pid), vm_repeats)
            cached, _ = timed(lambda e=expr: vm_query(http, vm_url, e, at, cache=True),
                              lambda: cpu_seconds(vm.pid), vm_repeats)
            print(f"{question}:\n"
                  f"  gpufleet         first {here.first_ms:8.1f} ms  p50 {here.p50:8.1f} ms"
                  f"  CPU p50 {here.cpu_p50:8.1f} ms  mean {here.cpu_mean:8.1f} ms\n"
                  f"  VM (nocache=1)   first {computed.first_ms:8.1f} ms  p50 "
                  f"{computed.p50:8.1f} ms  CPU p50 {computed.cpu_p50:8.1f} ms  mean "
                  f"{computed.cpu_mean:8.1f} ms\n"
                  f"  VM (cache on)    first {cached.first_ms:8.1f} ms  p50 {cached.p50:8.1f} ms"
                  f"  CPU p50 {cached.cpu_p50:8.1f} ms  mean {cached.cpu_mean:8.1f} ms\n"
                  f"  answers: {compare(question, whole, theirs)}")
            rows.append((question, here, computed, cached))
    if not rows:
        gf.close()
        return
    print(f"\n{'question':20s} {'gpufleet p50':>13s} {'VM p50':>10s} {'ratio':>7s}"
          f" {'gpufleet CPU':>13s} {'VM CPU':>10s} {'CPU ratio':>10s} {'VM p50 cached':>14s}")
    for question, here, computed, cached in rows:  # CPU: mean per call
        print(f"{question:20s} {here.p50:10.1f} ms {computed.p50:7.1f} ms "
              f"{here.p50 / computed.p50:7.3f} {here.cpu_mean:10.1f} ms "
              f"{computed.cpu_mean:7.1f} ms {here.cpu_mean / computed.cpu_mean:10.3f} "
              f"{cached.p50:11.1f} ms")
    gf.close()


if __name__ == "__main__":
    main()
