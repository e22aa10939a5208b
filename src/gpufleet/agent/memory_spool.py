"""A spool in memory, with the on-disk `Spool`'s interface, for agents that need no disk.

The simulated fleet runs thousands of agents in one process: a file and an fsync per batch
per node would cost the demo machine more than the telemetry itself, and a simulated
node's telemetry is not worth keeping across a restart. A real agent uses `spool.Spool`.
Bounded like it: over `max_bytes`, the oldest batches are dropped and counted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gpufleet.text_limits import check_batch_id


@dataclass(frozen=True)
class MemoryBatch:
    sequence: int
    batch_id: str
    payload: bytes

    def read(self) -> bytes:
        return self.payload


class MemorySpool:
    def __init__(self, max_bytes: int = 16 * 1024**2):
        if max_bytes < 1:
            raise ValueError("a spool needs room for at least one byte")
        self.max_bytes = max_bytes
        self.dropped_batches = 0
        self._batches: deque[MemoryBatch] = deque()
        self._bytes = 0
        self._sequence = 0

    def put(self, batch_id: str, payload: bytes) -> MemoryBatch:
        check_batch_id(batch_id)  # as the on-disk spool does
        if len(payload) > self.max_bytes:
            raise ValueError(f"a batch of {len(payload)} bytes exceeds the spool's "
                             f"{self.max_bytes} bytes")
        while self._batches and self._bytes + len(payload) > self.max_bytes:
            self._bytes -= len(self._batches.popleft().payload)
            self.dropped_batches += 1
        self._sequence += 1
        batch = MemoryBatch(self._sequence, batch_id, payload)
        self._batches.append(batch)
        self._bytes += len(payload)
        return batch

    def pending(self) -> list[MemoryBatch]:
        return list(self._batches)

    def ack(self, batch: MemoryBatch) -> None:
        try:
            self._batches.remove(batch)
        except ValueError:
            return  # already dropped to stay within the bound
        self._bytes -= len(batch.payload)

    def size_bytes(self) -> int:
        return self._bytes
