"""A small re-implementation of the published FGD scheduler, to learn what it does.

    python bench/fgd_reference.py --openb-dir /work/shared/data/openb --only default
    python bench/fgd_reference.py --only seed44 --ties first --score exact

A bench-side experiment, not gpufleet code: it replays an openb request sequence the way
the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator, read on GitHub; no
code copied) scores it, so that its figures can be set beside the published ones and each
difference from our `default` policy switched on and off on its own. What it follows
(BENCHMARKS.md, "…what the published FGD does", has the table):

- The target workload ("typical pods") is fixed before the replay, from the *whole*
  original trace (`openb_pod_list_default.csv`, not the sampled sequence): task specs are
  (CPU milli, GPU milli per GPU, number of GPUs, GPU model string) — the exact CPU, not a
  mean — counted by frequency, the most frequent kept until they cover 95 % of the tasks,
  renormalised. CPU-only tasks are kept as specs; memory is not part of a spec.
- A node's fragmentation for one spec, in milli-GPU: the free milli-GPU of the GPUs that
  cannot hold one unit, when the spec fits (enough such GPUs and enough CPU left); all of
  the node's free milli-GPU otherwise (CPU short, model excluded) — and always all of it
  for a CPU-only spec. Summed over specs weighted by frequency. Memory plays no part.
- A candidate's score is int(100 * sigmoid((before - after) / 1000)): an integer 0-99, so
  nodes whose fragmentation rises by amounts a few tens of milli-GPU apart tie; ties go
  to a uniformly random node (kube-scheduler's selectHost). A shared task takes the GPU
  with the best integer score, the lowest index among ties.
- Filters: CPU, memory, model, GPUs (a shared task needs one GPU with its fraction free, a
  whole-GPU task `num_gpu` completely free GPUs).

The switches turn each of these into what our engine does instead, one at a time.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

MILLI = 1000
MAX_GPUS = 8


def read_sequence(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _read_trace(path: Path) -> list[dict]:
    with path.open(newline="") as handle:
        return [{key: row[key] for key in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
                                            "gpu_spec")} for row in csv.DictReader(handle)]


def typical_specs(tasks: list[dict], popularity: float = 0.95,
                  with_cpu_only: bool = True) -> list[tuple[tuple, float]]:
    """(spec, frequency) for the most frequent specs covering `popularity` of the tasks.

    A zero CPU request counts as 100 milli, as kube-scheduler's non-zero requests do."""
    counts: Counter = Counter()
    for task in tasks:
        num = int(task["num_gpu"])
        if num == 0 and not with_cpu_only:
            continue
        cpu = int(task["cpu_milli"]) or 100
        counts[(cpu, int(task["gpu_milli"]) if num else 0, num, task["gpu_spec"] or "")] += 1
    total = sum(counts.values())
    # most frequent first; equal counts by the spec, larger first (the simulator's order)
    ordered = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    kept, covered = [], 0
    for spec, count in ordered:
        if covered >= popularity * total:
            break
        kept.append((spec, count))
        covered += count
    return [(spec, count / covered) for spec, count in kept]


class Fleet:
    def __init__(self, node_csv: Path):
        with node_csv.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        self.models = sorted({row["model"] for row in rows})
        self.model = np.array([self.models.index(row["model"]) for row in rows])
        self.cpu = np.array([int(row["cpu_milli"]) for row in rows], dtype=np.int64)
        self.memory = np.array([int(row["memory_mib"]) for row in rows], dtype=np.int64)
        self.gpu = np.zeros((len(rows), MAX_GPUS), dtype=np.int64)  # free milli per GPU
        for number, row in enumerate(rows):
            self.gpu[number, :int(row["gpu"])] = MILLI
        self.tasks = np.zeros(len(rows), dtype=np.int64)
        self.capacity_milli = int(self.gpu.sum())

    def accepts(self, spec: str) -> np.ndarray:
        """Per model index: whether a task with this gpu_spec may use it."""
        wanted = {part for part in spec.split("|") if part}
        return np.array([not wanted or model in wanted for model in self.models])


class Meter:
    """The published fragmentation measure, vectorised over many node states."""

    def __init__(self, fleet: Fleet, specs: list[tuple[tuple, float]], *, host_aware=""):
        gpu_specs = [(s, f) for s, f in specs if s[2] > 0]
        self.cpu_only_share = sum(f for s, f in specs if s[2] == 0)
        self.cpu = np.array([s[0] for s, _ in gpu_specs], dtype=np.int64)
        self.milli = np.array([s[1] for s, _ in gpu_specs], dtype=np.int64)
        self.num = np.array([s[2] for s, _ in gpu_specs], dtype=np.int64)
        self.share = np.array([f for _, f in gpu_specs])
        self.accepts = np.array([fleet.accepts(s[3]) for s, _ in gpu_specs]).T  # model x spec
        # which GPU specs get our host-stranding extension: "" none, "all", "shared"
        # (fractions only), "whole" (whole GPUs only)
        self.host_aware = np.array([
            host_aware == "all" or (host_aware == "shared" and s[1] < MILLI)
            or (host_aware == "whole" and s[1] >= MILLI) for s, _ in gpu_specs])

    def __call__(self, cpu: np.ndarray, gpu: np.ndarray, model: np.ndarray) -> np.ndarray:
        total = gpu.sum(axis=1)
        fits = gpu[:, :, None] >= self.milli[None, None, :]
        n_fit = fits.sum(axis=1)
        unusable = (gpu[:, :, None] * ~fits).sum(axis=1)
        usable = (cpu[:, None] >= self.cpu[None, :]) & (n_fit >= self.num[None, :]) \
            & self.accepts[model]
        fragmented = np.where(usable, unusable, total[:, None]).astype(float)
        if self.host_aware.any():  # our extension: fitting GPUs the CPU cannot serve
            tasks = np.minimum(n_fit // self.num[None, :], cpu[:, None] // self.cpu[None, :])
            stranded = np.clip(1.0 - tasks * self.num[None, :] / np.maximum(n_fit, 1), 0, 1)
            fragmented = np.where(usable & self.host_aware[None, :],
                                  unusable + stranded * (total[:, None] - unusable), fragmented)
        return fragmented @ self.share + self.cpu_only_share * total


def replay(fleet: Fleet, tasks: list[dict], meter: Meter, *, ties: str, score: str,
           rng: np.random.Generator, policy: str = "fgd") -> tuple[int, int]:
    """(allocated milli-GPU, refused tasks)."""
    every = np.arange(len(fleet.cpu))
    rank = rng.permutation(len(fleet.cpu))
    before = meter(fleet.cpu, fleet.gpu, fleet.model)
    accepts_cache: dict[str, np.ndarray] = {}
    allocated = refused = 0
    for task in tasks:
        cpu, memory = int(task["cpu_milli"]), int(task["memory_mib"])
        num, milli = int(task["num_gpu"]), int(task["gpu_milli"])
        spec = task["gpu_spec"] or ""
        if spec not in accepts_cache:
            accepts_cache[spec] = fleet.accepts(spec)
        ok = (fleet.cpu >= cpu) & (fleet.memory >= memory) & (fleet.tasks < 1001)
        shared = bool(num) and milli < MILLI
        if num:
            ok &= accepts_cache[spec][fleet.model]
        if shared:  # a GPU with the fraction free
            ok &= (fleet.gpu >= milli).any(axis=1)
        elif num:  # enough completely free GPUs
            ok &= (fleet.gpu == MILLI).sum(axis=1) >= num
        nodes = every[ok]
        if not len(nodes):
            refused += 1
            continue
        gpu_index = None
        if policy == "bestfit":
            scores = _best_fit_scores(fleet.cpu[nodes] - cpu,
                                      fleet.gpu[nodes].sum(axis=1) - num * milli)
            if shared:  # the tightest GPU that fits, lowest index first
                room = np.where(fleet.gpu[nodes] >= milli, fleet.gpu[nodes], MILLI + 1)
                gpu_index = room.argmin(axis=1)
        elif not shared:
            after_gpu = fleet.gpu[nodes].copy()
            if num:
                free = after_gpu == MILLI
                take = free & (np.cumsum(free, axis=1) <= num)
                after_gpu[take] = 0
            after = meter(fleet.cpu[nodes] - cpu, after_gpu, fleet.model[nodes])
            delta = before[nodes] - after
            scores = _score(delta, score)
        else:
            rows, gpus = np.nonzero(fleet.gpu[nodes] >= milli)
            after_gpu = fleet.gpu[nodes[rows]].copy()
            after_gpu[np.arange(len(rows)), gpus] -= milli
            after = meter(fleet.cpu[nodes[rows]] - cpu, after_gpu, fleet.model[nodes[rows]])
            option_scores = _score(before[nodes[rows]] - after, score)
            # per node: the best GPU, the lowest index among equal scores
            scores = np.full(len(nodes), -np.inf)
            np.maximum.at(scores, rows, option_scores)
            best = option_scores == scores[rows]
            first = np.full(len(nodes), MAX_GPUS)
            np.minimum.at(first, rows[best], gpus[best])
            gpu_index = first
        top = np.flatnonzero(scores == scores.max())
        if ties == "random":
            pick = top[rng.integers(len(top))]
        elif ties == "name":  # the fork's rule: smallest name; names lead with a random rank
            pick = top[rank[nodes[top]].argmin()]
        elif ties == "tight":  # our default's tie-break: the node left with least free GPU
            left = fleet.gpu[nodes[top]].sum(axis=1) * 16 + rank[nodes[top]] / len(rank)
            pick = top[left.argmin()]
        else:
            pick = top[0]
        node = nodes[pick]
        fleet.cpu[node] -= cpu
        fleet.memory[node] -= memory
        fleet.tasks[node] += 1
        if num == 0:
            pass
        elif milli >= MILLI:
            free = np.flatnonzero(fleet.gpu[node] == MILLI)[:num]
            fleet.gpu[node, free] = 0
        else:
            fleet.gpu[node, gpu_index[pick]] -= milli
        allocated += num * min(milli, MILLI)
        before[node] = meter(fleet.cpu[node:node + 1], fleet.gpu[node:node + 1],
                             fleet.model[node:node + 1])[0]
    return allocated, refused


def _best_fit_scores(cpu_after: np.ndarray, gpu_after: np.ndarray) -> np.ndarray:
    """The simulator's BestFit: 100 * (1 - half CPU left / 128 cores - half GPU left /
    8 GPUs), truncated, then stretched min-max onto 0-100 with integer division."""
    raw = np.floor((1.0 - (0.5 * cpu_after / 128000 + 0.5 * gpu_after / 8000)) * 100)
    raw = raw.astype(np.int64)
    low, high = raw.min(), raw.max()
    return np.zeros_like(raw) if high == low else (raw - low) * 100 // (high - low)


def _score(delta: np.ndarray, how: str) -> np.ndarray:
    if how == "exact":
        return delta
    return np.floor(100.0 / (1.0 + np.exp(-delta / 1000.0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openb-dir", type=Path, default=Path("/work/shared/data/openb"))
    parser.add_argument("--only", action="append", default=[])
    parser.add_argument("--typical", choices=("trace", "sequence"), default="trace",
                        help="specs from the original trace CSV (the simulator) or from the "
                             "replayed sequence itself (the family: no CSV shipped)")
    parser.add_argument("--ties", choices=("name", "random", "first", "tight"), default="name",
                        help="name: the smallest of names that lead with a random rank (the "
                             "simulator's kube-scheduler fork); random: kube-scheduler's "
                             "uniform choice; first: node-list order")
    parser.add_argument("--score", choices=("int", "exact"), default="int")
    parser.add_argument("--no-cpu-only", action="store_true",
                        help="leave CPU-only tasks out of the typical specs")
    parser.add_argument("--host-aware", nargs="?", const="all", default="",
                        choices=("all", "shared", "whole"),
                        help="our extension: fitting GPUs the host CPU cannot serve count "
                             "(for all GPU specs, or only fractional / whole-GPU ones)")
    parser.add_argument("--policy", choices=("fgd", "bestfit"), default="fgd")
    parser.add_argument("--popularity", type=float, default=0.95)
    parser.add_argument("--seeds", type=int, default=3, help="tie-break RNG seeds")
    args = parser.parse_args()
    sequences = sorted(p for p in [*(args.openb_dir / "requests").glob("*.jsonl"),
                                   *(args.openb_dir / "family").glob("*.jsonl.gz")]
                       if not args.only or any(part in p.name for part in args.only))
    trace = _read_trace(args.openb_dir / "openb_pod_list_default.csv")
    for path in sequences:
        tasks = read_sequence(path)
        source = trace if args.typical == "trace" and path.parent.name == "requests" else tasks
        specs = typical_specs(source, args.popularity, with_cpu_only=not args.no_cpu_only)
        figures = []
        started = time.process_time()
        for seed in range(args.seeds if args.ties != "first" else 1):
            fleet = Fleet(args.openb_dir / "openb_node_list_gpu_node.csv")
            meter = Meter(fleet, specs, host_aware=args.host_aware)
            allocated, refused = replay(fleet, tasks, meter, ties=args.ties, score=args.score,
                                        rng=np.random.default_rng(seed), policy=args.policy)
            figures.append(100 * allocated / fleet.capacity_milli)
        print(f"{path.name.removesuffix('.gz').removesuffix('.jsonl'):<28} specs {len(specs):>3}  "
              + " ".join(f"{f:6.2f}" for f in figures)
              + f"  mean {np.mean(figures):6.2f}  refused {refused}  "
              f"{time.process_time() - started:5.0f} CPU s", flush=True)


if __name__ == "__main__":
    main()
