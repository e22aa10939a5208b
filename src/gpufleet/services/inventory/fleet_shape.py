"""What the fleet could ever offer a request: per environment, sharing mode and GPU model,
how many GPUs count as capacity, the most of them on one node, and the largest host CPU and
memory among the nodes that carry them.

Creating a request checks against these (a model the fleet lacks, more GPUs than it holds,
a same-node group larger than any node, host resources no node has), and reading them is an
aggregate over every GPU: about 100 ms at 100,000 GPUs, far more than the rest of a create.
They change only when nodes register or retire, GPUs change mode or health, so they are kept
in memory and re-read after `max_age_s`. A stale copy can only be wrong in one harmful
direction — refusing what newly registered GPUs now allow — so a check that would refuse
reads them again first (`fresh=True`); a copy that still lists GPUs since removed lets a
request in that then waits, and `why` says so.

Capacity is what could come back: GPUs on cordoned or unreachable nodes count (they return
when the node does), quarantined GPUs and retired nodes do not (docs/lifecycle.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.domain.inventory import OUT_OF_SERVICE, NodeAdminState
from gpufleet.store.tables import Environment, Gpu, Node

ShapeKey = tuple[str, str, str]  # (environment, sharing mode, model)


@dataclass(frozen=True)
class ShapeCell:
    """The GPUs of one (environment, sharing mode, model) that count as capacity."""

    gpus: int
    largest_node_gpus: int
    largest_node_cpu_cores: int
    largest_node_memory_bytes: int


def read_shape(session: Session) -> dict[ShapeKey, ShapeCell]:
    """One aggregate over the GPUs that count as capacity, grouped per node first."""
    per_node = (select(Gpu.node_id, Gpu.sharing_mode, Gpu.model, func.count().label("n"))
                .join(Node, Node.id == Gpu.node_id)
                .where(Node.admin_state != NodeAdminState.RETIRED.value,
                       Gpu.health.not_in(OUT_OF_SERVICE))
                .group_by(Gpu.node_id, Gpu.sharing_mode, Gpu.model).subquery())
    rows = session.execute(
        select(Environment.name, per_node.c.sharing_mode, per_node.c.model,
               func.sum(per_node.c.n), func.max(per_node.c.n), func.max(Node.cpu_cores),
               func.max(Node.memory_bytes))
        .join(Node, Node.id == per_node.c.node_id)
        .join(Environment, Environment.id == Node.environment_id)
        .group_by(Environment.name, per_node.c.sharing_mode, per_node.c.model))
    return {(env, mode, model): ShapeCell(int(total), int(largest), int(cores), int(memory))
            for env, mode, model, total, largest, cores, memory in rows}


class FleetShape:
    """The memo of `read_shape`; safe to share between threads."""

    def __init__(self, max_age_s: float, monotonic: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cells: dict[ShapeKey, ShapeCell] | None = None
        self._read_at = 0.0

    def invalidate(self) -> None:
        """GPUs were added, removed, retired, quarantined or changed mode here."""
        with self._lock:
            self._cells = None

    def cells(self, session: Session, *, fresh: bool = False) -> dict[ShapeKey, ShapeCell]:
        with self._lock:
            if (fresh or self._cells is None
                    or self._monotonic() - self._read_at > self.max_age_s):
                self._cells = read_shape(session)
                self._read_at = self._monotonic()
            return self._cells

    def models(self, session: Session, mode: str, *, fresh: bool = False) -> list[str]:
        return sorted({model for (_, m, model) in self.cells(session, fresh=fresh)
                       if m == mode})
