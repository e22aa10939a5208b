"""The remote-write codec: the spec's wire format, round trips, and every refusal."""

from __future__ import annotations

import gzip

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.wire.remote_write import (
    RemoteSeries,
    decode_write_request,
    encode_write_request,
    snappy_declared_length,
)

LIMIT = 1 << 20

# WriteRequest{timeseries: [{labels: [{__name__: up}], samples: [{value: 1.0, ts: 1000}]}]},
# written out by hand from the spec's field numbers, so the descriptor cannot drift unseen.
LABEL = b"\x0a\x08__name__\x12\x02up"
SAMPLE = b"\x09" + b"\x00\x00\x00\x00\x00\x00\xf0\x3f" + b"\x10\xe8\x07"
TIMESERIES = b"\x0a" + bytes([len(LABEL)]) + LABEL + b"\x12" + bytes([len(SAMPLE)]) + SAMPLE
WRITE_REQUEST = b"\x0a" + bytes([len(TIMESERIES)]) + TIMESERIES


def snappy(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def test_the_body_is_the_specs_protobuf_in_a_snappy_block():
    body = encode_write_request([({"__name__": "up"}, [(1000, 1.0)])])
    assert bytes(cramjam.snappy.decompress_raw(body)) == WRITE_REQUEST
    assert decode_write_request(snappy(WRITE_REQUEST), LIMIT) == \
        [RemoteSeries({"__name__": "up"}, [(1000, 1.0)])]


def test_labels_are_sent_sorted_and_empty_values_left_out():
    body = encode_write_request([([("node", "n1"), ("__name__", "m"), ("mig_uuid", "")],
                                  [(1, 2.5), (2, -1.0)])])
    (decoded,) = decode_write_request(body, LIMIT)
    assert list(decoded.labels.items()) == [("__name__", "m"), ("node", "n1")]
    assert decoded.name == "m"
    assert decoded.samples == [(1, 2.5), (2, -1.0)]


label_names = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
label_sets = st.dictionaries(label_names, st.text(min_size=1, max_size=20), max_size=5)
samples = st.lists(st.tuples(st.integers(-(2**62), 2**62),
                             st.floats(allow_nan=False)), max_size=20)


@given(st.lists(st.tuples(label_sets, samples), max_size=10))
def test_decode_gives_back_what_was_encoded(series):
    written = [({**labels, "__name__": "metric"}, points) for labels, points in series]
    decoded = decode_write_request(encode_write_request(written), 1 << 24)
    assert [(d.labels, d.samples) for d in decoded] == \
        [(dict(sorted(labels.items())), points) for labels, points in written]


def test_an_empty_request_has_no_series():
    assert decode_write_request(encode_write_request([]), LIMIT) == []


@pytest.mark.parametrize("body", [
    b"",
    b"\xff\xff\xff\xff\xff\xff",  # a length header that never ends
    gzip.compress(WRITE_REQUEST),
    b"\x10" + b"\x00" * 3,  # declares 16 bytes, holds a broken copy
    b"{\"timeseries\": []}",
], ids=["empty", "endless header", "gzip", "truncated", "json"])
def test_a_body_that_is_not_snappy_is_refused(body):
    with pytest.raises(ValueError, match="not a snappy block"):
        decode_write_request(body, LIMIT)


def test_a_body_declaring_more_than_the_limit_is_refused_before_inflating():
    bomb = snappy(b"\x00" * (8 << 20))  # 8 MiB of zeros in a few hundred kB
    assert len(bomb) < 512 << 10
    assert snappy_declared_length(bomb) == 8 << 20
    with pytest.raises(ValueError, match="over the limit of 1048576"):
        decode_write_request(bomb, LIMIT)


@pytest.mark.parametrize("raw", [
    b"\xff\xff\xff",  # not protobuf at all
    b"\x0a\x05\x0a\x03abc",  # a series whose label is cut short
    b"\x0a\x02\x12\x00",  # a series without __name__
    b"\x0a\x0f\x0a\x0d\x0a\x08__name__\x12\x01\xff",  # a label value not UTF-8
], ids=["garbage", "truncated message", "nameless series", "label not UTF-8"])
def test_a_snappy_body_that_is_not_a_write_request_is_refused(raw):
    with pytest.raises(ValueError, match="not a WriteRequest"):
        decode_write_request(snappy(raw), LIMIT)


def test_a_label_repeated_across_series_reads_the_same_in_each():
    written = [({"__name__": f"m{i}", "UUID": "GPU-1", "Hostname": "n1"}, [(i, float(i))])
               for i in range(3)]
    decoded = decode_write_request(encode_write_request(written), LIMIT)
    assert [(d.labels, d.samples) for d in decoded] == [(dict(sorted(labels.items())), points)
                                                        for labels, points in written]
