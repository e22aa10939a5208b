"""The telemetry upload format: columnar, compressed, and the same snapshots on arrival."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpufleet.wire.telemetry import (
    LabelledValue,
    NodeSnapshot,
    ProcessSnapshot,
    UnitSnapshot,
)
from gpufleet.wire.telemetry_batch import columnar, decode, encode, snapshots

GPU = "GPU-00000000-0000-0000-0000-000000000001"
START = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def tick(n: int, sm_active: float | None) -> NodeSnapshot:
    gpu = UnitSnapshot(
        gpu_uuid=GPU, values={"gpu.sm_active": sm_active, "gpu.power_usage_watts": 300.0 + n},
        labelled=(LabelledValue(metric="gpu.xid_errors_total", labels={"xid": "79"},
                                value=float(n)),),
        processes=(ProcessSnapshot(pid=100 + n, name="python",
                                   values={"process.memory_used_bytes": 2e9},
                                   claimed_allocation="GR-1042"),))
    instance = UnitSnapshot(gpu_uuid=GPU, mig_uuid="MIG-1", mig_profile="1g.10gb",
                            gpu_instance_id=7, values={"gpu.memory_used_bytes": 1e9},
                            pod="trainer-0", namespace="vision")
    return NodeSnapshot(node="node-1", at=START + timedelta(seconds=10 * n), backend="sim",
                        units=(gpu, instance))


def test_a_batch_carries_each_series_once_and_arrives_as_the_same_snapshots():
    sent = [tick(0, 55.0), tick(1, None), tick(2, 70.0)]
    batch = columnar("b-1", sent)
    assert len(batch.series) == 4 and batch.times_ms[1] - batch.times_ms[0] == 10_000
    sm = next(row for key, row in zip(batch.series, batch.values, strict=True)
              if key.metric == "gpu.sm_active")
    assert sm == [55.0, None, 70.0]  # None stays None, never 0
    arrived = snapshots(decode(encode(batch), max_bytes=1_000_000))
    assert arrived == sent


def test_the_wire_form_is_gzip_and_smaller_than_the_rows():
    sent = [tick(n, 50.0 + n) for n in range(30)]
    payload = encode(columnar("b-2", sent))
    rows = sum(len(s.model_dump_json()) for s in sent)
    assert gzip.decompress(payload).startswith(b"{") and len(payload) < rows / 10


@pytest.mark.parametrize(("payload", "problem"), [
    (b"not gzip at all", "not gzip"),
    (gzip.compress(b"{not json"), "not JSON"),
    (gzip.compress(b" " * 2000), "larger than"),
    (gzip.compress(b"{}") + gzip.compress(b"{}"), "second gzip member"),
    (gzip.compress(b'{"node": "a\\u0000b"}'), "node: text may not contain NUL"),
])
def test_a_malformed_body_is_named(payload, problem):
    with pytest.raises(ValueError, match=problem):
        decode(payload, max_bytes=1000)


def test_a_batch_whose_columns_do_not_line_up_is_refused():
    batch = columnar("b-3", [tick(0, 1.0)]).model_dump()
    batch["values"][0].append(2.0)
    with pytest.raises(ValidationError, match="entries for 1 ticks"):
        decode(gzip.compress(json.dumps(batch).encode()), max_bytes=10**6)


def test_one_batch_holds_one_nodes_snapshots():
    other = tick(1, 1.0).model_copy(update={"node": "node-2"})
    with pytest.raises(ValueError, match="one node"):
        columnar("b-4", [tick(0, 1.0), other])
