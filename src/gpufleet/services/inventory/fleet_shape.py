"""What the fleet could ever offer a request: its GPU models per sharing mode, and the most
GPUs of a model that one node has.

Creating a request checks against these (an unknown model, a same-node group larger than
any node), and reading them is an aggregate over every GPU: about 100 ms at 100,000 GPUs,
far more than the rest of a create. They change only when nodes register or GPUs change
mode, so they are kept in memory and re-read after `max_age_s`. A stale copy can only be
wrong in one harmful direction — refusing what newly registered GPUs now allow — so a
check that would refuse reads them again first (`fresh=True`); a copy that still lists GPUs
since removed lets a request in that then waits, and `why` says so.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpufleet.store.tables import Gpu

ShapeKey = tuple[str, str]  # (sharing mode, model)


def largest_per_node(session: Session) -> dict[ShapeKey, int]:
    """Per (sharing mode, model): the most GPUs of it on one node, any node status."""
    per_node = (select(Gpu.sharing_mode, Gpu.model, func.count().label("n"))
                .group_by(Gpu.node_id, Gpu.sharing_mode, Gpu.model).subquery())
    rows = session.execute(select(per_node.c.sharing_mode, per_node.c.model,
                                  func.max(per_node.c.n))
                           .group_by(per_node.c.sharing_mode, per_node.c.model))
    return {(mode, model): int(n) for mode, model, n in rows}


class FleetShape:
    """The memo of `largest_per_node`; safe to share between threads."""

    def __init__(self, max_age_s: float, monotonic: Callable[[], float] = time.monotonic):
        self.max_age_s = max_age_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._largest: dict[ShapeKey, int] | None = None
        self._read_at = 0.0

    def invalidate(self) -> None:
        """GPUs were added, removed or changed mode through this server."""
        with self._lock:
            self._largest = None

    def largest(self, session: Session, *, fresh: bool = False) -> dict[ShapeKey, int]:
        with self._lock:
            if (fresh or self._largest is None
                    or self._monotonic() - self._read_at > self.max_age_s):
                self._largest = largest_per_node(session)
                self._read_at = self._monotonic()
            return self._largest

    def models(self, session: Session, mode: str, *, fresh: bool = False) -> list[str]:
        return sorted(model for (m, model) in self.largest(session, fresh=fresh) if m == mode)
