"""The agent's on-disk spool: telemetry batches the server has not acknowledged yet.

Every batch is written here before it is sent and deleted only once the server has
acknowledged it (the server acknowledges after the data is durable, and counts a batch id
once, so sending a batch twice — after a crash between send and delete — is harmless).
While the server is unreachable batches accumulate and are replayed oldest first when it
returns, so the store receives each node's samples in order.

The spool is bounded (`max_bytes`): when a new batch would exceed it, the oldest batches
are dropped and counted — an agent cut off for days keeps the most recent telemetry rather
than filling the node's disk. A batch is written to a temporary file, flushed to disk and
renamed into place, so a crash leaves either the whole batch or none of it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpufleet.private_files import ensure_private_dir, open_private
from gpufleet.text_limits import BATCH_ID, check_batch_id

from .options import TelemetryOptions

log = logging.getLogger(__name__)

BATCH_FILE = re.compile(rf"^(\d{{12}})-({BATCH_ID})\.batch$")
DEFAULT_MAX_BYTES = TelemetryOptions.spool_max_bytes


@dataclass(frozen=True)
class SpooledBatch:
    sequence: int
    batch_id: str
    path: Path

    def read(self) -> bytes:
        return self.path.read_bytes()


class Spool:
    """Not thread-safe: one agent loop owns it."""

    def __init__(self, directory: str | Path, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes < 1:
            raise ValueError("a spool needs room for at least one byte")
        self.directory = Path(directory)
        ensure_private_dir(self.directory, tighten=True)
        self.max_bytes = max_bytes
        self.dropped_batches = 0  # since start: batches given up to stay within max_bytes
        for leftover in self.directory.glob("*.tmp"):  # a write a crash interrupted
            leftover.unlink(missing_ok=True)

    def put(self, batch_id: str, payload: bytes) -> SpooledBatch:
        """Keep a batch durably until `ack`; drops the oldest batches if over the bound.
        A single batch larger than the whole spool is refused (ValueError)."""
        check_batch_id(batch_id)
        if len(payload) > self.max_bytes:
            raise ValueError(f"a batch of {len(payload)} bytes exceeds the spool's "
                             f"{self.max_bytes} bytes")
        self._make_room(len(payload))
        batches = self.pending()
        sequence = batches[-1].sequence + 1 if batches else 1
        final = self.directory / f"{sequence:012d}-{batch_id}.batch"
        temporary = final.with_suffix(".tmp")
        with os.fdopen(open_private(temporary, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.rename(final)
        _sync_directory(self.directory)
        return SpooledBatch(sequence, batch_id, final)

    def pending(self) -> list[SpooledBatch]:
        """Batches not yet acknowledged, oldest first."""
        return sorted(self._scan(), key=lambda b: b.sequence)

    def ack(self, batch: SpooledBatch) -> None:
        """The server has the batch durably: forget it."""
        batch.path.unlink(missing_ok=True)

    def size_bytes(self) -> int:
        return sum(b.path.stat().st_size for b in self._scan())

    def _make_room(self, incoming: int) -> None:
        batches = self.pending()
        used = sum(b.path.stat().st_size for b in batches)
        while batches and used + incoming > self.max_bytes:
            oldest = batches.pop(0)
            used -= oldest.path.stat().st_size
            oldest.path.unlink(missing_ok=True)
            self.dropped_batches += 1
            log.warning("telemetry spool full (%d bytes): dropped the oldest batch %s",
                        self.max_bytes, oldest.batch_id)

    def _scan(self) -> Iterator[SpooledBatch]:
        for path in self.directory.iterdir():
            match = BATCH_FILE.match(path.name)
            if match:
                yield SpooledBatch(int(match.group(1)), match.group(2), path)


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX: fsync the directory)."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
