"""What a replay achieved: GPU allocation, refusals by reason, and fragmentation.

Fragmentation (docs/placement.md, "Fragmentation in the what-if report") is FGD's measure
over the replayed workload's GPU tasks: for each kind of GPU task, the free milli-GPU it
could not use (all of a node's free capacity when the task does not fit there at all —
GPUs, host CPU / memory, task limit — else the free capacity of GPUs too small for one of
its units, plus fitting GPUs the node's CPU / memory cannot serve), averaged over the
kinds by how often they arrived. Host-only tasks neither use nor strand GPU capacity, so
they are left out of the average.

`fragmentation_ratio` is that amount ÷ the free milli-GPU: how much of what is left free
the workload cannot use. It tends to 100 % for every policy once the fleet is saturated
(whatever is left is what nothing fits). `stranded_ratio` is the same amount ÷ the
fleet's milli-GPU: how much of the fleet fragmentation strands, the figure that tells a
packing policy from one that spreads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from gpufleet.domain.placement import FragmentationMeter, Workload, free_milli

from .replay import ReplayResult


@dataclass(frozen=True)
class Report:
    policy: str
    tasks: int
    placed: int
    refused: int
    refused_by_reason: dict[str, int]
    departed: int
    nodes: int
    gpus: int
    total_milli: int
    allocated_milli: int
    allocation_ratio: float
    peak_allocation_ratio: float
    free_milli: int
    fragmented_milli: float
    fragmentation_ratio: float
    stranded_ratio: float
    allocation_by_model: dict[str, float]

    def to_json(self) -> dict:
        return asdict(self)


def build_report(result: ReplayResult) -> Report:
    fleet = result.fleet
    workload = Workload(o.task.demand for o in result.outcomes)
    meter = FragmentationMeter(workload, result.placer.whole_gpus_from_shared)
    # The meter weighs GPU task kinds by their share of all tasks, host-only ones included;
    # dividing by the GPU kinds' share makes it the average over GPU tasks.
    gpu_share = sum(workload.weights)
    free_total = fragmented = 0.0
    held: Counter[str] = Counter()
    size: Counter[str] = Counter()
    for node in fleet.nodes:
        summary = fleet.summary(node.name)
        free_total += summary.free_milli
        fragmented += meter.node(summary.signature[0], node.cpu_milli_free,
                                 node.memory_mib_free, summary.open)
        for gpu in node.gpus:
            size[gpu.model] += 1000
            held[gpu.model] += 1000 - free_milli(gpu) if gpu.usable else 0
    if gpu_share:
        fragmented /= gpu_share
    refusals = Counter(o.refusal.reason for o in result.outcomes if o.refusal is not None)
    total = result.total_milli
    placed = sum(o.placed for o in result.outcomes)
    return Report(
        policy=result.placer.policy,
        tasks=len(result.outcomes), placed=placed, refused=len(result.outcomes) - placed,
        refused_by_reason=dict(refusals.most_common()), departed=result.departed,
        nodes=len(fleet), gpus=total // 1000, total_milli=total,
        allocated_milli=result.allocated_milli,
        allocation_ratio=result.allocated_milli / total if total else 0.0,
        peak_allocation_ratio=result.peak_allocated_milli / total if total else 0.0,
        free_milli=int(free_total), fragmented_milli=round(fragmented, 1),
        fragmentation_ratio=fragmented / free_total if free_total else 0.0,
        stranded_ratio=fragmented / total if total else 0.0,
        allocation_by_model={m: held[m] / size[m] for m in sorted(size)},
    )
