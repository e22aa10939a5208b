"""The columnar remote-write decoder against upb's: the same series, samples and refusals
on random WriteRequests, written field by field so that what senders may do (unknown
fields, fields out of order, a field sent twice or left out) is in them."""

from __future__ import annotations

import math
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.wire.base import BodyTooLarge
from gpufleet.wire.remote_write import decode_write_request, encode_write_request
from gpufleet.wire.remote_write_columns import decode_write_columns, labels_of_block

LIMIT = 1 << 24
STALE_NAN = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000002))[0]


def snappy(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, wire: int, payload: bytes) -> bytes:
    head = varint(number << 3 | wire)
    return head + (varint(len(payload)) + payload if wire == 2 else payload)


def unknown_field(number: int, wire: int, data: bytes) -> bytes:
    payload = {0: varint(int.from_bytes(data[:9] or b"\0", "little")),
               1: (data + bytes(8))[:8], 2: data, 5: (data + bytes(4))[:4]}[wire]
    return field(number, wire, payload)


unknowns = st.lists(st.builds(unknown_field, st.integers(3, 2000), st.sampled_from([0, 1, 2, 5]),
                              st.binary(max_size=12)), max_size=2)
times = st.integers(-(2**63), 2**63 - 1)
values = st.one_of(st.floats(), st.just(STALE_NAN), st.just(0.0), st.just(-0.0))


@st.composite
def samples(draw) -> bytes:
    """A Sample message: either field may be left out (0), sent twice (the last wins) or
    surrounded by unknown fields."""
    pieces = []
    for _ in range(draw(st.integers(0, 2))):
        pieces.append(field(1, 1, struct.pack("<d", draw(values))))
    for _ in range(draw(st.integers(0, 2))):
        pieces.append(field(2, 0, varint(draw(times))))
    pieces += draw(unknowns)
    return b"".join(draw(st.permutations(pieces)))


label_text = st.one_of(st.text(max_size=8), st.text(max_size=3000),
                       st.sampled_from(["__name__", "UUID", "job", ""]))


@st.composite
def labels(draw) -> list[bytes]:
    pairs = draw(st.lists(st.tuples(label_text, label_text), max_size=6))
    if draw(st.booleans()):
        pairs.insert(draw(st.integers(0, len(pairs))), ("__name__", draw(label_text)))
    return [field(1, 2, field(1, 2, n.encode()) + field(2, 2, v.encode())) for n, v in pairs]


@st.composite
def time_series(draw) -> bytes:
    """A TimeSeries: labels then samples, as senders write them, or interleaved (the wire
    format allows it), with unknown fields (exemplars, histograms) between."""
    label_fields = draw(labels())
    sample_fields = [field(2, 2, s) for s in draw(st.lists(samples(), max_size=4))]
    if draw(st.booleans()):
        pieces = label_fields + sample_fields
    else:
        pieces = _interleaved(draw, label_fields, sample_fields)
    for extra in draw(unknowns):
        pieces.insert(draw(st.integers(0, len(pieces))), extra)
    return b"".join(pieces)


def _interleaved(draw, first: list[bytes], second: list[bytes]) -> list[bytes]:
    out, a, b = [], list(first), list(second)
    while a or b:
        take_a = bool(a) and (not b or draw(st.booleans()))
        out.append((a if take_a else b).pop(0))
    return out


@st.composite
def write_requests(draw) -> bytes:
    pieces = [field(1, 2, ts) for ts in draw(st.lists(time_series(), max_size=6))]
    for extra in draw(unknowns):
        pieces.insert(draw(st.integers(0, len(pieces))), extra)
    return b"".join(pieces)


def via_upb(body: bytes):
    return [(s.labels, [(t, _bits(v)) for t, v in s.samples])
            for s in decode_write_request(body, LIMIT)]


def via_columns(body: bytes):
    columns = decode_write_columns(body, LIMIT)
    decoded = [(labels_of_block(block), []) for block in columns.label_blocks]
    for index, t, v in zip(columns.series_index.tolist(), columns.times_ms.tolist(),
                           columns.values.tolist(), strict=True):
        decoded[index][1].append((t, _bits(v)))
    return decoded


def _bits(value: float) -> int:
    """A value's bits: NaNs (the stale marker among them) compare by payload."""
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def outcome(decode, body: bytes):
    try:
        return decode(body)
    except ValueError:
        return "refused"


@settings(max_examples=300, deadline=None)
@given(write_requests())
def test_columns_decode_what_upb_decodes(raw):
    body = snappy(raw)
    assert outcome(via_columns, body) == outcome(via_upb, body)


@settings(max_examples=300, deadline=None)
@given(write_requests(), st.data())
def test_a_damaged_body_is_refused_or_read_as_upb_reads_it(raw, data):
    """Truncated, or a byte overwritten: a ValueError (400) or upb's reading, nothing else."""
    if not raw:
        return
    if data.draw(st.booleans()):
        damaged = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        at = data.draw(st.integers(0, len(raw) - 1))
        damaged = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    mine, upb = outcome(via_columns, snappy(damaged)), outcome(via_upb, snappy(damaged))
    if mine != "refused":
        assert mine == upb


def test_an_empty_request_has_no_series():
    columns = decode_write_columns(snappy(b""), LIMIT)
    assert columns.label_blocks == [] and len(columns) == 0


def test_the_encoders_bodies_read_back_as_columns():
    body = encode_write_request([({"__name__": "up", "job": "a"}, [(-5, 1.5), (7, math.inf)]),
                                 ({"__name__": "up", "job": "b"}, [(8, STALE_NAN)])])
    columns = decode_write_columns(body, LIMIT)
    assert [labels_of_block(b) for b in columns.label_blocks] == \
        [{"__name__": "up", "job": "a"}, {"__name__": "up", "job": "b"}]
    assert columns.series_index.tolist() == [0, 0, 1]
    assert columns.times_ms.tolist() == [-5, 7, 8]
    assert _bits(columns.values[2]) == 0x7FF0000000000002


def test_a_series_labels_block_is_the_same_bytes_in_every_body():
    """What a receiver caches by: the same labels, whatever the samples."""
    one = decode_write_columns(encode_write_request([({"__name__": "m"}, [(1, 1.0)])]), LIMIT)
    two = decode_write_columns(encode_write_request([({"__name__": "m"}, [(2, 0.0)])]), LIMIT)
    assert one.label_blocks == two.label_blocks


@pytest.mark.parametrize("raw", [
    b"\x0a\x05\x12\x10\x09\x00\x00",  # a sample's length past its series
    b"\x0a\x02\x12\x80",  # a varint without its end
    b"\x0a\x03\x12\x01\x0b",  # a group (wire type 3) inside a sample
    b"\x0a\x02\x00\x01",  # field number 0
    b"\x0a\x0d\x12\x0b\x10" + b"\xff" * 10,  # a timestamp varint over 10 bytes
])
def test_malformed_bodies_are_a_value_error(raw):
    with pytest.raises(ValueError, match="not a WriteRequest"):
        via_columns(snappy(raw))


def test_a_series_without_a_name_or_with_bad_utf8_is_refused_when_its_labels_are_read():
    no_name = field(1, 2, field(1, 2, b"job") + field(2, 2, b"x"))
    with pytest.raises(ValueError, match="__name__"):
        labels_of_block(no_name)
    bad_utf8 = field(1, 2, field(1, 2, b"__name__") + field(2, 2, b"\xff"))
    with pytest.raises(ValueError, match="not a WriteRequest"):
        labels_of_block(bad_utf8)


def test_the_size_limit_is_checked_before_inflating():
    with pytest.raises(BodyTooLarge):
        decode_write_columns(snappy(bytes(100)), 10)
    with pytest.raises(ValueError, match="snappy"):
        decode_write_columns(b"\x05nope", LIMIT)


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_messages_longer_than_the_lockstep_walk_are_read_by_upb(monkeypatch, steps):
    """Few series or samples with many fields (a backlog of samples, unknown fields) are
    finished by upb: the same reading, without a step per field."""
    from gpufleet.wire import remote_write_columns

    monkeypatch.setattr(remote_write_columns, "MAX_LOCKSTEP_STEPS", steps)
    body = encode_write_request([
        ({"__name__": "up", "job": "a", "instance": "x"}, [(t, t / 2) for t in range(9)]),
        ({"__name__": "up"}, [(1, 1.0)]),
        ({"__name__": "down", "job": "b"}, [(-t, STALE_NAN) for t in range(4)])])
    samples_with_unknowns = field(1, 2, field(1, 2, field(1, 2, b"__name__")
                                              + field(2, 2, b"m"))
                                  + field(2, 2, b"".join(field(n, 0, varint(n))
                                                         for n in range(3, 12))
                                          + field(2, 0, varint(77))))
    for raw in (bytes(cramjam.snappy.decompress_raw(body)), samples_with_unknowns):
        assert via_columns(snappy(raw)) == via_upb(snappy(raw))


def test_a_series_of_many_samples_costs_no_step_per_sample():
    body = encode_write_request([({"__name__": "up"}, [(t, 1.0) for t in range(20_000)])])
    columns = decode_write_columns(body, LIMIT)
    assert len(columns) == 20_000 and columns.times_ms[-1] == 19_999


@settings(max_examples=200, deadline=None)
@given(write_requests(), st.integers(1, 4))
def test_a_short_walk_with_upb_finishing_reads_what_upb_reads(raw, steps):
    from gpufleet.wire import remote_write_columns

    kept = remote_write_columns.MAX_LOCKSTEP_STEPS
    remote_write_columns.MAX_LOCKSTEP_STEPS = steps
    try:
        body = snappy(raw)
        assert outcome(via_columns, body) == outcome(via_upb, body)
    finally:
        remote_write_columns.MAX_LOCKSTEP_STEPS = kept


# A Prometheus' steady state: series whose label blocks the decoder handed out before, one
# sample each, read from each series' last bytes (`known_blocks`) rather than walked.
prometheus_times = st.integers(2**35, 2**42 - 1)  # times whose varint is 6 bytes


@st.composite
def one_sample(draw) -> bytes:
    """Mostly what a sender writes (a value and a time of 6 varint bytes; a value of 0 left
    out), else any Sample."""
    if draw(st.booleans()):
        return draw(samples())
    value = draw(values)
    head = b"" if value == 0 and not math.copysign(1, value) < 0 else \
        field(1, 1, struct.pack("<d", value))
    return head + field(2, 0, varint(draw(prometheus_times)))


@st.composite
def known_and_again(draw) -> tuple[set[bytes], bytes]:
    """Label blocks learnt from one body, and a body of those blocks (and maybe a few
    others) with one sample each or a few."""
    first = snappy(draw(write_requests()))
    try:
        blocks = decode_write_columns(first, LIMIT).label_blocks
    except ValueError:
        blocks = []
    pool = blocks + [b"".join(draw(labels())) for _ in range(draw(st.integers(0, 1)))]
    series = []
    for block in draw(st.lists(st.sampled_from(pool), max_size=6)) if pool else []:
        sample_fields = [field(2, 2, draw(one_sample()))
                         for _ in range(draw(st.sampled_from([1, 1, 1, 0, 2])))]
        series.append(field(1, 2, block + b"".join(sample_fields)))
    return set(blocks), b"".join(series)


def via_known_columns(known: set[bytes]):
    def decode(body: bytes):
        columns = decode_write_columns(body, LIMIT, known)
        decoded = [(labels_of_block(block), []) for block in columns.label_blocks]
        for index, t, v in zip(columns.series_index.tolist(), columns.times_ms.tolist(),
                               columns.values.tolist(), strict=True):
            decoded[index][1].append((t, _bits(v)))
        return decoded
    return decode


@settings(max_examples=300, deadline=None)
@given(known_and_again())
def test_series_of_known_blocks_read_what_upb_reads(known_and_raw):
    known, raw = known_and_raw
    body = snappy(raw)
    assert outcome(via_known_columns(known), body) == outcome(via_upb, body)


@settings(max_examples=200, deadline=None)
@given(known_and_again(), st.data())
def test_a_damaged_body_of_known_blocks_is_refused_or_read_as_upb_reads_it(known_and_raw, data):
    known, raw = known_and_raw
    if not raw:
        return
    at = data.draw(st.integers(0, len(raw) - 1))
    damaged = snappy(raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:])
    mine = outcome(via_known_columns(known), damaged)
    if mine != "refused":
        assert mine == outcome(via_upb, damaged)


def test_a_steady_body_of_known_blocks_is_not_walked(monkeypatch):
    from gpufleet.wire import remote_write_columns
    series = [({"__name__": "DCGM_FI_DEV_GPU_UTIL", "UUID": f"GPU-{n}"},
               [(1_800_000_000_000 + n, float(n % 3))]) for n in range(50)]  # 0s left out
    body = encode_write_request(series)
    known = set(decode_write_columns(body, LIMIT).label_blocks)
    expected = via_upb(body)

    def no_walk(*args):
        raise AssertionError("walked")
    monkeypatch.setattr(remote_write_columns, "_columns", no_walk)
    assert via_known_columns(known)(body) == expected
    with pytest.raises(AssertionError, match="walked"):  # an unknown block: walked
        decode_write_columns(body, LIMIT, known - {min(known)})
