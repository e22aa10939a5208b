"""GPU allocation ratio on the openb trace's published request sequences, against FGD.

    python bench/bench_placement_quality.py --openb-dir /work/shared/data/openb --jobs 2
    python bench/bench_placement_quality.py --only default --policy default --policy binpack

Every sequence the openb README publishes figures for — the default trace
(`requests/default-tune1.3-seed4{2,3,4}.jsonl`) and the workload family
(`family/<variant>-tune1.3-seed4{2,3}.jsonl.gz`: gpushare, gpuspec, multigpu, cpu) — is
replayed exactly as the README says — one task at a time, in order, no look-ahead,
refused tasks dropped, placed tasks never leave — through `gpufleet whatif`'s replay (the
live placement engine) against `openb_node_list_gpu_node.csv`. One table: per sequence,
the published BestFit and FGD allocation ratios (allocated milli-GPU ÷ 6,212,000), each
policy's, and the first policy's margin over FGD; then the worst and mean margins. The
default policy learns the task distribution online from the sequence as it arrives.
Sequences run in `--jobs` processes (replays are independent).
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from gpufleet.domain.placement import DEFAULT_MAX_CANDIDATES, POLICIES
from gpufleet.whatif import build_report, load_workload, openb_fleet, replay

# sequence (relative to the openb directory) -> (BestFit, FGD) allocation ratio, %,
# from the openb README's published tables
PUBLISHED: dict[str, tuple[float, float]] = {
    "requests/default-tune1.3-seed42.jsonl": (93.13, 95.29),
    "requests/default-tune1.3-seed43.jsonl": (93.25, 95.32),
    "requests/default-tune1.3-seed44.jsonl": (93.09, 95.44),
    "family/gpushare40-tune1.3-seed42.jsonl.gz": (91.66, 94.24),
    "family/gpushare40-tune1.3-seed43.jsonl.gz": (91.16, 94.14),
    "family/gpushare60-tune1.3-seed42.jsonl.gz": (89.72, 91.36),
    "family/gpushare60-tune1.3-seed43.jsonl.gz": (89.58, 91.56),
    "family/gpushare80-tune1.3-seed42.jsonl.gz": (87.09, 89.20),
    "family/gpushare80-tune1.3-seed43.jsonl.gz": (87.03, 89.38),
    "family/gpuspec10-tune1.3-seed42.jsonl.gz": (93.61, 94.73),
    "family/gpuspec10-tune1.3-seed43.jsonl.gz": (93.52, 94.89),
    "family/gpuspec20-tune1.3-seed42.jsonl.gz": (93.26, 94.76),
    "family/gpuspec20-tune1.3-seed43.jsonl.gz": (93.21, 94.84),
    "family/gpuspec25-tune1.3-seed42.jsonl.gz": (93.17, 94.71),
    "family/gpuspec25-tune1.3-seed43.jsonl.gz": (93.29, 94.96),
    "family/multigpu20-tune1.3-seed42.jsonl.gz": (93.64, 95.51),
    "family/multigpu20-tune1.3-seed43.jsonl.gz": (94.12, 95.59),
    "family/multigpu30-tune1.3-seed42.jsonl.gz": (94.63, 96.53),
    "family/multigpu30-tune1.3-seed43.jsonl.gz": (94.39, 96.36),
    "family/multigpu40-tune1.3-seed42.jsonl.gz": (95.19, 97.02),
    "family/multigpu40-tune1.3-seed43.jsonl.gz": (95.25, 97.00),
    "family/cpu050-tune1.3-seed42.jsonl.gz": (93.93, 95.34),
    "family/cpu050-tune1.3-seed43.jsonl.gz": (93.66, 95.06),
    "family/cpu250-tune1.3-seed42.jsonl.gz": (91.51, 93.51),
    "family/cpu250-tune1.3-seed43.jsonl.gz": (91.55, 93.98),
}


def _replay_one(openb_dir: Path, sequence: str, policy: str,
                max_candidates: int) -> tuple[float, int, float]:
    """(allocation ratio %, refused tasks, seconds) for one sequence and policy."""
    tasks = load_workload(openb_dir / sequence)
    started = time.perf_counter()
    result = replay(openb_fleet(openb_dir / "openb_node_list_gpu_node.csv"), tasks,
                    policy=policy, whole_gpus_from_shared=True,
                    max_candidates=max_candidates)
    report = build_report(result)
    return report.allocation_ratio * 100, report.refused, time.perf_counter() - started


def _label(sequence: str) -> str:
    return Path(sequence).name.removesuffix(".gz").removesuffix(".jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openb-dir", type=Path, default=Path("/work/shared/data/openb"))
    parser.add_argument("--policy", choices=POLICIES, action="append",
                        help="policies to replay (default: default); the first is "
                             "compared with FGD")
    parser.add_argument("--only", action="append", default=[],
                        help="replay only sequences whose name contains this (repeatable)")
    parser.add_argument("--max-candidates", type=int, default=DEFAULT_MAX_CANDIDATES)
    parser.add_argument("--jobs", type=int, default=1, help="replays run in parallel")
    args = parser.parse_args()
    policies = args.policy or ["default"]
    sequences = [s for s in PUBLISHED
                 if not args.only or any(part in s for part in args.only)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {(s, p): pool.submit(_replay_one, args.openb_dir, s, p, args.max_candidates)
                   for s in sequences for p in policies}
        results = {key: future.result() for key, future in futures.items()}
    wall_s = time.perf_counter() - started
    print(f"{'sequence':<28} {'BestFit':>8} {'FGD':>8} "
          + " ".join(f"{p:>9}" for p in policies)
          + f" {'vs FGD':>7} {'refused':>8} {'replay s':>9}   (GPU allocation ratio, %)")
    margins = []
    for sequence in sequences:
        best_fit, fgd = PUBLISHED[sequence]
        figures = [results[(sequence, p)][0] for p in policies]
        _, refused, seconds = results[(sequence, policies[0])]
        margin = figures[0] - fgd
        margins.append(margin)
        print(f"{_label(sequence):<28} {best_fit:>8.2f} {fgd:>8.2f} "
              + " ".join(f"{f:>9.2f}" for f in figures)
              + f" {margin:>+7.2f} {refused:>8} {seconds:>9.1f}")
    print(f"{policies[0]} vs FGD over {len(margins)} sequences: worst {min(margins):+.2f}, "
          f"mean {sum(margins) / len(margins):+.2f}, below FGD on "
          f"{sum(m < 0 for m in margins)}; wall {wall_s:.0f} s with {args.jobs} job(s)")


if __name__ == "__main__":
    main()
