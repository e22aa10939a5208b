"""Placement on a fractional-only openb workload, where FGD should beat BestFit most.

    python bench/bench_placement_fractional_only.py --seed 1 --max-candidates 128

The openb family ships no variant where every GPU task is a fraction, and issue 18 says
held-out ones exist. This builds one: the `gpushare80` sequence with its whole-GPU tasks
dropped, the rest (fractions and host-only tasks) drawn with replacement, seeded, until
the GPU demand reaches 130 % of the fleet (the family's arrival rule); then it replays
it with each policy, as `bench_placement_quality.py` does. There is no published FGD
figure for it; `binpack` stands in for BestFit, which FGD beats by 2–3 points on every
published sequence — a `default` below `binpack` here is a fragmentation policy failing.
"""

from __future__ import annotations

import argparse
import gzip
import json
import tempfile
from pathlib import Path

from bench_placement_heldout import resampled
from gpufleet.domain.placement import DEFAULT_MAX_CANDIDATES, MILLI, POLICIES
from gpufleet.whatif import build_report, load_workload, openb_fleet, replay


def fractional_only(source: Path, seed: int) -> list[dict]:
    """Fraction and host-only rows of `source`, resampled to 130 % of the fleet's GPUs."""
    with gzip.open(source, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return resampled([r for r in rows if not (r["num_gpu"] >= 1 and r["gpu_milli"] >= MILLI)],
                     seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openb-dir", type=Path, default=Path("/work/shared/data/openb"))
    parser.add_argument("--seed", type=int, action="append")
    parser.add_argument("--policy", choices=POLICIES, action="append")
    parser.add_argument("--max-candidates", type=int, default=DEFAULT_MAX_CANDIDATES)
    args = parser.parse_args()
    source = args.openb_dir / "family" / "gpushare80-tune1.3-seed42.jsonl.gz"
    nodes = args.openb_dir / "openb_node_list_gpu_node.csv"
    policies = args.policy or ["default", "binpack"]
    print(f"{'sequence':<28} " + " ".join(f"{p:>9}" for p in policies)
          + "   (GPU allocation ratio, %)")
    for seed in args.seed or [1, 2]:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"fractional-only-seed{seed}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in fractional_only(source, seed)))
            tasks = load_workload(path)
        figures = []
        for policy in policies:
            result = replay(openb_fleet(nodes), tasks, policy=policy,
                            whole_gpus_from_shared=True, max_candidates=args.max_candidates)
            figures.append(build_report(result).allocation_ratio * 100)
        print(f"{f'fractional-only-seed{seed}':<28} " + " ".join(f"{f:>9.2f}" for f in figures))


if __name__ == "__main__":
    main()
