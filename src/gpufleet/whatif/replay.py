"""Replay a workload through the same `Placer` the live fleet uses.

Tasks are decided one at a time in arrival order, with no look-ahead. A refused task is
dropped. A placed task holds its units until its departure time (never, for workloads
without departures); departures due at or before an arrival are released first.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpufleet.domain.gpu_models import model as catalogue_model
from gpufleet.domain.placement import (
    DEFAULT_MAX_CANDIDATES,
    MILLI,
    Decision,
    FleetState,
    Placer,
    Refusal,
)

from .errors import WhatifError
from .workloads import Task


@dataclass(frozen=True)
class TaskOutcome:
    task: Task
    decision: Decision | None
    refusal: Refusal | None

    @property
    def placed(self) -> bool:
        return self.decision is not None


@dataclass
class ReplayResult:
    fleet: FleetState
    placer: Placer
    outcomes: list[TaskOutcome] = field(default_factory=list)
    allocated_milli: int = 0  # held at the end
    peak_allocated_milli: int = 0
    departed: int = 0

    @property
    def total_milli(self) -> int:
        return sum(len(node.gpus) for node in self.fleet.nodes) * MILLI


def check_models(fleet: FleetState, tasks: Sequence[Task]) -> None:
    """A model no GPU in the fleet has and gpufleet does not know is a typo, not a what-if."""
    for task in tasks:
        for name in task.demand.models or ():
            if name not in fleet.models and catalogue_model(name) is None:
                known = ", ".join(sorted(fleet.models)) or "none"
                raise WhatifError(f"task {task.name}: unknown GPU model {name!r} (the fleet "
                                  f"has: {known})")


def replay(fleet: FleetState, tasks: Sequence[Task], *, policy: str = "default", seed: int = 0,
           whole_gpus_from_shared: bool = False,
           max_candidates: int = DEFAULT_MAX_CANDIDATES,
           progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Decide every task in order against `fleet` (changed in place); see the module doc."""
    try:
        placer = Placer(fleet, policy, seed=seed, whole_gpus_from_shared=whole_gpus_from_shared,
                        max_candidates=max_candidates)
    except ValueError as exc:
        raise WhatifError(str(exc)) from None
    check_models(fleet, tasks)
    result = ReplayResult(fleet, placer)
    leaving: list[tuple[float, int, Decision]] = []
    for number, task in enumerate(tasks):
        while leaving and task.arrival_s is not None and leaving[0][0] <= task.arrival_s:
            _, _, decision = heapq.heappop(leaving)
            placer.release(decision)
            result.allocated_milli -= decision.milli
            result.departed += 1
        answer = placer.decide(task.demand)
        if isinstance(answer, Refusal):
            result.outcomes.append(TaskOutcome(task, None, answer))
        else:
            placer.commit(answer)
            result.allocated_milli += answer.milli
            result.peak_allocated_milli = max(result.peak_allocated_milli,
                                              result.allocated_milli)
            result.outcomes.append(TaskOutcome(task, answer, None))
            if task.departure_s is not None:
                heapq.heappush(leaving, (task.departure_s, number, answer))
        if progress is not None:
            progress(1)
    return result


def placement_record(outcome: TaskOutcome) -> dict:
    """One line of `--placements-out`, exactly the openb format: name, node, GPU indexes and
    the milli-GPU per GPU; `"node": null` for a refused task. A decision spanning several
    nodes (possible only for gpufleet traces) adds `"nodes"`, one entry per node."""
    decision = outcome.decision
    if decision is None:
        return {"name": outcome.task.name, "node": None, "gpus": [], "milli": 0}
    nodes = decision.nodes
    record = {
        "name": outcome.task.name,
        "node": nodes[0],
        "gpus": [u.gpu_index for u in decision.units if u.node == nodes[0]],
        "milli": decision.units[0].milli if decision.units else 0,
    }
    if len(nodes) > 1:
        record["nodes"] = [{"node": n, "gpus": [u.gpu_index for u in decision.units
                                                if u.node == n]} for n in nodes]
    return record
