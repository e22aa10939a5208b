"""The remote-write receiver's direct path (series → store columns) against the path it
replaced: each instant's series read into a `NodeSnapshot` by the dcgm-exporter backend
(`snapshot_from_samples`), the snapshots made one batch (`columnar`), the batch checked
into columns (`batch_columns`). On the same body both must store exactly the same samples
and count exactly the same drops."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.agent.dcgm_exporter import UUID_LABELS, snapshot_from_samples
from gpufleet.agent.prometheus_text import Sample
from gpufleet.domain.telemetry.sources import DCGM_INT32_BLANK, DCGM_INT64_BLANK
from gpufleet.services.inventory.node_units import NodeUnits
from gpufleet.services.telemetry.batch_columns import TimeWindow, batch_columns
from gpufleet.services.telemetry.remote_write_ingest import (
    remote_write_columns,
    steady_columns,
)
from gpufleet.services.telemetry.remote_write_plans import SeriesPlans
from gpufleet.wire.remote_write import RemoteSeries, decode_write_request, encode_write_request
from gpufleet.wire.remote_write_columns import decode_write_columns
from gpufleet.wire.telemetry_batch import columnar

T0 = 1_800_000_000_000  # epoch ms
WINDOW = TimeWindow(T0 - 3_600_000, T0 + 60_000)
GPU_A, GPU_B, GPU_M = "GPU-aaaa", "GPU-bbbb", "GPU-mmmm"  # node-1's (M: MIG mode)
GPU_OTHER = "GPU-2222"  # node-2's
GPU_UNKNOWN = "GPU-9999"  # no node has registered it
INVENTORY = {"node-1": {GPU_A: ("prod", "H100"), GPU_B: ("prod", "H100"),
                        GPU_M: ("prod", "A100")},
             "node-2": {GPU_OTHER: ("dev", "L4")}}
OWNERS = {gpu: node for node, gpus in INVENTORY.items() for gpu in gpus}


def dcgm(name: str, gpu: str | None, samples, host: str | None = "node-1",
         **labels: str) -> tuple[dict[str, str], list[tuple[int, float]]]:
    base = {"__name__": name, "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3",
            "job": "dcgm-exporter", **labels}
    if gpu is not None:
        base["UUID"] = gpu
    if host is not None:
        base["Hostname"] = host
    return base, samples


def one(value: float, at: int = T0) -> list[tuple[int, float]]:
    return [(at, value)]


POD = {"pod": "train-0", "namespace": "ml", "container": "main"}
MIG_1 = {"GPU_I_ID": "1", "GPU_I_PROFILE": "1g.10gb"}
MIG_3 = {"GPU_I_ID": "3", "GPU_I_PROFILE": "3g.40gb"}

VARIED = [
    # A whole GPU with one pod: its claim is stored; two times in one series.
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_A, [(T0, 40.0), (T0 + 15_000, 45.0)], **POD),
    dcgm("DCGM_FI_PROF_SM_ACTIVE", GPU_A, one(0.25), **POD),  # a 0–1 ratio → percent
    dcgm("DCGM_FI_DEV_FB_USED", GPU_A, one(1024.0), **POD),  # MiB → bytes
    dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_A, one(float(DCGM_INT32_BLANK + 1)), **POD),  # blank
    dcgm("DCGM_FI_DEV_POWER_USAGE", GPU_A, one(float(DCGM_INT64_BLANK)), **POD),  # blank
    dcgm("DCGM_FI_DEV_MEM_CLOCK", GPU_A, one(math.nan), **POD),
    dcgm("DCGM_FI_DEV_SM_CLOCK", GPU_A, [(T0, 1500.0), (T0, 1600.0)], **POD),  # same time
    dcgm("DCGM_FI_DEV_FAN_SPEED", GPU_A, one(140.0), **POD),  # out of range
    dcgm("DCGM_FI_DEV_MEMORY_TEMP", GPU_A, one(50.0, T0 - 7_200_000), **POD),  # too old
    dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", GPU_A, one(3.0, T0 + 600_000), **POD),  # future
    # Per-link NVLink names keep their link; XID errors keep their xid.
    dcgm("DCGM_FI_PROF_NVLINK_L0_TX_BYTES", GPU_A, one(1e9), **POD),
    dcgm("DCGM_FI_PROF_NVLINK_L3_RX_BYTES", GPU_A, one(2e9), **POD),
    dcgm("DCGM_EXP_XID_ERRORS_TOTAL", GPU_A, one(1.0), xid="79", **POD),
    dcgm("DCGM_EXP_XID_ERRORS_TOTAL", GPU_A, one(2.0), xid="", **POD),  # no xid: unusable
    # A GPU shared by two pods of one namespace: the copies of a series are one sample (the
    # first number wins), and only the namespace is claimed.
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_B, one(float(DCGM_INT64_BLANK + 2)), pod="a",
         namespace="ml"),
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_B, one(70.0), pod="a", namespace="ml"),
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_B, one(80.0), pod="b", namespace="ml"),
    dcgm("DCGM_FI_DEV_FB_FREE", GPU_B, one(10.0), pod="b", namespace="ml"),
    # MIG instances: per-instance metrics stay the instance's, device-only ones go to the
    # parent GPU; an HPC job on one instance; a GPU_I_ID that is not a number is ignored.
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_M, one(0.5), **MIG_1, hpc_job="1234"),
    dcgm("DCGM_FI_DEV_FB_USED", GPU_M, one(2048.0), **MIG_1, hpc_job="1234"),
    dcgm("DCGM_FI_DEV_POWER_USAGE", GPU_M, one(180.0), **MIG_1, hpc_job="1234"),
    dcgm("DCGM_FI_DEV_POWER_USAGE", GPU_M, one(190.0), **MIG_3),
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_M, one(0.9), **MIG_3),
    dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_M, one(40.0)),
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_M, one(0.1), GPU_I_ID="x"),
    # dcgm-exporter's --use-old-namespace spelling of the UUID label.
    ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "uuid": GPU_B, "Hostname": "node-1"}, one(33.0)),
    # Dropped and counted: unknown DCGM series (ignored), not dcgm-exporter's, a GPU the
    # inventory does not have.
    dcgm("DCGM_FI_DEV_SOMETHING_NEW", GPU_A, one(1.0)),
    ({"__name__": "up", "job": "dcgm-exporter"}, one(1.0)),
    dcgm("DCGM_FI_DEV_GPU_UTIL", None, one(5.0)),
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_UNKNOWN, [(T0, 5.0), (T0 + 1, 6.0)], host="node-9"),
    # node-2's GPU goes to node-2 whatever its Hostname says: a dcgm-exporter pod's name (in
    # Kubernetes without NODE_NAME), another node's name, none.
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_OTHER, one(12.0), host="dcgm-exporter-6ldbb", pod="x"),
    dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_OTHER, one(41.0)),
    dcgm("DCGM_FI_DEV_FB_USED", GPU_OTHER, one(64.0), host=None),
    dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_OTHER, one(math.nan), host="node-2"),
]
ONLY_BLANKS = [dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_OTHER, one(math.nan))]
EMPTY_SERIES = [dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_A, [], host="node-9"),
                dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_A, [])]


def units_of(node: str) -> NodeUnits | None:
    gpus = INVENTORY.get(node)
    return None if gpus is None else NodeUnits(node, dict(gpus))


def through_snapshots(series: list[RemoteSeries], window: TimeWindow):
    """The receiver as it was: per node and time a `NodeSnapshot`, one batch, its columns."""
    outcome: Counter[str] = Counter()
    by_node: dict[str, dict[int, list[Sample]]] = defaultdict(lambda: defaultdict(list))
    for s in series:
        name = s.name or ""
        if not name.startswith("DCGM_") or not any(s.labels.get(k) for k in UUID_LABELS):
            outcome["not_dcgm"] += len(s.samples)
            continue
        node = OWNERS.get(s.labels.get("UUID") or s.labels.get("uuid"))
        if not node:
            outcome["unknown_gpu"] += len(s.samples)
            continue
        for ms, value in s.samples:
            by_node[node][ms].append(Sample(name, s.labels, value))
    columns = {}
    for node, by_time in sorted(by_node.items()):
        units = units_of(node)
        if units is None:
            outcome["unknown_node"] += sum(len(samples) for samples in by_time.values())
            continue
        batch = columnar("rw-test", [
            snapshot_from_samples(samples, node, datetime.fromtimestamp(ms / 1000, UTC))
            for ms, samples in sorted(by_time.items())])
        foreign = {key.gpu_uuid for key in batch.series} - units.gpus.keys()
        if foreign:
            rows = list(zip(batch.series, batch.values, strict=True))
            outcome["foreign_gpu"] += sum(1 for key, row in rows if key.gpu_uuid in foreign
                                          for v in row if v is not None)
            batch = batch.model_copy(update={
                "series": [k for k, _ in rows if k.gpu_uuid not in foreign],
                "values": [r for k, r in rows if k.gpu_uuid not in foreign],
                "unit_claims": [c for c in batch.unit_claims if c.gpu_uuid not in foreign]})
        columns[node] = batch_columns(batch, units, window)
    return columns, outcome


def samples_of(columns) -> Counter:
    """The columns as a multiset of (series, time, value): the store ignores their order."""
    return Counter((columns.series[i], t, v) for i, t, v in zip(
        columns.series_index, columns.times_ms, columns.values, strict=True))


def direct_path(body: bytes, plans: SeriesPlans | None = None):
    """The receiver's path: columns (label blocks planned by an earlier body read by the
    decoder's shortcut, as the receiver reads them), each series' plan, the node columns."""
    plans = SeriesPlans() if plans is None else plans
    columns = decode_write_columns(body, 10_000_000, plans.known_blocks)
    return remote_write_columns(columns, plans.plans_of(columns.label_blocks), OWNERS,
                                units_of, WINDOW)


def both_paths(series, plans: SeriesPlans | None = None):
    body = encode_write_request(series)
    decoded = decode_write_request(body, 10_000_000)
    direct, direct_outcome = direct_path(body, plans)
    before, before_outcome = through_snapshots(decoded, WINDOW)
    return (({node: (samples_of(c), d) for node, (c, d) in direct.items()}, direct_outcome),
            ({node: (samples_of(c), d) for node, (c, d) in before.items()}, before_outcome))


@pytest.mark.parametrize("series", [VARIED, ONLY_BLANKS, EMPTY_SERIES, []],
                         ids=["varied", "only-blanks", "empty-series", "empty"])
def test_the_direct_path_stores_and_counts_exactly_what_the_snapshot_path_did(series):
    direct, before = both_paths(series)
    assert direct == before


SHARED_PLANS = SeriesPlans(max_series=25)  # smaller than VARIED: filled and emptied


@pytest.mark.parametrize("max_series", [1, 25, 10_000])
def test_plans_kept_from_earlier_bodies_store_what_fresh_ones_do(max_series):
    plans = SeriesPlans(max_series=max_series)
    first = both_paths(VARIED, plans)
    again = both_paths(VARIED, plans)
    assert first[0] == first[1] == again[0]
    assert len(plans) <= max_series


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VARIED), max_size=12), st.integers(0, 3))
def test_any_mix_of_series_is_stored_as_the_snapshot_path_stores_it(series, shift):
    """Series in any order and number (repeats: a series sent twice in one body), the
    plans shared with earlier bodies; times moved so that bodies differ."""
    moved = [(labels, [(t + shift * 1000, v) for t, v in samples])
             for labels, samples in series]
    direct, before = both_paths(moved, SHARED_PLANS)
    assert direct == before


def test_the_varied_body_exercises_every_rule():
    (by_node, outcome), _ = both_paths(VARIED)
    assert outcome == Counter(not_dcgm=2, unknown_gpu=2)
    samples, dropped = by_node["node-1"]
    # The pod's claim at the too-old and the future time is dropped with the sample.
    assert dropped == Counter(out_of_range=1, too_old=2, in_future=2)
    stored = {(s.metric, s.gpu_uuid, s.mig_uuid, s.labels, t): v for s, t, v in samples}
    mig_1, mig_3 = f"{GPU_M}/gi/1", f"{GPU_M}/gi/3"
    assert stored[("gpu.sm_active", GPU_A, None, (), T0)] == 25.0
    assert stored[("gpu.memory_used_bytes", GPU_A, None, (), T0)] == 1024.0 * 1024**2
    assert stored[("gpu.sm_clock_mhz", GPU_A, None, (), T0)] == 1500.0
    assert stored[("gpu.utilization", GPU_A, None, (), T0 + 15_000)] == 45.0
    assert stored[("gpu.nvlink_link_rx_bytes_per_second", GPU_A, None, (("link", "3"),),
                   T0)] == 2e9
    assert stored[("gpu.xid_errors_total", GPU_A, None, (("xid", "79"),), T0)] == 1.0
    assert stored[("gpu.utilization", GPU_B, None, (), T0)] == 70.0
    assert stored[("gpu.gr_engine_active", GPU_M, mig_1, (), T0)] == 50.0
    assert stored[("gpu.gr_engine_active", GPU_M, mig_3, (), T0)] == 90.0
    assert stored[("gpu.power_usage_watts", GPU_M, None, (), T0)] == 180.0  # first wins
    assert ("gpu.power_usage_watts", GPU_M, mig_1, (), T0) not in stored
    assert ("gpu.temperature_celsius", GPU_A, None, (), T0) not in stored  # a DCGM blank
    claims = {(gpu, mig, labels) for metric, gpu, mig, labels, _ in stored
              if metric == "gpu.workload_claimed"}
    assert claims == {
        (GPU_A, None, (("container", "main"), ("namespace", "ml"), ("pod", "train-0"))),
        (GPU_B, None, (("namespace", "ml"),)),
        (GPU_M, mig_1, (("slurm_job", "1234"),))}
    node_2 = {(s.metric, dict(s.labels).get("pod")): v for s, _, v in by_node["node-2"][0]}
    assert node_2 == {("gpu.utilization", None): 12.0, ("gpu.temperature_celsius", None): 41.0,
                      ("gpu.memory_used_bytes", None): 64.0 * 1024**2,
                      ("gpu.workload_claimed", "x"): 1.0}
    assert by_node["node-2"][1] == Counter()  # the NaN copy came after a number: ignored


# A Prometheus' steady state: one sample a series, no workload labels, every value storable
# or blank. Built as whole columns (`steady_columns`); each of BREAKS_STEADY makes a body
# the general path's instead.
STEADY = [
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_A, one(40.0)),
    dcgm("DCGM_FI_PROF_SM_ACTIVE", GPU_A, one(0.25)),
    dcgm("DCGM_FI_DEV_FB_USED", GPU_A, one(1024.0)),
    dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_A, one(float(DCGM_INT32_BLANK + 1))),  # blank
    dcgm("DCGM_FI_DEV_MEM_CLOCK", GPU_A, one(math.nan)),  # no value
    dcgm("DCGM_FI_PROF_NVLINK_L3_RX_BYTES", GPU_A, one(2e9)),
    dcgm("DCGM_EXP_XID_ERRORS_TOTAL", GPU_A, one(1.0), xid="79"),
    dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_M, one(0.5), **MIG_1),
    dcgm("DCGM_FI_DEV_POWER_USAGE", GPU_M, one(190.0), **MIG_3),
    ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "uuid": GPU_B, "Hostname": "node-1"}, one(33.0)),
    dcgm("DCGM_FI_DEV_GPU_TEMP", GPU_OTHER, one(41.0), host="node-2"),
    dcgm("DCGM_FI_DEV_FB_USED", GPU_OTHER, one(64.0), host=None),
]
BREAKS_STEADY = [
    dcgm("DCGM_FI_DEV_FAN_SPEED", GPU_A, one(140.0)),  # out of range
    dcgm("DCGM_FI_DEV_MEMORY_TEMP", GPU_A, one(50.0, T0 - 7_200_000)),  # too old
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_A, [(T0, 40.0), (T0 + 15_000, 45.0)]),  # two samples
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_B, one(70.0), pod="a", namespace="ml"),  # a workload
    dcgm("DCGM_FI_DEV_POWER_USAGE", GPU_M, one(180.0), **MIG_1),  # MIG_3's row: first wins
    dcgm("DCGM_FI_DEV_GPU_UTIL", GPU_UNKNOWN, one(5.0), host="node-9"),
    dcgm("DCGM_FI_DEV_SOMETHING_NEW", GPU_A, one(1.0)),
    ({"__name__": "up", "job": "dcgm-exporter"}, one(1.0)),
]


def steady_of(series, owners=OWNERS):
    columns = decode_write_columns(encode_write_request(series), 10_000_000)
    plans = SeriesPlans().plans_of(columns.label_blocks)
    codes = np.array([p.encoding_code for p in plans], np.int8)
    scales = np.array([p.scale for p in plans], np.float64)
    return steady_columns(columns, plans, owners, units_of, WINDOW, codes, scales)


def test_a_steady_body_is_built_whole_and_stored_as_the_snapshot_path_stores_it():
    assert steady_of(STEADY) is not None
    plans = SeriesPlans()
    for _ in range(2):  # the second body's known label blocks take the decoder's shortcut
        direct, before = both_paths(STEADY, plans)
        assert direct == before
        assert sum(len(c) for c, _ in direct[0].values()) == len(STEADY) - 2  # two blanks


@pytest.mark.parametrize("breaker", BREAKS_STEADY)
def test_a_body_with_anything_else_goes_the_general_way(breaker):
    assert steady_of([*STEADY, breaker]) is None
    direct, before = both_paths([*STEADY, breaker])
    assert direct == before


def test_a_gpu_its_node_no_longer_holds_sends_the_body_the_general_way():
    moved = {**OWNERS, GPU_OTHER: "node-1"}  # the owners memo is behind the inventory
    assert steady_of(STEADY, moved) is None
    body = encode_write_request(STEADY)
    columns = decode_write_columns(body, 10_000_000)
    by_node, outcome = remote_write_columns(
        columns, SeriesPlans().plans_of(columns.label_blocks), moved, units_of, WINDOW)
    assert outcome == Counter(foreign_gpu=2) and set(by_node) == {"node-1"}


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(STEADY + BREAKS_STEADY[:2] + BREAKS_STEADY[4:5]), max_size=14),
       st.integers(0, 3))
def test_any_steady_mix_is_stored_as_the_snapshot_path_stores_it(series, shift):
    moved = [(labels, [(t + shift * 1000, v) for t, v in samples])
             for labels, samples in series]
    direct, before = both_paths(moved, SHARED_PLANS)
    assert direct == before
