"""Prometheus remote-write 1.0: the `WriteRequest` body, protobuf in a snappy block.

One codec for both directions: the Prometheus-compatible telemetry store encodes with it
(`encode_write_request`), and the server's remote-write receiver decodes what other agents
send (`decode_write_request`). The body is the spec's `prometheus.WriteRequest`:

    WriteRequest { repeated TimeSeries timeseries = 1; }
    TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
    Label        { string name = 1; string value = 2; }
    Sample       { double value = 1; int64 timestamp = 2; }   // timestamp: epoch ms

compressed with snappy's *block* format (not the framed stream format). The message classes
are built at import from a descriptor written below, so nothing is generated or copied in
and no protoc runs at build time. Fields a newer sender adds (metadata, exemplars, native
histograms) are skipped as unknown fields.

Decoding is a boundary: the body comes from the network, so every way it can be wrong is a
`ValueError` naming the problem, and its declared decompressed size is checked against the
caller's limit before anything is inflated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from gpufleet.wire.base import BodyTooLarge

METRIC_NAME_LABEL = "__name__"
CONTENT_TYPE = "application/x-protobuf"
CONTENT_ENCODING = "snappy"
PROTOCOL_VERSION = "0.1.0"  # the X-Prometheus-Remote-Write-Version of remote-write 1.0
# Headers a remote-write 1.0 request carries besides the body.
REQUEST_HEADERS = {"Content-Encoding": CONTENT_ENCODING, "Content-Type": CONTENT_TYPE,
                   "X-Prometheus-Remote-Write-Version": PROTOCOL_VERSION}

Labels = Mapping[str, str] | Sequence[tuple[str, str]]
Points = Sequence[tuple[int, float]]  # (timestamp_ms, value)


@dataclass(slots=True)
class RemoteSeries:
    """One decoded time series: its labels (`__name__` included) and its (timestamp_ms,
    value) samples, in the order the sender wrote them."""

    labels: dict[str, str]
    samples: list[tuple[int, float]] = field(default_factory=list)

    @property
    def name(self) -> str | None:
        """The metric name (the `__name__` label); None where the sender left it out."""
        return self.labels.get(METRIC_NAME_LABEL)


def _message_classes():
    """WriteRequest and its parts, built from a descriptor in code."""
    proto = descriptor_pb2.FileDescriptorProto(
        name="gpufleet/remote_write.proto", package="prometheus", syntax="proto3")
    f = descriptor_pb2.FieldDescriptorProto
    optional, repeated = f.LABEL_OPTIONAL, f.LABEL_REPEATED

    def message(name: str, *fields: tuple[str, int, int, int, str | None]) -> None:
        m = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            added = m.field.add(name=field_name, number=number, label=label, type=kind)
            if type_name:
                added.type_name = type_name

    message("Sample", ("value", 1, optional, f.TYPE_DOUBLE, None),
            ("timestamp", 2, optional, f.TYPE_INT64, None))
    message("Label", ("name", 1, optional, f.TYPE_STRING, None),
            ("value", 2, optional, f.TYPE_STRING, None))
    message("TimeSeries", ("labels", 1, repeated, f.TYPE_MESSAGE, ".prometheus.Label"),
            ("samples", 2, repeated, f.TYPE_MESSAGE, ".prometheus.Sample"))
    message("WriteRequest",
            ("timeseries", 1, repeated, f.TYPE_MESSAGE, ".prometheus.TimeSeries"))
    # Decoding's view of the same bytes: a label left serialized (a length-delimited field
    # reads as a message or as bytes alike), so each distinct one is parsed once per body.
    message("RawTimeSeries", ("labels", 1, repeated, f.TYPE_BYTES, None),
            ("samples", 2, repeated, f.TYPE_MESSAGE, ".prometheus.Sample"))
    message("RawWriteRequest",
            ("timeseries", 1, repeated, f.TYPE_MESSAGE, ".prometheus.RawTimeSeries"))
    # A pool of our own: another library's `prometheus.*` messages cannot clash with these.
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(f"prometheus.{n}"))
                 for n in ("WriteRequest", "TimeSeries", "Label", "Sample", "RawWriteRequest",
                           "RawTimeSeries"))


# RawTimeSeries: a TimeSeries with each label left serialized (remote_write_columns.py reads
# the rare series too long for its array walk with it).
WriteRequest, TimeSeries, Label, Sample, _RawWriteRequest, RawTimeSeries = _message_classes()
# Decoding is per sample in Python; attrgetter keeps the loop in C (a third faster than a
# comprehension over the same messages).
_TIMESTAMP_VALUE = attrgetter("timestamp", "value")


class _LabelPairs(dict[bytes, tuple[str, str]]):
    """A serialized `Label` → its (name, value), parsed on first sight. A body repeats the
    same labels on every series of a GPU (UUID, Hostname, modelName, …): looked up here,
    they cost a dict hit in C instead of a message object and two strings each."""

    def __missing__(self, raw: bytes) -> tuple[str, str]:
        label = Label.FromString(raw)  # DecodeError for a label that is not one (bad UTF-8)
        pair = self[raw] = (label.name, label.value)
        return pair


def encode_write_request(series: Iterable[tuple[Labels, Points]]) -> bytes:
    """The snappy-compressed `WriteRequest` body for `series`: each is (labels, samples),
    labels a mapping or (name, value) pairs with `__name__` among them, samples
    (timestamp_ms, value) pairs in time order. Labels are sent sorted by name, as the spec
    asks; a label with an empty value is left out (Prometheus treats it as absent)."""
    timeseries = []
    for labels, points in series:
        pairs = labels.items() if isinstance(labels, Mapping) else labels
        timeseries.append(TimeSeries(
            labels=[Label(name=n, value=v) for n, v in sorted(pairs) if v != ""],
            samples=[Sample(timestamp=t, value=v) for t, v in points]))
    body = WriteRequest(timeseries=timeseries).SerializeToString()
    return bytes(cramjam.snappy.compress_raw(body))


def decompressed_body(body: bytes, max_bytes: int) -> bytes:
    """A remote-write body's snappy block, inflated: `BodyTooLarge` when it declares more
    than `max_bytes` (checked before inflating anything), `ValueError` when it is not a
    snappy block. Both decoders start here."""
    declared = snappy_declared_length(body)
    if declared > max_bytes:
        raise BodyTooLarge(f"remote-write body declares {declared} bytes decompressed, over "
                           f"the limit of {max_bytes}")
    try:
        return bytes(cramjam.snappy.decompress_raw(body))
    except cramjam.DecompressionError as error:
        raise ValueError(f"remote-write body is not a snappy block: {error}") from None


def decode_write_request(body: bytes, max_bytes: int) -> list[RemoteSeries]:
    """The series of a snappy-compressed `WriteRequest` body.

    Refuses with `ValueError` a body that is not a snappy block, one that declares (or
    inflates to) more than `max_bytes` decompressed (`BodyTooLarge`), and one that is not
    a WriteRequest.
    Every series must carry a `__name__` label (the spec's MUST)."""
    raw = decompressed_body(body, max_bytes)
    request = _RawWriteRequest()
    pairs = _LabelPairs()
    decoded = []
    try:
        request.ParseFromString(raw)
        for ts in request.timeseries:
            labels = dict(map(pairs.__getitem__, ts.labels))
            if METRIC_NAME_LABEL not in labels:
                raise ValueError("remote-write body is not a WriteRequest: a series without "
                                 f"a {METRIC_NAME_LABEL} label")
            decoded.append(RemoteSeries(labels, list(map(_TIMESTAMP_VALUE, ts.samples))))
    except DecodeError as error:
        raise ValueError(f"remote-write body is not a WriteRequest: {error}") from None
    return decoded


def snappy_declared_length(body: bytes) -> int:
    """The decompressed length a snappy block declares in its header (a little-endian
    base-128 varint of at most 32 bits), read without decompressing anything."""
    length = 0
    for position, byte in enumerate(body[:5]):
        length |= (byte & 0x7F) << (7 * position)
        if not byte & 0x80:
            return length
    raise ValueError("remote-write body is not a snappy block: no length header")
