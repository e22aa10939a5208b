"""Series ids handed out metric by metric, so that id order is the raw tier's storage order.

Compacted hours of raw samples are stored in series-id order (docs/telemetry-store.md,
"Storage layout"). Each metric takes a block of 2^24 ids (16.7 M series) when its first
series arrives, and another when that one is full; within a block, ids follow arrival,
unit by unit. Sorted by id, one metric's series then sit side by side — a compression
vector sees one metric's values, not a ratio beside an energy counter — and each row group
still spans a narrow range of ids, so a query on a few units skips the others by their
min/max. (Sorting ids handed out in arrival order by metric made every row group of a
metric span all the ids, and a query on 16 GPUs read every row group of the hour.)

Block 0 holds the ids that stores written before this scheme handed out in arrival order,
every metric mixed; those series keep their ids, and their new neighbours get blocks.
"""

from __future__ import annotations

BLOCK_BITS = 24
_BLOCK_MASK = (1 << BLOCK_BITS) - 1
_LAST_BLOCK = (2**31 - 1) >> BLOCK_BITS  # series_id is a DuckDB INTEGER


class SeriesIdsExhausted(RuntimeError):
    """Every block of ids is taken (127 metrics' worth of 16.7 M series each)."""


class SeriesIds:
    """What ids are in use, and the next id of each metric. Not thread-safe: the store
    calls it under its ingest lock (handing out) and dictionary lock (recording)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}  # metric → the id after its newest
        self._owner: dict[int, str | None] = {0: None}  # block → metric (None: unknown)

    def known(self, sid: int, metric: str | None) -> None:
        """Record an id in use: from the dictionary, a committed batch, or a journal record
        whose definition was lost (`metric` None: its block is never handed out again)."""
        block = sid >> BLOCK_BITS
        owner = self._owner.setdefault(block, metric)
        if block and owner is not None and (metric is None or metric == owner):
            self._next[owner] = max(self._next.get(owner, 0), sid + 1)

    def allocate(self, metric: str, fresh: dict[str, int]) -> int:
        """The id for a new series of `metric`. `fresh` holds the newest id handed out per
        metric in the batch being built (nothing is recorded here until the batch is
        committed and `known` is told; a batch that fails leaves no trace)."""
        candidate = fresh[metric] + 1 if metric in fresh else self._next.get(metric)
        if candidate is None or not candidate & _BLOCK_MASK:
            taken = set(self._owner) | {sid >> BLOCK_BITS for sid in fresh.values()}
            block = max(taken) + 1
            if block > _LAST_BLOCK:
                raise SeriesIdsExhausted(f"no series id block left for {metric}")
            candidate = block << BLOCK_BITS
        fresh[metric] = candidate
        return candidate
