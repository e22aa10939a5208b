"""A remote-write 1.0 `WriteRequest` decoded into columns: no Python object per sample.

`decode_write_request` (remote_write.py) hands back a dict and a list of tuples per series:
upb parses natively, but every field it hands to Python is an object of its own, and that
was ~7 µs of the receiver's ~16 µs a sample (BENCHMARKS.md, 2026-11-26). Here the body is
walked with numpy instead, all messages of a level at once ("lockstep": step k reads the
k-th field of every message), and comes back as

    label_blocks  each series' labels, still serialized (bytes): the key a receiver caches
                  what it knows about a series by, so a known series is one dict hit
    series_index  int64 per sample: which series it belongs to
    times_ms      int64 per sample
    values        float64 per sample (NaN and Prometheus' stale marker kept as sent)

Why not a library: no package on PyPI decodes remote-write into arrays (the ones there are
senders, or generated message classes); protobuf's own runtime has no array access to
repeated sub-messages. The schema is fixed and small (remote_write.py's docstring), so the
walker knows four messages; anything else in them is an unknown field and skipped, as upb
does. Each label's UTF-8 is checked by upb when a receiver first meets its block
(`labels_of_block`). The top level (one chain of series per body) is left to upb, parsed as
`repeated bytes`: a C loop, one bytes object per series. So are the rare messages with more
fields than `MAX_LOCKSTEP_STEPS` (a series carrying a backlog of samples): the walk costs a
step per field of its longest message, so those are finished by upb, field by field.

Every way a body can be wrong is a `ValueError` naming it (the caller answers 400): a
length running past its message, a varint without end, a wire type the schema cannot have.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from gpufleet.wire.remote_write import (
    METRIC_NAME_LABEL,
    Label,
    RawTimeSeries,
    Sample,
    decompressed_body,
)

_MAX_VARINT_BYTES = 10
_PAD = np.zeros(_MAX_VARINT_BYTES + 8, dtype=np.uint8)  # gathers past the end read zeros
_VARINT_SHIFTS = (np.arange(_MAX_VARINT_BYTES, dtype=np.uint64) * np.uint64(7))
_DOUBLE_BYTES = np.arange(8)
# Wire types (protobuf encoding): varint, 64-bit, length-delimited, 32-bit.
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
# Field numbers of the schema (remote_write.py): TimeSeries.labels / .samples,
# Sample.value / .timestamp.
_LABELS, _SAMPLES, _VALUE, _TIMESTAMP = 1, 2, 1, 2
# Each lockstep step costs ~25 array operations whatever the number of messages still open:
# a message with thousands of fields (one series carrying a backlog of samples, a label
# flood) would cost milliseconds a field. After this many steps the messages still open
# are read by upb instead, one Python object per field as `decode_write_request` does.
MAX_LOCKSTEP_STEPS = 48


@dataclass(frozen=True, slots=True)
class WriteColumns:
    """A decoded body: sample `i` is `values[i]` at `times_ms[i]` of the series whose
    serialized labels are `label_blocks[series_index[i]]`, in the order the sender wrote
    them (series, then samples)."""

    label_blocks: list[bytes]
    series_index: np.ndarray
    times_ms: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def _top_level_class():
    proto = descriptor_pb2.FileDescriptorProto(
        name="gpufleet/remote_write_columns.proto", package="gpufleet_rw", syntax="proto3")
    f = descriptor_pb2.FieldDescriptorProto
    for name in ("SeriesBytes", "LabelBytes"):  # both: `repeated bytes` as field 1
        proto.message_type.add(name=name).field.add(
            name="items", number=1, label=f.LABEL_REPEATED, type=f.TYPE_BYTES)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"gpufleet_rw.{n}"))
                 for n in ("SeriesBytes", "LabelBytes"))


# A WriteRequest's series as bytes, and a label block's labels as bytes: the same wire
# bytes read as `repeated bytes` (a length-delimited field reads as a message or as bytes).
_SeriesBytes, _LabelBytes = _top_level_class()


def decode_write_columns(body: bytes, max_bytes: int,
                         known_blocks: Container[bytes] = ()) -> WriteColumns:
    """The columns of a snappy-compressed `WriteRequest` body. Refuses, with the same
    `ValueError`s as `decode_write_request`, a body that is not a snappy block, one over
    `max_bytes` decompressed (`BodyTooLarge`), and one that is not a WriteRequest. A series'
    labels are not looked at here: see `labels_of_block`. `known_blocks`: label blocks this
    decoder handed out before (each is label fields and nothing else), which lets a body
    whose every series is one of them and one sample be read without the walk."""
    raw = decompressed_body(body, max_bytes)
    try:
        series = _SeriesBytes.FromString(raw).items
    except DecodeError as error:
        raise ValueError(f"remote-write body is not a WriteRequest: {error}") from None
    return series_columns(series, known_blocks)


def series_columns(series: Sequence[bytes],
                   known_blocks: Container[bytes] = ()) -> WriteColumns:
    """The columns of serialized `TimeSeries` messages (a WriteRequest's field 1 each)."""
    count = len(series)
    joined = b"".join(series)
    buffer = np.concatenate([np.frombuffer(joined, dtype=np.uint8), _PAD])
    lengths = np.fromiter(map(len, series), dtype=np.int64, count=count)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if count and known_blocks:
        known = _known_single_samples(joined, buffer, starts, ends, known_blocks)
        if known is not None:
            return known
    try:
        return _columns(series, joined, buffer, starts, ends)
    except (_Malformed, DecodeError) as error:
        raise ValueError(f"remote-write body is not a WriteRequest: {error}") from None


class _Malformed(Exception):
    pass


# A series' one Sample, written last (after its labels) as every sender writes it: field 2
# (length 16) holding the value (field 1, fixed64) and the time (field 2, a varint of 6
# bytes: any time from 1971 to 2109), or, for a value of 0 (proto3 leaves it out), only
# the time (length 7). Its bytes from the end of the series.
_TIME_BYTES = 6
_WITH_VALUE, _ZERO_VALUE = 2 + 1 + 8 + 1 + _TIME_BYTES, 2 + 1 + _TIME_BYTES
_TIME_SHIFTS = np.arange(_TIME_BYTES, dtype=np.int64) * 7


def _known_single_samples(joined: bytes, buffer: np.ndarray, starts: np.ndarray,
                          ends: np.ndarray, known_blocks: Container[bytes]
                          ) -> WriteColumns | None:
    """The columns of a body whose every series is a known label block followed by one
    Sample as above (a Prometheus' steady state), read from each series' last bytes; None
    for any other body (the walk reads it). Sound because a known block is label fields
    and nothing else: what follows it can only be read as that one Sample."""
    def at(back: int) -> np.ndarray:
        return buffer[np.maximum(ends - back, 0)]

    time_bytes = buffer[(ends - _TIME_BYTES)[:, None] + np.arange(_TIME_BYTES)]
    timed = ((at(_TIME_BYTES + 1) == (_TIMESTAMP << 3 | _VARINT))
             & (time_bytes[:, :-1] >= 0x80).all(axis=1) & (time_bytes[:, -1] < 0x80))
    sample_tag = _SAMPLES << 3 | _LEN
    with_value = (timed & (ends - _WITH_VALUE >= starts) & (at(_WITH_VALUE) == sample_tag)
                  & (at(_WITH_VALUE - 1) == _WITH_VALUE - 2)
                  & (at(_WITH_VALUE - 2) == (_VALUE << 3 | _I64)))
    zero_value = (timed & ~with_value & (ends - _ZERO_VALUE >= starts)
                  & (at(_ZERO_VALUE) == sample_tag) & (at(_ZERO_VALUE - 1) == _ZERO_VALUE - 2))
    if not (with_value | zero_value).all():
        return None
    cuts = ends - np.where(with_value, _WITH_VALUE, _ZERO_VALUE)
    blocks = [joined[a:b] for a, b in zip(starts.tolist(), cuts.tolist(), strict=True)]
    if not all(map(known_blocks.__contains__, blocks)):
        return None
    raw = buffer[(ends - _WITH_VALUE + 3)[:, None] + _DOUBLE_BYTES]
    values = np.where(with_value, np.ascontiguousarray(raw).view("<f8")[:, 0], 0.0)
    times = ((time_bytes & 0x7F).astype(np.int64) << _TIME_SHIFTS).sum(axis=1)
    return WriteColumns(blocks, np.arange(len(blocks), dtype=np.int64), times, values)


def _columns(series: Sequence[bytes], joined: bytes, buffer: np.ndarray, starts: np.ndarray,
             ends: np.ndarray) -> WriteColumns:
    count = len(starts)
    first_label = np.full(count, -1, dtype=np.int64)
    label_end = np.zeros(count, dtype=np.int64)
    label_bytes = np.zeros(count, dtype=np.int64)
    label_pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    sample_parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    long: list[np.ndarray] = []
    for owner, field, wire, head, payload, end in _fields(buffer, starts, ends, left_open=long):
        is_label = (field == _LABELS) & (wire == _LEN)
        if is_label.any():
            own, h, e = owner[is_label], head[is_label], end[is_label]
            unseen = first_label[own] < 0
            first_label[own[unseen]] = h[unseen]
            label_end[own] = e
            label_bytes[own] += e - h  # one label per series per step: no repeats in `own`
            label_pieces.append((own, h, e))
        is_sample = (field == _SAMPLES) & (wire == _LEN)
        if is_sample.any():
            sample_parts.append((owner[is_sample], payload[is_sample], end[is_sample]))
    blocks = _label_blocks(joined, first_label, label_end, label_bytes, label_pieces)
    if not long:
        return WriteColumns(blocks, *_samples(buffer, sample_parts))
    walked: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for owners, payloads, ends_ in sample_parts:  # the long series' samples are read anew
        keep = ~np.isin(owners, long[0])
        walked.append((owners[keep], payloads[keep], ends_[keep]))
    return _with_long_series(series, blocks, starts, long[0], *_samples(buffer, walked))


def _with_long_series(series: Sequence[bytes], blocks: list[bytes], starts: np.ndarray,
                      long: np.ndarray, owner: np.ndarray, times: np.ndarray,
                      values: np.ndarray) -> WriteColumns:
    """The columns with the series of `long` (left open by the walk) read by upb: their
    label blocks and samples replace what the walk had read of them."""
    more_owner, more_times, more_values, at = [], [], [], []
    for index in long.tolist():
        one = RawTimeSeries.FromString(series[index])
        blocks[index] = b"".join(b"\x0a" + _varint_bytes(len(raw)) + raw for raw in one.labels)
        for k, sample in enumerate(one.samples):
            more_owner.append(index)
            more_times.append(sample.timestamp)
            more_values.append(sample.value)
            at.append(int(starts[index]) + k)  # sorts within the series, in wire order
    if not more_owner:
        return WriteColumns(blocks, owner, times, values)
    # Samples are in series order: every series' come before the next series' start.
    position = np.concatenate([starts[owner], np.array(at, dtype=np.int64)])
    order = np.argsort(position, kind="stable")
    return WriteColumns(
        blocks, np.concatenate([owner, np.array(more_owner, dtype=np.int64)])[order],
        np.concatenate([times, np.array(more_times, dtype=np.int64)])[order],
        np.concatenate([values, np.array(more_values, dtype=np.float64)])[order])


def _varint_bytes(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _label_blocks(joined: bytes, first: np.ndarray, end: np.ndarray, total: np.ndarray,
                  pieces: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> list[bytes]:
    """Each series' label fields as one bytes: a slice where they lie together (what every
    sender writes: labels first, then samples), joined where something lies between."""
    first = np.where(first < 0, 0, first)
    blocks = [joined[a:b] for a, b in zip(first.tolist(), end.tolist(), strict=True)]
    scattered = np.flatnonzero(end - first != total)
    if scattered.size:
        own = np.concatenate([p[0] for p in pieces])
        head = np.concatenate([p[1] for p in pieces])
        tail = np.concatenate([p[2] for p in pieces])
        for index in scattered.tolist():
            mine = np.flatnonzero(own == index)
            mine = mine[np.argsort(head[mine], kind="stable")]
            blocks[index] = b"".join(joined[head[k]:tail[k]] for k in mine.tolist())
    return blocks


def _samples(buffer: np.ndarray, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(series_index, times_ms, values) of the Sample messages, in wire order. A field
    sent twice keeps its last value, and one left out is 0, as protobuf decodes them."""
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty.copy(), np.zeros(0, dtype=np.float64)
    owner = np.concatenate([p[0] for p in parts])
    starts = np.concatenate([p[1] for p in parts])
    ends = np.concatenate([p[2] for p in parts])
    order = np.argsort(starts, kind="stable")  # each step's samples are in order already
    owner, starts, ends = owner[order], starts[order], ends[order]
    times = np.zeros(len(starts), dtype=np.int64)
    values = np.zeros(len(starts), dtype=np.float64)
    long: list[np.ndarray] = []
    for sample, field, wire, _, payload, _ in _fields(buffer, starts, ends,
                                                       want_varints=True, left_open=long):
        is_value = (field == _VALUE) & (wire == _I64)
        if is_value.any():
            at = payload.where[is_value]
            raw = buffer[at[:, None] + _DOUBLE_BYTES]
            values[sample[is_value]] = np.ascontiguousarray(raw).view("<f8")[:, 0]
        is_time = (field == _TIMESTAMP) & (wire == _VARINT)
        if is_time.any():
            times[sample[is_time]] = payload.varint[is_time]
    for index in long[0].tolist() if long else ():  # samples with many (unknown) fields
        one = Sample.FromString(buffer[starts[index]:ends[index]].tobytes())
        times[index], values[index] = one.timestamp, one.value
    return owner, times, values


class _Payload:
    """A step's payload positions, and the value of those that are varints."""

    __slots__ = ("varint", "where")

    def __init__(self, where: np.ndarray, varint: np.ndarray):
        self.where, self.varint = where, varint

    def __getitem__(self, mask):  # the positions, as a plain array would
        return self.where[mask]


def _fields(buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray,
            want_varints: bool = False, left_open: list[np.ndarray] | None = None):
    """Each step's fields of the messages `buffer[starts[k]:ends[k]]`, as arrays: (message
    index k, field number, wire type, field start, payload start, field end); with
    `want_varints`, the payload start is a `_Payload` that also holds varint values.
    After `MAX_LOCKSTEP_STEPS` steps the indices of the messages still open are appended to
    `left_open` (and the walk stops): the caller reads those otherwise."""
    owner = np.arange(len(starts), dtype=np.int64)
    position, end = starts, ends
    steps = 0
    while True:
        open_ = position < end
        if not open_.all():
            owner, position, end = owner[open_], position[open_], end[open_]
        if not owner.size:
            return
        if left_open is not None and steps == MAX_LOCKSTEP_STEPS:
            left_open.append(owner)
            return
        steps += 1
        key, after = _varints(buffer, position, end)
        field, wire = key >> 3, key & 7
        if (field <= 0).any() or (field >= 1 << 29).any():
            raise _Malformed("a field number out of range")
        field_end = np.empty_like(after)
        varint_value = None
        is_varint = wire == _VARINT
        if is_varint.any():
            value, next_ = _varints(buffer, after[is_varint], end[is_varint])
            field_end[is_varint] = next_
            if want_varints:
                varint_value = np.zeros(len(after), dtype=np.int64)
                varint_value[is_varint] = value
        for kind, size in ((_I64, 8), (_I32, 4)):
            fixed = wire == kind
            field_end[fixed] = after[fixed] + size
        payload = after.copy()
        is_len = wire == _LEN
        if is_len.any():
            length, body_start = _varints(buffer, after[is_len], end[is_len])
            if ((length < 0) | (length > 1 << 31)).any():
                raise _Malformed("a length past its message")
            payload[is_len] = body_start
            field_end[is_len] = body_start + length
        if not (is_varint | is_len | (wire == _I64) | (wire == _I32)).all():
            raise _Malformed("a wire type the remote-write schema cannot have")
        if (field_end > end).any():
            raise _Malformed("a field running past its message")
        where = _Payload(payload, varint_value) if want_varints else payload
        yield owner, field, wire, position, where, field_end
        position = field_end


def _varints(buffer: np.ndarray, at: np.ndarray, end: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """The base-128 varints starting at `at` (int64: the 64 bits protobuf keeps, as
    two's complement) and where each ends; one that does not end before `end` (or within 10
    bytes) is malformed."""
    first = buffer[at]
    if not (first & 0x80).any():  # tags and short lengths: one byte each
        if (at >= end).any():
            raise _Malformed("a varint past its message")
        return first.astype(np.int64), at + 1
    raw = buffer[at[:, None] + np.arange(_MAX_VARINT_BYTES)]
    last = raw < 0x80
    if not last.any(axis=1).all():
        raise _Malformed("a varint longer than 10 bytes")
    size = last.argmax(axis=1) + 1
    if (at + size > end).any():
        raise _Malformed("a varint past its message")
    used = np.arange(_MAX_VARINT_BYTES) < size[:, None]
    digits = np.where(used, raw & 0x7F, 0).astype(np.uint64)
    return np.bitwise_or.reduce(digits << _VARINT_SHIFTS, axis=1).view(np.int64), at + size


def labels_of_block(block: bytes,
                    known: dict[bytes, tuple[str, str]] | None = None) -> dict[str, str]:
    """A series' labels from its serialized label block (`WriteColumns.label_blocks`), a
    later repeat of a name winning as in `decode_write_request`. `ValueError` for a block
    whose labels are not `Label`s (bad UTF-8) or that has no `__name__` (the spec's MUST).
    `known` (serialized label → its pair) may be shared by the blocks of one body: the
    series of a GPU repeat most of their labels (UUID, Hostname, modelName, …)."""
    known = {} if known is None else known
    labels = {}
    try:
        for raw in _LabelBytes.FromString(block).items:
            pair = known.get(raw)
            if pair is None:
                label = Label.FromString(raw)
                pair = known[raw] = (label.name, label.value)
            labels[pair[0]] = pair[1]
    except DecodeError as error:
        raise ValueError(f"remote-write body is not a WriteRequest: {error}") from None
    if METRIC_NAME_LABEL not in labels:
        raise ValueError("remote-write body is not a WriteRequest: a series without "
                         f"a {METRIC_NAME_LABEL} label")
    return labels
