"""In-memory placement decisions per second on a 100,000-GPU fleet (12,500 nodes × 8).

    python bench/bench_placement_throughput.py --nodes 12500 --decisions 20000

The fleet is `scaled_spec(nodes)` (H100 / A100 / L40S, MIG slicing nodes with their
layouts); its L40S nodes are switched to shared mode so every flavour has a home. The
demand mix is whole GPUs (1, 2, 4, 8 on one node, 8 with NVLink), MIG instances (1g, 2g,
3g) and shared fractions, with host CPU and memory. The fleet is first filled to about
`--fill` of its GPUs; then each step decides one demand, commits it, and releases the
oldest held decision whenever the fleet is above the fill level, so decisions are timed on
a busy, fragmented fleet rather than an empty one. Prints decisions/s for `decide` alone
and for decide + commit (+ release), per policy, and the per-decision latency.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque

from common import describe_ms
from gpufleet.domain.inventory import SharingMode
from gpufleet.domain.placement import (
    DEFAULT_MAX_CANDIDATES,
    POLICIES,
    Decision,
    Demand,
    FleetState,
    Placer,
    UnitKind,
)
from gpufleet.sim.scaled import scaled_spec
from gpufleet.whatif import fleet_from_spec

WHOLE, MIG, SHARED = UnitKind.WHOLE, UnitKind.MIG, UnitKind.SHARED
MIX = (  # (weight, demand)
    (30, Demand(WHOLE, 1, cpu_milli=8000, memory_mib=65536)),
    (10, Demand(WHOLE, 2, cpu_milli=16000, memory_mib=131072, same_node=True)),
    (6, Demand(WHOLE, 4, cpu_milli=32000, memory_mib=262144, same_node=True)),
    (3, Demand(WHOLE, 8, cpu_milli=64000, memory_mib=524288, nvlink=True,
               models=frozenset({"H100-80GB"}))),
    (12, Demand(MIG, 1, mig_profile="1g.10gb", cpu_milli=2000, memory_mib=16384)),
    (8, Demand(MIG, 1, mig_profile="2g.20gb", cpu_milli=4000, memory_mib=32768)),
    (6, Demand(MIG, 1, mig_profile="3g.40gb", cpu_milli=8000, memory_mib=65536)),
    (12, Demand(SHARED, 1, milli=500, cpu_milli=4000, memory_mib=32768)),
    (8, Demand(SHARED, 1, milli=250, cpu_milli=2000, memory_mib=16384)),
    (5, Demand(SHARED, 2, milli=330, cpu_milli=4000, memory_mib=32768)),
)


def build(nodes: int) -> FleetState:
    fleet = fleet_from_spec(scaled_spec(nodes))
    for node in list(fleet.nodes):
        if node.gpus and node.gpus[0].model == "L40S-48GB":
            for gpu in node.gpus:
                gpu.sharing_mode = SharingMode.SHARED
            fleet.refresh(node.name)
    return fleet


def run(fleet: FleetState, policy: str, decisions: int, fill: float, seed: int,
        max_candidates: int) -> None:
    rng = random.Random(seed)
    weights = [w for w, _ in MIX]
    demands = [d for _, d in MIX]
    placer = Placer(fleet, policy, seed=seed, max_candidates=max_candidates)
    total = sum(len(n.gpus) for n in fleet.nodes) * 1000
    held: deque[Decision] = deque()
    allocated = 0
    started = time.perf_counter()
    warm = 0
    while allocated < fill * total:  # fill to the working level
        answer = placer.decide(rng.choices(demands, weights)[0])
        warm += 1
        if isinstance(answer, Decision):
            placer.commit(answer)
            held.append(answer)
            allocated += answer.milli
    fill_s = time.perf_counter() - started
    decide_ms: list[float] = []
    placed = refused = 0
    started = time.perf_counter()
    started_cpu_s = time.process_time()  # this process only: steady on a shared machine
    for _ in range(decisions):
        demand = rng.choices(demands, weights)[0]
        t0 = time.perf_counter()
        answer = placer.decide(demand)
        decide_ms.append((time.perf_counter() - t0) * 1000)
        if isinstance(answer, Decision):
            placed += 1
            placer.commit(answer)
            held.append(answer)
            allocated += answer.milli
        else:
            refused += 1
        while held and allocated > fill * total:
            old = held.popleft()
            placer.release(old)
            allocated -= old.milli
    elapsed = time.perf_counter() - started
    cpu_s = time.process_time() - started_cpu_s
    print(f"policy {policy}: filled to {allocated / total:.1%} with {warm} decisions in "
          f"{fill_s:.1f} s ({warm / fill_s:,.0f}/s)")
    print(f"  steady state: {decisions} decisions ({placed} placed, {refused} refused) in "
          f"{elapsed:.1f} s = {decisions / elapsed:,.0f} decide+commit+release per s")
    print(f"  decide alone: {decisions / (sum(decide_ms) / 1000):,.0f} decisions/s;  "
          f"{describe_ms(decide_ms)}")
    print(f"  steady state in CPU time: {cpu_s:.1f} CPU s = "
          f"{decisions / cpu_s:,.0f} decide+commit+release per CPU s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=12_500)
    parser.add_argument("--decisions", type=int, default=20_000)
    parser.add_argument("--fill", type=float, default=0.85)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policy", choices=POLICIES, action="append")
    parser.add_argument("--max-candidates", type=int, default=DEFAULT_MAX_CANDIDATES)
    args = parser.parse_args()
    for policy in args.policy or POLICIES:
        started = time.perf_counter()
        fleet = build(args.nodes)
        gpus = sum(len(n.gpus) for n in fleet.nodes)
        print(f"fleet: {len(fleet):,} nodes, {gpus:,} GPUs, built in "
              f"{time.perf_counter() - started:.1f} s")
        run(fleet, policy, args.decisions, args.fill, args.seed, args.max_candidates)


if __name__ == "__main__":
    main()
