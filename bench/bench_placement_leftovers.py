"""Where the GPU capacity left free at the end of an openb replay goes, by cause.

    python bench/bench_placement_leftovers.py --only default-tune1.3-seed44 \
        --policy default --policy binpack

Replays one published openb request sequence (`bench_placement_quality.py`'s list) with
each policy and breaks the free milli-GPU left at the end down by why no task of the
sequence could use it, per node model. Every GPU with something free is put in the first
class that applies, tested against the sequence's distinct GPU task shapes (units,
fraction, host CPU / memory, models; for each, the smallest host demands):

- `beside-810`: the 190 milli beside one lone 810-milli task, which only the few
  160/110/50-milli tasks fit (the floor every policy shares);
- `host whole` / `host frac`: no shape fits there now, but some shape fits the GPU (and
  the node's other free GPUs) and not the node's free host CPU / memory or task room —
  a free whole GPU / a fraction stranded behind the host;
- `spec`: no shape fits there now, but one would, host included, were its `gpu_spec`
  ignored;
- `whole`: a completely free GPU no shape uses (fitting or not);
- `frac <lo>-<hi>`: other fractional leftovers, by size.

A last column, `fits now`, overlapping the classes, is the free capacity some shape of
the sequence fits at the end: capacity the tail of the sequence did not happen to ask
for (mostly small fractions beside 810-milli tasks, which only 50-160-milli tasks fit).

Then, per task kind (host only, fractions by size, 1/2/4/8 whole GPUs): how many arrived,
how many were refused, and when the first refusal came (task index and the fleet's GPU
allocation then). The published FGD figure says how much FGD left free in total; only
the total can be compared with it.

Last, the fractions' packing against an offline first-fit-decreasing packing of the same
placed fractions, per GPU model (`packing_gap`): how much better pairing alone could
free, knowing the whole sequence (host CPU / memory ignored).
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench_placement_quality import PUBLISHED
from gpufleet.domain.placement import (
    DEFAULT_MAX_CANDIDATES,
    MILLI,
    POLICIES,
    FleetState,
    NodeState,
    UnitKind,
)
from gpufleet.whatif import load_workload, openb_fleet, replay
from gpufleet.whatif.replay import ReplayResult

FLOOR_TASK_MILLI = 810  # the most frequent large fraction; 190 beside it fits almost nothing
CLASSES = ("beside-810", "host whole", "host frac", "spec", "whole", "frac 500-999", "frac 200-499",
           "frac 100-199", "frac 1-99")
EARLY_PERCENT = 90  # a refusal before the fleet is this allocated comes before saturation
FITS_NOW = "fits now"  # overlaps the classes: free capacity some shape fits at the end


@dataclass(frozen=True)
class Shape:
    """A GPU task shape of the sequence: what one task asks of one node."""

    units: int  # GPUs (1 for a fraction)
    milli: int  # per GPU: 1000 for whole GPUs
    cpu_milli: int
    memory_mib: int
    models: frozenset[str] | None


def task_kind(units: int, milli: int) -> str:
    if units == 0:
        return "host only"
    if milli < MILLI:
        low = next(edge for edge in (750, 500, 250, 0) if milli >= edge)
        return f"share {low}-{low + 249 if low < 750 else 999}"
    return f"{units} whole GPU{'s' if units > 1 else ''}"


def _pareto(hosts: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The host demands no other one of the group is at most on both counts."""
    kept: list[tuple[int, int]] = []
    for cpu, memory in sorted(hosts):
        if not any(c <= cpu and m <= memory for c, m in kept):
            kept.append((cpu, memory))
    return kept


def shapes_of(result: ReplayResult) -> dict[tuple, list[tuple[int, int]]]:
    """(units, milli, models) -> the least host demands among the sequence's GPU tasks."""
    hosts: dict[tuple, set[tuple[int, int]]] = defaultdict(set)
    for outcome in result.outcomes:
        demand = outcome.task.demand
        if demand.host_only:
            continue
        milli = demand.milli if demand.kind is UnitKind.SHARED else MILLI
        hosts[(demand.count, milli, demand.models)].add((demand.cpu_milli, demand.memory_mib))
    return {key: _pareto(found) for key, found in hosts.items()}


def _host_fits(node: NodeState, hosts: list[tuple[int, int]]) -> bool:
    if node.max_tasks is not None and node.tasks >= node.max_tasks:
        return False
    return any(node.cpu_milli_free >= cpu and node.memory_mib_free >= memory
               for cpu, memory in hosts)


def _gpu_fits(node: NodeState, index: int, units: int, milli: int,
              models: frozenset[str] | None) -> bool:
    gpu = node.gpus[index]
    if models is not None and gpu.model not in models:
        return False
    free = MILLI - gpu.used_milli
    if milli < MILLI:
        return free >= milli
    if free < MILLI:
        return False
    return sum(g.used_milli == 0 and g.model == gpu.model for g in node.gpus) >= units


def leftover_class(node: NodeState, index: int, shapes: dict[tuple, list[tuple[int, int]]],
                   lone_810: bool) -> tuple[str, bool]:
    """(class, whether some shape of the sequence fits there now) for one GPU's free part."""
    gpu_fit = [(key, hosts) for key, hosts in shapes.items()
               if _gpu_fits(node, index, key[0], key[1], key[2])]
    fits_now = any(_host_fits(node, hosts) for _, hosts in gpu_fit)
    free = MILLI - node.gpus[index].used_milli
    if lone_810:
        return "beside-810", fits_now
    if fits_now:
        return ("whole" if free == MILLI else _size(free)), True
    if gpu_fit:
        return ("host whole" if free == MILLI else "host frac"), False
    if any(_gpu_fits(node, index, key[0], key[1], None) and _host_fits(node, hosts)
           for key, hosts in shapes.items()):
        return "spec", False
    return ("whole" if free == MILLI else _size(free)), False


def _size(free: int) -> str:
    low = next(edge for edge in (500, 200, 100, 1) if free >= edge)
    return f"frac {low}-{ {500: 999, 200: 499, 100: 199, 1: 99}[low]}"


def leftovers(result: ReplayResult) -> dict[str, Counter]:
    """Node model -> leftover class -> free milli-GPU."""
    fleet: FleetState = result.fleet
    tasks_on_gpu: dict[str, list[int]] = defaultdict(list)
    for outcome in result.outcomes:
        if outcome.decision is not None:
            for unit in outcome.decision.units:
                tasks_on_gpu[unit.gpu].append(unit.milli)
    shapes = shapes_of(result)
    by_model: dict[str, Counter] = defaultdict(Counter)
    for node in fleet.nodes:
        for index, gpu in enumerate(node.gpus):
            free = MILLI - gpu.used_milli
            if free <= 0:
                continue
            lone_810 = tasks_on_gpu.get(gpu.key) == [FLOOR_TASK_MILLI]
            kind, fits_now = leftover_class(node, index, shapes, lone_810)
            by_model[gpu.model][kind] += free
            if fits_now:
                by_model[gpu.model][FITS_NOW] += free
    return by_model


def refusals(result: ReplayResult) -> dict[str, tuple[int, int, int, int | None, float | None]]:
    """Task kind -> (arrived, refused, refused while the fleet was below `EARLY_PERCENT`
    allocated, index of the first refusal, GPU allocation % then)."""
    total = result.total_milli
    allocated = 0
    found: dict[str, list] = {}
    for number, outcome in enumerate(result.outcomes):
        demand = outcome.task.demand
        milli = demand.milli if demand.kind is UnitKind.SHARED else MILLI
        entry = found.setdefault(task_kind(demand.count, milli), [0, 0, 0, None, None])
        entry[0] += 1
        if outcome.decision is None:
            entry[1] += 1
            entry[2] += 100 * allocated / total < EARLY_PERCENT
            if entry[3] is None:
                entry[3], entry[4] = number, 100 * allocated / total
        else:
            allocated += outcome.decision.milli
    return {kind: tuple(entry) for kind, entry in found.items()}


def floor_pairs(result: ReplayResult) -> tuple[int, int, int]:
    """(GPUs holding one lone 810-milli task, tasks of at most 190 milli placed, of those
    on a GPU with an 810-milli task)."""
    on_gpu: dict[str, list[int]] = defaultdict(list)
    for outcome in result.outcomes:
        if outcome.decision is not None:
            for unit in outcome.decision.units:
                on_gpu[unit.gpu].append(unit.milli)
    small_limit = MILLI - FLOOR_TASK_MILLI
    lone = sum(tasks == [FLOOR_TASK_MILLI] for tasks in on_gpu.values())
    small = sum(m <= small_limit for tasks in on_gpu.values() for m in tasks)
    paired = sum(m <= small_limit for tasks in on_gpu.values() if FLOOR_TASK_MILLI in tasks
                 for m in tasks)
    return lone, small, paired


def packing_gap(result: ReplayResult) -> dict[str, tuple[int, int, int]]:
    """GPU model -> (GPUs holding fractions at the end, GPUs an offline first-fit-decreasing
    packing of the same placed fractions needs, a lower bound on any packing's GPUs).

    The bound is `_least_gpus`'s. Host CPU / memory are ignored.
    Where the first-fit packing meets the bound, no pairing of these fractions, even
    knowing the whole sequence, frees more than the difference between the first two.
    """
    model = {gpu.key: gpu.model for node in result.fleet.nodes for gpu in node.gpus}
    on_gpu: dict[str, list[int]] = defaultdict(list)
    for outcome in result.outcomes:
        if outcome.decision is not None:
            for unit in outcome.decision.units:
                if unit.milli < MILLI:
                    on_gpu[unit.gpu].append(unit.milli)
    by_model: dict[str, list[int]] = defaultdict(list)
    used: Counter = Counter()
    for gpu, tasks in on_gpu.items():
        by_model[model[gpu]].extend(tasks)
        used[model[gpu]] += 1
    found = {}
    for name, tasks in sorted(by_model.items()):
        bins: list[int] = []
        for milli in sorted(tasks, reverse=True):
            for number, filled in enumerate(bins):
                if filled + milli <= MILLI:
                    bins[number] += milli
                    break
            else:
                bins.append(milli)
        found[name] = (used[name], len(bins), _least_gpus(tasks))
    return found


def _least_gpus(tasks: list[int]) -> int:
    """A lower bound on the GPUs any packing of these fractions needs (Martello and Toth's
    L2): for a size k up to half a GPU, the tasks over MILLI - k share a GPU with no task
    of k or more, those over half a GPU each need their own, and the tasks of k to half a
    GPU fill at most what the latter leave free."""
    best = -(-sum(tasks) // MILLI)
    for k in {0, *(milli for milli in tasks if 2 * milli <= MILLI)}:
        alone = sum(1 for milli in tasks if milli > MILLI - k)
        large = [milli for milli in tasks if MILLI - k >= milli and 2 * milli > MILLI]
        middle = sum(milli for milli in tasks if k <= milli and 2 * milli <= MILLI)
        spill = middle - (len(large) * MILLI - sum(large))
        best = max(best, alone + len(large) + max(0, -(-spill // MILLI)))
    return best


def report(label: str, policy: str, result: ReplayResult, fgd: float) -> None:
    total = result.total_milli
    by_model = leftovers(result)
    free = sum(sum(c[k] for k in CLASSES) for c in by_model.values())
    print(f"\n== {label}, {policy}: allocated {100 - 100 * free / total:.2f} %, free "
          f"{100 * free / total:.2f} % of the fleet (FGD published {fgd:.2f} %: left "
          f"{100 - fgd:.2f} %)")
    print(f"{'free, % of fleet':<14}" + "".join(f"{c:>13}" for c in CLASSES) + f"{'all':>8}"
          + f"{FITS_NOW:>10}")
    rows = [*sorted(by_model.items()), ("all", sum(by_model.values(), Counter()))]
    for model, counter in rows:
        print(f"{model:<14}" + "".join(f"{100 * counter[c] / total:>13.2f}" for c in CLASSES)
              + f"{100 * sum(counter[c] for c in CLASSES) / total:>8.2f}"
              + f"{100 * counter[FITS_NOW] / total:>10.2f}")
    print(f"{'task kind':<16}{'arrived':>8}{'refused':>8}{f'<{EARLY_PERCENT} %':>8}"
          f"{'first refused at':>18}{'fleet % then':>13}")
    for kind, (arrived, refused, early, first, fill) in sorted(refusals(result).items()):
        where = "-" if first is None else str(first)
        then = "-" if fill is None else f"{fill:.1f}"
        print(f"{kind:<16}{arrived:>8}{refused:>8}{early:>8}{where:>18}{then:>13}")
    lone, small, paired = floor_pairs(result)
    print(f"{FLOOR_TASK_MILLI}-milli tasks alone on a GPU: {lone}; tasks of at most "
          f"{MILLI - FLOOR_TASK_MILLI} milli placed: {small}, beside an "
          f"{FLOOR_TASK_MILLI}-milli task: {paired}")
    gap = packing_gap(result)
    print("GPUs holding fractions / an offline first-fit-decreasing packing of the same "
          "fractions / a lower bound for any packing: "
          + ", ".join(f"{name} {used}/{ffd}/{bound}" for name, (used, ffd, bound) in gap.items()))
    freed = sum(used - ffd for used, ffd, _ in gap.values())
    least = sum(used - bound for used, _, bound in gap.values())
    print(f"offline first-fit packing would free {freed} GPUs, "
          f"{100 * freed * MILLI / total:.2f} % of the fleet; no packing more than {least} "
          f"GPUs, {100 * least * MILLI / total:.2f} % (hosts ignored)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openb-dir", type=Path, default=Path("/work/shared/data/openb"))
    parser.add_argument("--policy", choices=POLICIES, action="append")
    parser.add_argument("--only", action="append", default=[],
                        help="sequences whose name contains this (repeatable)")
    parser.add_argument("--max-candidates", type=int, default=DEFAULT_MAX_CANDIDATES)
    args = parser.parse_args()
    sequences = [s for s in PUBLISHED if not args.only or any(p in s for p in args.only)]
    for sequence in sequences:
        tasks = load_workload(args.openb_dir / sequence)
        label = Path(sequence).name.removesuffix(".gz").removesuffix(".jsonl")
        for policy in args.policy or ["default"]:
            result = replay(openb_fleet(args.openb_dir / "openb_node_list_gpu_node.csv"),
                            tasks, policy=policy, whole_gpus_from_shared=True,
                            max_candidates=args.max_candidates)
            report(label, policy, result, PUBLISHED[sequence][1])


if __name__ == "__main__":
    main()
