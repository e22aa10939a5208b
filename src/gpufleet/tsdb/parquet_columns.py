"""A minimal Parquet writer for packed numeric columns, so DuckDB can load samples in C++.

Why: handing DuckDB three Python lists costs ~0.6 CPU-s per million values per column (each
element becomes a DuckDB value one by one), which was most of the telemetry ingest's cost.
The samples are already packed little-endian arrays (the journal's encoding), and Parquet's
PLAIN encoding of a REQUIRED INT32 / INT64 / DOUBLE column is exactly such an array: this
module wraps the arrays in one row group of one uncompressed page per column, with the
Thrift-compact footer, and `read_parquet` loads them at memory speed. No pyarrow or numpy.

Only what the store needs: flat schema, required columns, the three physical types.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

MAGIC = b"PAR1"


class PhysicalType(IntEnum):
    INT32 = 1
    INT64 = 2
    DOUBLE = 5

    @property
    def width_bytes(self) -> int:
        return 4 if self is PhysicalType.INT32 else 8


@dataclass(frozen=True)
class PackedColumn:
    """One column: its name, Parquet type and values packed little-endian (array.tobytes()
    on a little-endian machine)."""

    name: str
    kind: PhysicalType
    data: bytes


_REQUIRED = 0
_PLAIN, _RLE = 0, 3
_DATA_PAGE = 0
_UNCOMPRESSED = 0
# Thrift compact protocol field types.
_I32, _I64, _BINARY, _LIST, _STRUCT = 5, 6, 8, 9, 12


def write_parquet(path: str | Path, columns: list[PackedColumn]) -> int:
    """Write `columns` (all of the same length) as a Parquet file; returns the row count."""
    rows = _row_count(columns)
    chunks: list[bytes] = [MAGIC]
    offset = len(MAGIC)
    chunk_meta: list[bytes] = []
    for column in columns:
        header = _struct([(1, _I32, _DATA_PAGE), (2, _I32, len(column.data)),
                          (3, _I32, len(column.data)),
                          (5, _STRUCT, _struct([(1, _I32, rows), (2, _I32, _PLAIN),
                                                (3, _I32, _RLE), (4, _I32, _RLE)]))])
        size = len(header) + len(column.data)
        metadata = _struct([(1, _I32, int(column.kind)), (2, _LIST, (_I32, [_PLAIN])),
                            (3, _LIST, (_BINARY, [column.name.encode()])),
                            (4, _I32, _UNCOMPRESSED), (5, _I64, rows), (6, _I64, size),
                            (7, _I64, size), (9, _I64, offset)])
        chunk_meta.append(_struct([(2, _I64, offset), (3, _STRUCT, metadata)]))
        chunks += [header, column.data]
        offset += size
    schema = [_struct([(4, _BINARY, b"schema"), (5, _I32, len(columns))])]
    schema += [_struct([(1, _I32, int(c.kind)), (3, _I32, _REQUIRED),
                        (4, _BINARY, c.name.encode())]) for c in columns]
    row_group = _struct([(1, _LIST, (_STRUCT, chunk_meta)), (2, _I64, offset - len(MAGIC)),
                         (3, _I64, rows)])
    footer = _struct([(1, _I32, 1), (2, _LIST, (_STRUCT, schema)), (3, _I64, rows),
                      (4, _LIST, (_STRUCT, [row_group]))])
    chunks += [footer, struct.pack("<I", len(footer)), MAGIC]
    with open(path, "wb") as file:
        file.write(b"".join(chunks))
    return rows


def _row_count(columns: list[PackedColumn]) -> int:
    counts = {len(c.data) // c.kind.width_bytes for c in columns}
    if len(counts) != 1 or any(len(c.data) % c.kind.width_bytes for c in columns):
        raise ValueError("Parquet columns must hold whole values, as many in each column")
    return counts.pop()


# -- Thrift compact protocol (only what the footer and page headers use) ---------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _value(kind: int, value) -> bytes:
    if kind in (_I32, _I64):
        return _zigzag(value)
    if kind == _BINARY:
        return _varint(len(value)) + value
    if kind == _STRUCT:
        return value  # already encoded, stop byte included
    element, items = value  # _LIST
    size = len(items)
    head = bytes([(size << 4) | element]) if size < 15 else bytes([0xF0 | element]) + \
        _varint(size)
    return head + b"".join(_value(element, item) for item in items)


def _struct(fields: list[tuple[int, int, object]]) -> bytes:
    """Fields as (id, type, value) in increasing id order; deltas of at most 15."""
    out = bytearray()
    last = 0
    for field_id, kind, value in fields:
        out.append(((field_id - last) << 4) | kind)
        out += _value(kind, value)
        last = field_id
    out.append(0)
    return bytes(out)
