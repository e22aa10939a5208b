"""The ingest journal in front of the DuckDB store, as Prometheus's WAL is in front of its head
block: an upload is durable once it is appended here and fsynced, and DuckDB receives it
later in large transactions (DuckDB's cost per transaction and per statement is what made
small batches expensive).

On disk: a directory of segments (`00000001.journal`, …), each a sequence of records framed
as (body length u32, CRC32 of the body u32, body), little-endian. A body holds one keyed
upload: its key, the time of its newest sample, the series it defines (new series and
series whose attributes changed: `[series_id, metric, gpu_uuid, mig_uuid, labels, node,
environment, model]` as JSON; rare), and its samples as three packed columns (series id
int32, time ms int64, value float64), which are also the columns DuckDB loads.

Appends go to the newest segment only. The store rotates before it applies: everything in
closed segments is what it is applying, so once DuckDB has committed them they are deleted.

Recovery reads the segments in order. A torn final record (the server died mid-append, so
the upload was never acknowledged) is dropped with a warning. A record whose CRC does not
match with more data behind it is corruption: the segment's replay stops there, the error
is logged and the segment is kept as `*.corrupt` for an operator (docs/telemetry-store.md);
later segments are still replayed.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpufleet.private_files import ensure_private_dir, open_private
from gpufleet.tsdb.protocol import SeriesLabels

log = logging.getLogger(__name__)

_FRAME = struct.Struct("<II")  # body length, CRC32 of the body
_HEAD = struct.Struct("<BHIqI")  # version, key bytes, defines bytes, newest ms, samples
_VERSION = 1
MAX_RECORD_BYTES = 256 * 2**20  # a length beyond this is corruption, not a torn append
SUFFIX = ".journal"
CORRUPT_SUFFIX = ".corrupt"
_LITTLE_ENDIAN = sys.byteorder == "little"


@dataclass(frozen=True)
class JournalRecord:
    """One keyed upload as journalled: columns packed little-endian."""

    key: str
    newest_ms: int
    defines: tuple[tuple[int, SeriesLabels], ...]
    series_ids: bytes  # int32 per sample
    times_ms: bytes  # int64 per sample
    values: bytes  # float64 per sample

    @property
    def samples(self) -> int:
        return len(self.values) // 8


_NUMPY_TYPES = {"i": np.dtype("<i4"), "q": np.dtype("<i8"), "d": np.dtype("<f8")}


def packed(typecode: str, values: Sequence | np.ndarray) -> bytes:
    """Values as little-endian machine numbers ('i' int32, 'q' int64, 'd' float64). A numpy
    column (remote-write's steady body) is converted whole, in C: the same bytes as the
    list's, without a Python number a sample on the way."""
    if isinstance(values, np.ndarray):
        kind = _NUMPY_TYPES[typecode]
        if kind.kind == "i" and len(values) and values.dtype.itemsize > kind.itemsize:
            bounds = np.iinfo(kind)  # astype would wrap silently where array() refuses
            if values.min() < bounds.min or values.max() > bounds.max:
                raise OverflowError(f"a value does not fit {kind.name}")
        return values.astype(kind, copy=False).tobytes()
    numbers = array(typecode, values)
    if not _LITTLE_ENDIAN:
        numbers.byteswap()
    return numbers.tobytes()


def encode_record(record: JournalRecord) -> bytes:
    key = record.key.encode()
    defines = json.dumps([[sid, s.metric, s.gpu_uuid, s.mig_uuid, s.labels, s.node,
                           s.environment, s.model] for sid, s in record.defines],
                         separators=(",", ":")).encode() if record.defines else b""
    body = b"".join((_HEAD.pack(_VERSION, len(key), len(defines), record.newest_ms,
                                record.samples),
                     key, defines, record.series_ids, record.times_ms, record.values))
    return _FRAME.pack(len(body), zlib.crc32(body)) + body


def decode_body(body: bytes) -> JournalRecord:
    version, key_len, defines_len, newest_ms, samples = _HEAD.unpack_from(body)
    if version != _VERSION:
        raise ValueError(f"journal record version {version} is not {_VERSION}")
    at = _HEAD.size
    key = body[at:at + key_len].decode()
    at += key_len
    defines = tuple(
        (sid, SeriesLabels(metric, gpu, mig, tuple(tuple(pair) for pair in labels), node,
                           environment, model))
        for sid, metric, gpu, mig, labels, node, environment, model
        in (json.loads(body[at:at + defines_len]) if defines_len else ()))
    at += defines_len
    columns = []
    for width in (4, 8, 8):
        columns.append(body[at:at + width * samples])
        at += width * samples
    if at != len(body):
        raise ValueError("journal record length does not match its sample count")
    return JournalRecord(key, newest_ms, defines, *columns)


@dataclass(frozen=True)
class SegmentReading:
    records: list[JournalRecord]
    torn_bytes: int = 0  # dropped at the end: an append the crash cut short
    corrupt_at: int | None = None  # offset of a record that failed its CRC


def read_segment(data: bytes) -> SegmentReading:
    records: list[JournalRecord] = []
    at = 0
    while at < len(data):
        if len(data) - at < _FRAME.size:
            return SegmentReading(records, torn_bytes=len(data) - at)
        length, crc = _FRAME.unpack_from(data, at)
        end = at + _FRAME.size + length
        if length > MAX_RECORD_BYTES:
            return SegmentReading(records, corrupt_at=at)
        if end > len(data):
            return SegmentReading(records, torn_bytes=len(data) - at)
        body = data[at + _FRAME.size:end]
        if zlib.crc32(body) != crc:
            if end == len(data):  # the last append, written in part: never acknowledged
                return SegmentReading(records, torn_bytes=len(data) - at)
            return SegmentReading(records, corrupt_at=at)
        try:
            records.append(decode_body(body))
        except (ValueError, UnicodeDecodeError, struct.error) as exc:
            log.error("journal record at byte %d cannot be decoded: %s", at, exc)
            return SegmentReading(records, corrupt_at=at)
        at = end
    return SegmentReading(records)


class Journal:
    """The segment files of one store. Not thread-safe: the store serialises every call."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        ensure_private_dir(self.directory, tighten=True)  # batches name pods, projects
        self._fd: int | None = None
        # Numbers never repeat while a kept corrupt segment holds one.
        self._number = max([*self._segment_numbers(),
                            *(int(p.stem) for p in self.directory.glob(f"*{CORRUPT_SUFFIX}")
                              if p.stem.isdigit())], default=0)
        self._size_bytes = 0

    def recover(self) -> list[JournalRecord]:
        """Every intact record of the segments left by the last run, oldest first."""
        records: list[JournalRecord] = []
        for number in self._segment_numbers():
            path = self._path(number)
            reading = read_segment(path.read_bytes())
            records += reading.records
            if reading.torn_bytes:
                log.warning("journal %s: dropped a torn final record (%d bytes): an upload "
                            "cut short by a crash, never acknowledged", path, reading.torn_bytes)
            if reading.corrupt_at is not None:
                kept = path.with_suffix(CORRUPT_SUFFIX)
                log.error("journal %s: record at byte %d is corrupt (CRC mismatch); replayed "
                          "the %d records before it and stopped there; the segment is kept as "
                          "%s (see docs/telemetry-store.md, 'The ingest journal')",
                          path, reading.corrupt_at, len(reading.records), kept)
                path.rename(kept)
        return records

    def append(self, records: Sequence[JournalRecord]) -> None:
        """Append and fsync; on any failure the segment is cut back to where it was, so a
        record the caller was not told is stored cannot come back at recovery."""
        if self._fd is None:
            self._open_next()
        data = b"".join(encode_record(r) for r in records)
        try:
            written = os.write(self._fd, data)
            if written != len(data):
                raise OSError(f"short write to the journal ({written} of {len(data)} bytes)")
            os.fdatasync(self._fd)
        except BaseException:
            try:
                os.ftruncate(self._fd, self._size_bytes)
            except OSError:
                # Cannot cut it back: leave the segment (recovery drops a torn tail, and a
                # whole record there is only a replay the key answers) and start another.
                os.close(self._fd)
                self._fd = None
            raise
        self._size_bytes += len(data)

    def rotate(self) -> int:
        """Close the segment being appended to (if it holds anything); later appends go to a
        new one. Returns the newest closed segment's number: all of them may be discarded
        once what they hold is applied."""
        if self._fd is not None and self._size_bytes:
            os.close(self._fd)
            self._fd = None
            return self._number
        return self._number - (self._fd is not None)

    def discard_through(self, number: int) -> None:
        for old in self._segment_numbers():
            if old <= number and (self._fd is None or old != self._number):
                self._path(old).unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open_next(self) -> None:
        self._number += 1
        self._fd = open_private(self._path(self._number), os.O_WRONLY | os.O_APPEND)
        self._size_bytes = 0
        directory = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory)  # the new file's name must be as durable as its records
        finally:
            os.close(directory)

    def _path(self, number: int) -> Path:
        return self.directory / f"{number:08d}{SUFFIX}"

    def _segment_numbers(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{SUFFIX}")
                      if p.stem.isdigit())
