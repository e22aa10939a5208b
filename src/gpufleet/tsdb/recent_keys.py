"""The upload keys this store process took recently, so a new upload's replay check needs
no query.

Checking every upload's key against `ingested_batches` cost a DuckDB statement (~0.4 ms)
per upload, a sixth of what an agent's upload cost the server. But a replay can only be of
an upload stored before, and this set answers for everything stored recently by this
process: an upload whose samples are all newer than the horizon and whose key is not here
was never stored — not by this process (it would be here: entries stay while their newest
sample is inside the window), and not by an earlier one (which stopped before this one
started, and could not have accepted samples stamped more than `future_allowance_ms` after
that). Older uploads — a spool replayed after an outage, anything in the first
`future_allowance_ms` after a start — are still checked in DuckDB.

The store narrows that start allowance to what it holds (`stored_through`): every key an
earlier process stored is in `ingested_batches` with its newest sample, so an upload whose
oldest sample is newer than the newest of them cannot be a replay of one of them (a replay
carries the same samples). A fresh store, or one whose senders are ahead of what it holds,
then needs no DuckDB statement in its first `future_allowance_ms` either.
"""

from __future__ import annotations

import time
from collections.abc import Callable

PRUNE_EVERY = 4096  # additions between sweeps of expired keys
_NEVER_MS = -(2**63)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class RecentKeys:
    """Not thread-safe: used under the store's ingest lock."""

    def __init__(self, *, window_ms: int = 600_000, future_allowance_ms: int = 3_600_000,
                 now_ms: Callable[[], int] = wall_clock_ms):
        self._now_ms = now_ms
        self._window_ms = window_ms
        self._horizon_floor_ms = now_ms() + future_allowance_ms
        self._newest_ms: dict[str, int] = {}
        self._added = 0

    def __contains__(self, key: str) -> bool:
        return key in self._newest_ms

    def stored_through(self, newest_stored_ms: int | None) -> None:
        """What earlier processes stored: every key of theirs has its newest sample at or
        before `newest_stored_ms` (None: they stored none)."""
        floor_ms = _NEVER_MS if newest_stored_ms is None else newest_stored_ms + 1
        self._horizon_floor_ms = min(self._horizon_floor_ms, floor_ms)

    def answers_for(self, oldest_sample_ms: int) -> bool:
        """True when an upload whose oldest sample is this recent is a replay only if its key
        is in this set."""
        return oldest_sample_ms >= max(self._horizon_floor_ms,
                                       self._now_ms() - self._window_ms)

    def add(self, key: str, newest_sample_ms: int) -> None:
        self._newest_ms[key] = newest_sample_ms
        self._added += 1
        if self._added % PRUNE_EVERY == 0:
            cutoff_ms = self._now_ms() - self._window_ms
            self._newest_ms = {k: ms for k, ms in self._newest_ms.items() if ms >= cutoff_ms}

    def __len__(self) -> int:
        return len(self._newest_ms)
