"""Telemetry ingest: server CPU-seconds per million samples, and samples/s.

    python -u bench/bench_ingest.py --nodes 1250 --rounds 4

A real server (its own process, embedded DuckDB telemetry store) with a registered fleet of
`--nodes` × 8 GPUs (1,250: the 10,000-GPU fleet of issue 4); a load generator in another
process posts pre-encoded batches as fast as the server takes them: the core catalogue (19
metrics) of every GPU at a 10 s collection interval, `--ticks-per-batch` ticks per upload
(what an agent sends at its default upload interval), `--rounds` uploads per node, round
by round as agents send them. `--warmup-rounds` uploads per node go first and are not
measured: they are a server's first minutes (each series and each node's GPUs seen for
the first time), not its steady state. The server's CPU time is read from /proc before and
after, so the figure is the server's alone — HTTP, authentication, decoding, checks and
the store — not the generator's.

Target (issue 4): ≤ 3 CPU-s per million samples (≥ 330,000 samples/s per core).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from bench_fleet_scale import register_fleet
from common import running_server
from gpufleet.agent.options import TelemetryOptions
from gpufleet.domain.telemetry.catalogue import CORE, metric
from gpufleet.domain.telemetry.vocabulary import Unit
from gpufleet.sim.nodes import iter_nodes
from gpufleet.sim.scaled import scaled_spec
from gpufleet.wire.telemetry import NodeSnapshot, UnitSnapshot
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, columnar, encode

TICK_S = 10
GPUS_PER_NODE = 8  # scaled_spec's nodes
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_S


def plausible(name: str, rng: random.Random) -> float:
    unit = metric(name).unit
    if unit is Unit.PERCENT:
        return round(rng.uniform(0, 100), 1)
    if unit in (Unit.BOOLEAN, Unit.FLAGS, Unit.CODE):
        return 0.0
    if unit is Unit.CELSIUS:
        return float(rng.randint(30, 80))
    return float(rng.randint(0, 80 * 1024**3)) if unit is Unit.BYTES else rng.uniform(0, 700)


def encoded_rounds(nodes: int, rounds: int, ticks_per_batch: int = 3,
                   seed: int = 1) -> tuple[list[list[bytes]], int]:
    """Each round's batches (one per node), oldest round first, ending now; and the samples
    each round holds."""
    rng = random.Random(seed)
    start = datetime.now(UTC) - timedelta(seconds=rounds * ticks_per_batch * TICK_S)
    by_round: list[list[bytes]] = [[] for _ in range(rounds)]
    samples = 0
    for node in iter_nodes(scaled_spec(nodes)):
        uuids = [g.uuid for g in node.registration.gpus]
        for round_ in range(rounds):
            ticks = []
            for tick in range(ticks_per_batch):
                at = start + timedelta(seconds=(round_ * ticks_per_batch + tick) * TICK_S)
                units = tuple(UnitSnapshot(gpu_uuid=u, values={m: plausible(m, rng)
                                                               for m in CORE}) for u in uuids)
                ticks.append(NodeSnapshot(node=node.hostname, at=at, backend="sim",
                                          units=units))
                samples += len(uuids) * len(CORE)
            by_round[round_].append(encode(columnar(f"{node.hostname}-{round_}", ticks)))
    return by_round, samples // rounds


async def post_all(url: str, token: str, batches: list[bytes], concurrency: int) -> None:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               "Content-Encoding": "gzip"}
    queue = list(reversed(batches))  # popped from the end: in the order given
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120,
                                 limits=httpx.Limits(max_connections=concurrency)) as http:
        async def worker() -> None:
            while queue:
                reply = await http.post(TELEMETRY_BATCHES_PATH, content=queue.pop())
                reply.raise_for_status()

        await asyncio.gather(*(worker() for _ in range(concurrency)))


def generate(url: str, token: str, batch_file: str, concurrency: int) -> None:
    """The load generator's process: post the batches in the file, then exit."""
    batches = pickle.loads(Path(batch_file).read_bytes())
    asyncio.run(post_all(url, token, batches, concurrency))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1250,
                        help=f"nodes of {GPUS_PER_NODE} GPUs: 1,250 is issue 4's 10,000 GPUs")
    parser.add_argument("--rounds", type=int, default=4, help="measured uploads per node")
    parser.add_argument("--warmup-rounds", type=int, default=1,
                        help="uploads per node before the measurement (not measured)")
    parser.add_argument("--ticks-per-batch", type=int,
                        default=TelemetryOptions().ticks_per_batch,
                        help="10 s ticks per upload (default: an agent's default upload "
                             "interval over its collection interval)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--steady", action="store_true", help=(
        "measure a server past its first minute: the replay check answers recent uploads "
        "from memory only after the start's future allowance (here 0 s + 60 s)"))
    parser.add_argument("--generate", nargs=3, metavar=("URL", "TOKEN", "FILE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.generate:
        generate(*args.generate, args.concurrency)
        return
    warmup, batches, samples = rounds_to_post(args)
    wire_bytes = sum(len(b) for b in batches)
    gpus = args.nodes * GPUS_PER_NODE
    fleet_rate = gpus * len(CORE) / TICK_S
    print(f"== a {gpus:,}-GPU fleet ({args.nodes} nodes × {GPUS_PER_NODE} GPUs), "
          f"{len(CORE)} metrics every {TICK_S} s ({fleet_rate:,.0f} samples/s), uploads of "
          f"{args.ticks_per_batch} ticks ({args.ticks_per_batch * TICK_S} s, "
          f"{GPUS_PER_NODE * len(CORE) * args.ticks_per_batch} samples); measured: "
          f"{len(batches)} uploads, {samples:,} samples, {wire_bytes / samples:.2f} wire "
          f"bytes/sample, after {len(warmup)} warm-up uploads")
    with tempfile.TemporaryDirectory() as tmp:
        batch_file, warmup_file = Path(tmp) / "batches.pickle", Path(tmp) / "warmup.pickle"
        batch_file.write_bytes(pickle.dumps(batches))
        warmup_file.write_bytes(pickle.dumps(warmup))
        server: list[subprocess.Popen] = []
        started_s = time.monotonic()
        with running_server(Path(tmp) / "data", None, heartbeat_interval_s=3600,
                            telemetry_rollup_interval_s=3600,
                            telemetry_max_sample_future_s=0 if args.steady else 300,
                            on_start=server.append) as (url, admin):
            asyncio.run(register_fleet(url, admin, args.nodes, args.concurrency))
            if args.steady:  # every sample newer than the start + its allowance
                span_s = (args.warmup_rounds + args.rounds) * args.ticks_per_batch * TICK_S
                time.sleep(max(0.0, 65 + span_s - (time.monotonic() - started_s)))
                warmup, batches, _ = rounds_to_post(args)
                batch_file.write_bytes(pickle.dumps(batches))
                warmup_file.write_bytes(pickle.dumps(warmup))
            token = httpx.post(f"{url}/api/v1/tokens", json={"name": "bench", "role": "ingest"},
                               headers={"Authorization": f"Bearer {admin}"}).json()["token"]
            pid = server[0].pid
            post = [sys.executable, __file__, "--concurrency", str(args.concurrency),
                    "--generate", url, token]
            subprocess.run([*post, str(warmup_file)], check=True)
            cpu_before_s, started_s = cpu_seconds(pid), time.perf_counter()
            subprocess.run([*post, str(batch_file)], check=True)
            wall_s, cpu_s = time.perf_counter() - started_s, cpu_seconds(pid) - cpu_before_s
            store_bytes = (Path(tmp) / "data" / "telemetry.duckdb").stat().st_size
    print(f"server CPU {cpu_s:.1f} s over {wall_s:.1f} s wall: "
          f"{cpu_s / samples * 1e6:.2f} CPU-s per million samples "
          f"({samples / cpu_s:,.0f} samples per CPU-second); "
          f"{samples / wall_s:,.0f} samples/s, {len(batches) / wall_s:.0f} batches/s")
    print(f"the fleet's {fleet_rate:,.0f} samples/s would take "
          f"{fleet_rate * cpu_s / samples:.0%} of one core")
    print(f"telemetry file {store_bytes / 1e6:.1f} MB before any rollup or compaction")


def rounds_to_post(args) -> tuple[list[bytes], list[bytes], int]:
    """The warm-up uploads, the measured ones, and the samples the measured ones hold."""
    by_round, per_round = encoded_rounds(args.nodes, args.warmup_rounds + args.rounds,
                                         args.ticks_per_batch)
    flat = [[b for batches in rounds for b in batches]
            for rounds in (by_round[:args.warmup_rounds], by_round[args.warmup_rounds:])]
    return flat[0], flat[1], per_round * args.rounds


if __name__ == "__main__":
    main()
