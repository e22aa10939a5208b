"""GPU allocation ratio on the openb trace's published request sequences, per policy.

    python bench/bench_placement_quality.py --openb-dir /work/shared/data/openb

Each sequence (`requests/default-tune1.3-seed4{2,3,4}.jsonl`) is replayed exactly as the
openb README says — one task at a time, in order, no look-ahead, refused tasks dropped,
placed tasks never leave — through `gpufleet whatif`'s replay (the live placement engine)
against `openb_node_list_gpu_node.csv`, and the allocation ratio (allocated milli-GPU ÷
6,212,000) is printed beside the published BestFit and FGD figures for that sequence.
The default policy learns the task distribution online from the sequence as it arrives.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpufleet.domain.placement import POLICIES
from gpufleet.whatif import build_report, load_workload, openb_fleet, replay

PUBLISHED = {  # sequence seed -> (BestFit, FGD) allocation ratio, %, from the openb README
    42: (93.13, 95.29),
    43: (93.25, 95.32),
    44: (93.09, 95.44),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openb-dir", type=Path, default=Path("/work/shared/data/openb"))
    parser.add_argument("--policy", choices=POLICIES, action="append")
    parser.add_argument("--max-candidates", type=int, default=32)
    args = parser.parse_args()
    policies = args.policy or list(POLICIES)
    nodes = args.openb_dir / "openb_node_list_gpu_node.csv"
    print(f"{'sequence':<36} {'BestFit':>8} {'FGD':>8} "
          + " ".join(f"{p:>9}" for p in policies) + "   (GPU allocation ratio, %)")
    for seed, (best_fit, fgd) in PUBLISHED.items():
        sequence = args.openb_dir / "requests" / f"default-tune1.3-seed{seed}.jsonl"
        tasks = load_workload(sequence)
        figures, notes = [], []
        for policy in policies:
            started = time.perf_counter()
            result = replay(openb_fleet(nodes), tasks, policy=policy,
                            whole_gpus_from_shared=True, max_candidates=args.max_candidates)
            report = build_report(result)
            figures.append(report.allocation_ratio * 100)
            notes.append(f"{policy}: {report.refused} refused, fragmentation strands "
                         f"{report.stranded_ratio:.1%} of the fleet "
                         f"({report.fragmentation_ratio:.1%} of free), "
                         f"{len(tasks) / (time.perf_counter() - started):,.0f} tasks/s")
        print(f"{sequence.name:<36} {best_fit:>8.2f} {fgd:>8.2f} "
              + " ".join(f"{f:>9.2f}" for f in figures))
        for note in notes:
            print(f"    {note}")
        if "default" in policies:
            margin = figures[policies.index("default")] - fgd
            print(f"    default vs FGD: {margin:+.2f} points")


if __name__ == "__main__":
    main()
