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
        # block → its metric, or None where it holds ids of several metrics or of an unknown
        # one (block 0, a lost definition): nothing is handed out from such a block again.
        self._owner: dict[int, str | None] = {0: None}
        self._top: dict[int, int] = {}  # block → its highest id in use
        self._newest: dict[str, int] = {}  # metric → its newest block

    def known(self, sid: int, metric: str | None) -> None:
        """Record an id in use: from the dictionary, a committed batch, or a journal record
        whose definition was lost (`metric` None)."""
        block = sid >> BLOCK_BITS
        self._top[block] = max(self._top.get(block, sid), sid)
        if block not in self._owner:
            self._owner[block] = metric
        elif self._owner[block] != metric:
            self._owner[block] = None
        if metric is not None and self._owner[block] == metric:
            self._newest[metric] = max(self._newest.get(metric, block), block)

    def allocate(self, metric: str, fresh: dict[str, int]) -> int:
        """The id for a new series of `metric`. `fresh` holds the newest id handed out per
        metric in the batch being built (nothing is recorded here until the batch is
        committed and `known` is told; a batch that fails leaves no trace)."""
        if metric in fresh:
            candidate: int | None = fresh[metric] + 1
        else:
            block = self._newest.get(metric)
            candidate = self._top[block] + 1 \
                if block is not None and self._owner.get(block) == metric else None
        if candidate is None or not candidate & _BLOCK_MASK:
            taken = set(self._owner) | {sid >> BLOCK_BITS for sid in fresh.values()}
            block = max(taken) + 1
            if block > _LAST_BLOCK:
                raise SeriesIdsExhausted(f"no series id block left for {metric}")
            candidate = block << BLOCK_BITS
        fresh[metric] = candidate
        return candidate
