"""Which minutes of the raw tier a write may have changed since a reader looked: how the
raw minutes past the minute tier's extent (the rollup grace) are read once, not at every
query (edge_minute_sums.py).

Samples may arrive late: a raw minute not rolled up yet can still change, so a kept sum of
it is good only while no write since it was read held a sample in or before it. The
store tells this log after each write's commit (`wrote`, with the write's oldest sample);
a reader takes `version` before its snapshot begins, so every write counted in it is in
the snapshot, and a write it may not see is counted after it. Bounded: past the last
`_KEPT` writes every minute counts as changed.
"""

from __future__ import annotations

import threading
from collections import deque

_KEPT = 1024
_NEVER_MS = 2**62


class RawWrites:
    """A numbered log of the writes into the raw tier: (version, oldest sample's ms)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._log: deque[tuple[int, int]] = deque(maxlen=_KEPT)
        self.version = 0

    def wrote(self, oldest_ms: int) -> None:
        """A write holding samples from `oldest_ms` on committed."""
        with self._lock:
            self.version += 1
            self._log.append((self.version, oldest_ms))

    def oldest_since(self, version: int) -> int:
        """The oldest sample's ms of the writes counted after `version` (2**62: none;
        -2**62: the log no longer reaches back that far)."""
        with self._lock:
            if self._log and self._log[0][0] > version + 1:
                return -_NEVER_MS
            return min((ms for v, ms in self._log if v > version), default=_NEVER_MS)
