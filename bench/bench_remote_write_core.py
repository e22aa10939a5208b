"""The remote-write receiver's core in-process: decode, columns, the store's write.

    cd bench && ../.venv/bin/python -u bench_remote_write_core.py --nodes 100 --scrapes 12

"decode" is `decode_write_columns` and the series plans' lookup; "columns" the receiver's
`remote_write_columns`; "write" the DuckDB store's `write_columns` (the journal); "apply"
its journal applied into DuckDB (the server does that on a thread of its own; process CPU
counts DuckDB's threads too).

`bench_remote_write.py`'s bodies (dcgm-exporter series of `--nodes` × 8 GPUs, one sample
per series per scrape), with the fleet's inventory built in memory instead of registered:
no HTTP, no authentication, no state store. The first scrape (every series new) is run
once, not timed (its series' plans are made then, as a server makes them on first sight);
then every later scrape is timed `--repeats` times (fresh batch keys each time) and the
best is printed, µs of process CPU per sample for each step. The best of several is what
makes a 10 % change visible on a shared machine, where one server run of
`bench_remote_write.py` swings more than that.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench_remote_write import dcgm_bodies
from gpufleet.services.inventory.node_units import NodeUnits
from gpufleet.services.telemetry.batch_columns import TimeWindow
from gpufleet.services.telemetry.remote_write_ingest import remote_write_columns
from gpufleet.services.telemetry.remote_write_plans import SeriesPlans
from gpufleet.sim.nodes import iter_nodes
from gpufleet.sim.scaled import scaled_spec
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.wire.remote_write_columns import decode_write_columns

ANY_TIME = TimeWindow(0, 2**62)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    bodies, samples = dcgm_bodies(args.nodes, args.scrapes, 2000)
    units: dict[str, NodeUnits] = {}
    owners: dict[str, str] = {}
    for node in iter_nodes(scaled_spec(args.nodes)):
        gpus = node.registration.gpus
        units[node.hostname] = NodeUnits(node.hostname, {g.uuid: ("prod", g.name) for g in gpus})
        owners.update({g.uuid: node.hostname for g in gpus})
    first = len(bodies) // args.scrapes  # the first scrape's bodies
    timed_samples = samples - samples // args.scrapes
    with tempfile.TemporaryDirectory() as tmp:
        store = DuckDBTelemetryStore(Path(tmp) / "telemetry.duckdb", apply_interval_s=None,
                                     apply_at_samples=10**12, max_unapplied_samples=10**12)
        best = dict.fromkeys(("decode", "columns", "write", "apply"), float("inf"))
        plans = SeriesPlans()  # the server keeps one across bodies
        for repeat in range(args.repeats + 1):
            spent = dict.fromkeys(best, 0.0)
            for n, body in enumerate(bodies if repeat == 0 else bodies[first:]):
                a = time.process_time()
                decoded = decode_write_columns(body, 1 << 30, plans.known_blocks)
                series_plans = plans.plans_of(decoded.label_blocks)
                b = time.process_time()
                by_node, _ = remote_write_columns(decoded, series_plans, owners, units.get,
                                                  ANY_TIME)
                c = time.process_time()
                store.write_columns([(f"{node}:{repeat}:{n}", columns)
                                     for node, (columns, _) in sorted(by_node.items())])
                spent["decode"] += b - a
                spent["columns"] += c - b
                spent["write"] += time.process_time() - c
            d = time.process_time()
            store.apply_journal()  # what the server's applier thread does: DuckDB's insert
            spent["apply"] += time.process_time() - d
            if repeat:
                best = {k: min(best[k], spent[k]) for k in best}
        store.close()
    per = {k: v / timed_samples * 1e6 for k, v in best.items()}
    print(f"{timed_samples:,} steady-state samples, best of {args.repeats}, µs a sample: "
          + ", ".join(f"{k} {v:.2f}" for k, v in per.items()) + f", total {sum(per.values()):.2f}")


if __name__ == "__main__":
    main()
