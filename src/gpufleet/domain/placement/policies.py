"""Placement policies: how a policy ranks the plans a `Placer` found for a demand.

A policy gives each candidate plan a sort key (lower is better) and orders GPUs where a
plan has a free choice. Three policies:

- ``default`` — fragmentation-aware (FGD, Weng et al. ATC '23): the plan that increases
  the node's expected fragmentation least against the workload seen so far (partly used
  GPUs counted at the waste expected once they are full, `workload.ExpectedWaste`; the
  whole-GPU kinds' host stranding counted only while the fleet's CPU runs out before its
  GPUs, `FragmentationScorer.cpu_runs_out_first`); ties go to
  the tighter node, then to the fuller GPU, then to the node with less host CPU left.
  One rule comes before it: a demand for several whole GPUs goes, where it can, to a
  node it leaves without a free whole GPU (an exact fit).
- ``binpack`` — the fullest node that fits, then the fullest GPU (consolidate).
- ``spread`` — the emptiest node, then the emptiest GPU (balance load).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import MILLI, GpuState, NodeState, UnitKind
from .workload import FragmentationMeter, Picture, Workload

if TYPE_CHECKING:
    from .fleet import FleetState
    from .plans import NodePlan

POLICIES: tuple[str, ...] = ("default", "binpack", "spread")


def _host_after(node: NodeState, plan: NodePlan) -> tuple[int, int]:
    cpu = (node.cpu_milli_free - plan.cpu_milli) if node.cpu_milli_free is not None else 0
    memory = (node.memory_mib_free - plan.memory_mib) if node.memory_mib_free is not None else 0
    return cpu, memory


class Scorer:
    """Ranks plans; a `Placer` orders them by (rank, node name), lowest first.

    A plan's rank depends only on the node's GPU pictures, its host resources and task
    room, and the plan itself — never on the node's name — so the `Placer` may reuse it
    for every node of the same shape while `version()` stays the same.
    """

    def rank(self, fleet: FleetState, node: NodeState, plan: NodePlan) -> tuple:
        raise NotImplementedError

    def version(self) -> object:
        """Changes whenever ranks computed before may no longer hold."""
        return 0

    def gpu_order(self, gpus: list[GpuState]) -> list[GpuState]:
        """GPUs to fill first when a plan takes several fractions on one node."""
        return sorted(gpus, key=lambda g: (-g.used_milli, g.index))

    def mig_gpu_rank(self, bound_milli: int) -> int:
        """Among GPUs offering the same kind of MIG option, which to use first."""
        return -bound_milli


class BinpackScorer(Scorer):
    def rank(self, fleet: FleetState, node: NodeState, plan: NodePlan) -> tuple:
        return (plan.free_after, plan.gpu_free_after, *_host_after(node, plan))


class SpreadScorer(Scorer):
    def rank(self, fleet: FleetState, node: NodeState, plan: NodePlan) -> tuple:
        cpu, memory = _host_after(node, plan)
        return (-plan.free_after, -plan.gpu_free_after, -cpu, -memory)

    def gpu_order(self, gpus: list[GpuState]) -> list[GpuState]:
        return sorted(gpus, key=lambda g: (g.used_milli, g.index))

    def mig_gpu_rank(self, bound_milli: int) -> int:
        return bound_milli


class FragmentationScorer(Scorer):
    def __init__(self, workload: Workload, whole_gpus_from_shared: bool, fleet: FleetState):
        self.workload = workload
        self.fleet = fleet
        self.meter = FragmentationMeter(workload, whole_gpus_from_shared, waste_when_full=True)

    def version(self) -> tuple[int, bool]:
        return self.workload.weights_generation, self.cpu_runs_out_first()

    def cpu_runs_out_first(self) -> bool:
        """Whether the open nodes' free CPU is short of what their free GPU capacity would
        take, at the workload's CPU per milli-GPU: the fleet runs out of CPU first.

        Only then does the whole-GPU kinds' host stranding count. A whole GPU a node's CPU
        cannot serve is lost only if CPU is what the fleet lacks; while CPU is to spare,
        the term steers CPU-heavy tasks away from nodes with free GPUs for nothing, and
        fractions and host-only tasks use those GPUs and that CPU in the end. On the
        openb family (BENCHMARKS.md, "…whole-GPU kinds' host stranding only while the
        fleet runs out of CPU first") counting it always cost the default sequences
        0.04-0.10 points, and never counting it cost `cpu250` (more CPU-only tasks)
        0.12 / 0.51. Fractions keep the term always: without it they strand GPUs behind
        exhausted CPU by the point; under this condition theirs is counted in task slots
        (`fraction_slots`: a fresh 8-GPU node with 96 cores holds 16 470-milli tasks of 10
        cores but serves 9), which lifted `cpu250` by 1.6 / 0.8 points; counted so always,
        it cost the default sequences 0.06-0.12.
        """
        fleet = self.fleet
        return (fleet.open_free_cpu_milli
                < self.workload.cpu_per_gpu_milli * fleet.open_free_gpu_milli)

    def rank(self, fleet: FleetState, node: NodeState, plan: NodePlan) -> tuple:
        summary = fleet.summary(node.name)
        strand_whole = self.cpu_runs_out_first()
        before = self.meter.node(summary.signature[0], node.cpu_milli_free,
                                 node.memory_mib_free, summary.open, key=summary.pictures_id,
                                 strand_whole=strand_whole, fraction_slots=strand_whole)
        cpu = node.cpu_milli_free - plan.cpu_milli if node.cpu_milli_free is not None else None
        memory = (node.memory_mib_free - plan.memory_mib
                  if node.memory_mib_free is not None else None)
        open_after = node.max_tasks is None or node.tasks + 1 < node.max_tasks
        after = self.meter.node(plan.pictures_after, cpu, memory, open_after,
                                key=plan.after_id, strand_whole=strand_whole,
                                fraction_slots=strand_whole)
        return (self._leaves_whole_gpus(plan), round(after - before, 6), plan.free_after,
                plan.gpu_free_after, *_host_after(node, plan))

    def _leaves_whole_gpus(self, plan: NodePlan) -> bool:
        """Whether a plan for several whole GPUs leaves free whole GPUs on its node.

        Why first, before the fragmentation measure: the measure weighs each task kind by
        how often it arrives, so a kind that is rare but asks for many GPUs counts for
        little, and a 2- or 4-GPU task can be put on a node with more free GPUs than it
        needs — breaking up a node a later larger task could have used, while a node with
        exactly its GPUs free stays part empty. On the openb family this lifted
        `multigpu40` by 0.1-0.2 points and moved the rest by at most 0.15 either way
        (bench_placement_quality.py, BENCHMARKS.md). Single GPUs and
        fractions are left to the measure: the same rule for one whole GPU lost 0.2-0.3
        points on each of the five sequences it was tried on.
        """
        units = plan.units
        if len(units) < 2 or units[0].kind is not UnitKind.WHOLE:
            return False
        return any(self._whole_gpu_free(picture) for picture in plan.pictures_after)

    def _whole_gpu_free(self, picture: Picture) -> bool:
        _, mode, usable, free, _, _ = picture
        return usable and free == MILLI and (
            mode == "exclusive" or (mode == "shared" and self.meter.whole_from_shared))


def make_scorer(policy: str, workload: Workload, whole_gpus_from_shared: bool,
                fleet: FleetState) -> Scorer:
    if policy == "binpack":
        return BinpackScorer()
    if policy == "spread":
        return SpreadScorer()
    return FragmentationScorer(workload, whole_gpus_from_shared, fleet)


__all__ = ["MILLI", "POLICIES", "Scorer", "make_scorer"]
