"""Telemetry ingest through the real app: what is stored, what is dropped and counted, what
is refused as a whole — and that nothing is acknowledged before it is stored."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta

import pytest

from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from gpufleet.wire.remote_write import encode_write_request
from gpufleet.wire.telemetry import (
    LabelledValue,
    NodeSnapshot,
    ProcessSnapshot,
    UnitSnapshot,
)
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, columnar, encode
from tests.conftest import START
from tests.helpers import create_environment, gpu_uuid, register

SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)
GPU_A, GPU_B = gpu_uuid(1, 0), gpu_uuid(1, 1)


@pytest.fixture
def node(api):
    """Node 1 (node-1, two H100s) registered; the API as its agent."""
    create_environment(api)
    reply = register(api, 1, gpus=2)
    return api.as_(reply["credential"])


def snapshot(seconds: float, *units: UnitSnapshot, node: str = "node-1") -> NodeSnapshot:
    return NodeSnapshot(node=node, at=START + timedelta(seconds=seconds), backend="sim",
                        units=units)


def unit(gpu: str = GPU_A, **values) -> UnitSnapshot:
    return UnitSnapshot(gpu_uuid=gpu, values={k.replace("__", "."): v
                                              for k, v in values.items()})


def body(*snapshots: NodeSnapshot, batch_id: str = "b1") -> bytes:
    return encode(columnar(batch_id, snapshots))


def post(api, payload: bytes):
    return api.post(TELEMETRY_BATCHES_PATH, content=payload,
                    headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})


def stored(gf: Gpufleet, metric: str) -> list[tuple[str, float]]:
    return sorted((v.series.gpu_uuid, v.value) for v in gf.telemetry.latest(metric=metric))


def test_a_batch_is_stored_with_its_gpus_environment_and_model_then_acknowledged(node, gf):
    response = post(node, body(snapshot(0, unit(gpu__sm_active=40.0)),
                               snapshot(10, unit(gpu__sm_active=60.0),
                                        unit(GPU_B, gpu__sm_active=5.0))))
    assert response.status_code == 200, response.text
    assert response.json() == {"batch_id": "b1", "duplicate": False, "samples_stored": 3,
                               "dropped": {}}
    latest = {v.series.gpu_uuid: v for v in gf.telemetry.latest(metric="gpu.sm_active")}
    assert latest[GPU_A].value == 60.0 and latest[GPU_B].value == 5.0
    assert (latest[GPU_A].series.node, latest[GPU_A].series.environment,
            latest[GPU_A].series.model) == ("node-1", "onprem-hpc", "H100-80GB")


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_a_replayed_batch_is_acknowledged_as_duplicate_and_not_counted_twice(node, gf):
    payload = body(snapshot(0, unit(gpu__power_usage_watts=300.0)))
    assert post(node, payload).json()["duplicate"] is False
    again = post(node, payload)
    assert again.status_code == 200
    assert again.json() == {"batch_id": "b1", "duplicate": True, "samples_stored": 0,
                            "dropped": {}}
    result = gf.telemetry.query_range("gpu.power_usage_watts", START,
                                      START + timedelta(minutes=1), timedelta(minutes=1))
    assert [v for _, v in result[0].points] == [300.0]  # summed across series: one sample
    counters = gf.ingest.counters
    assert (counters.batches["stored"], counters.batches["duplicate"]) == (1, 1)


@SQLITE_ONLY
def test_bad_samples_are_dropped_and_counted_and_the_rest_is_stored(node, gf, clock):
    far_past, far_future = -8 * 86400, 3600
    mig = UnitSnapshot(gpu_uuid=GPU_B, mig_uuid="MIG-1", mig_profile="1g.10gb",
                       values={"gpu.sm_active": 20.0, "gpu.temperature_celsius": 50.0})
    batch = columnar("b1", [
        snapshot(far_past, unit(gpu__sm_active=1.0)),
        snapshot(0, unit(gpu__sm_active=0.0, gpu__utilization=150.0,
                         gpu__memory_used_bytes=-1.0, gpu__temperature_celsius=40.0,
                         gpu__no_such_metric=1.0), mig),
        snapshot(far_future, unit(gpu__sm_active=2.0))])
    raw = batch.model_dump()
    row = next(n for n, key in enumerate(batch.series)
               if key.metric == "gpu.sm_active" and key.mig_uuid is None)
    raw["values"][row][1] = float("nan")  # pydantic would send null; a foreign client NaN
    response = post(node, gzip.compress(json.dumps(raw).encode()))
    assert response.status_code == 200, response.text
    ack = response.json()
    assert ack["dropped"] == {"too_old": 1, "in_future": 1, "not_finite": 1,
                              "out_of_range": 2, "unknown_metric": 1, "wrong_scope": 1}
    assert ack["samples_stored"] == 2
    assert stored(gf, "gpu.temperature_celsius") == [(GPU_A, 40.0)]  # not the MIG one
    mig_series = gf.telemetry.latest(metric="gpu.sm_active")[0].series
    assert (mig_series.gpu_uuid, mig_series.mig_uuid, mig_series.labels) == (GPU_B, "MIG-1", ())
    assert gf.ingest.counters.samples_dropped["out_of_range"] == 2


@SQLITE_ONLY
def test_processes_and_unit_claims_become_series_with_their_claims_as_labels(node, gf):
    process = ProcessSnapshot(pid=4242, name="python", container="c0ffee", pod="trainer-0",
                              namespace="ml", claimed_allocation="GR-1001",
                              tags={"model": "llama"},
                              values={"process.memory_used_bytes": 2.0 * 1024**3,
                                      "process.sm_utilization": 80.0})
    claimed = UnitSnapshot(gpu_uuid=GPU_B, pod="server-1", namespace="serving",
                           values={"gpu.sm_active": 10.0})
    with_process = UnitSnapshot(gpu_uuid=GPU_A, processes=(process,),
                                labelled=(LabelledValue(metric="gpu.xid_errors_total",
                                                        labels={"xid": "79"}, value=1.0),))
    response = post(node, body(snapshot(0, with_process, claimed)))
    assert response.status_code == 200, response.text
    assert response.json()["samples_stored"] == 5
    memory = gf.telemetry.latest(metric="process.memory_used_bytes")[0]
    assert dict(memory.series.labels) == {
        "pid": "4242", "process_name": "python", "container": "c0ffee", "pod": "trainer-0",
        "namespace": "ml", "claimed_allocation": "GR-1001", "tag.model": "llama"}
    claim = gf.telemetry.latest(metric="gpu.workload_claimed")[0]
    assert (claim.series.gpu_uuid, dict(claim.series.labels), claim.value) == (
        GPU_B, {"pod": "server-1", "namespace": "serving"}, 1.0)
    xid = gf.telemetry.latest(metric="gpu.xid_errors_total")[0]
    assert dict(xid.series.labels) == {"xid": "79"}


@SQLITE_ONLY
def test_a_node_writes_only_its_own_gpus_and_its_own_name(node, api, gf):
    register(api, 2, gpus=1)
    foreign = post(node, body(snapshot(0, unit(gpu__sm_active=1.0),
                                       unit(gpu_uuid(2, 0), gpu__sm_active=1.0))))
    assert foreign.status_code == 409  # the registration's inventory, not a permission
    assert foreign.json()["error"]["code"] == "foreign_gpus"
    assert foreign.json()["error"]["details"]["gpus"] == [gpu_uuid(2, 0)]
    other_name = post(node, body(snapshot(0, unit(gpu_uuid(2, 0), gpu__sm_active=1.0),
                                          node="node-2")))
    assert other_name.status_code == 403
    assert other_name.json()["error"]["code"] == "foreign_node"
    assert gf.telemetry.latest() == []  # nothing of either batch was stored
    assert gf.ingest.counters.refusals == {"foreign_gpus": 1, "foreign_node": 1}


@SQLITE_ONLY
def test_ingest_tokens_write_for_known_nodes_and_other_roles_may_not_write(node, api, gf):
    token = api.post("/api/v1/tokens", json={"name": "relay", "role": "ingest"}).json()["token"]
    relay = api.as_(token)
    assert post(relay, body(snapshot(0, unit(gpu__sm_active=1.0)))).status_code == 200
    unknown = post(relay, body(snapshot(0, unit(gpu__sm_active=1.0), node="node-9"),
                               batch_id="b2"))
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "unknown_node"
    assert post(api, body(snapshot(0, unit(gpu__sm_active=1.0)))).status_code == 403


@SQLITE_ONLY
@pytest.mark.parametrize(("payload", "code", "named"), [
    (b"not gzip at all", "malformed_batch", "gzip"),
    (gzip.compress(b"{not json"), "malformed_batch", "JSON"),
    (gzip.compress(json.dumps({"batch_id": "b1", "node": "node-1", "backend": "sim",
                               "times_ms": [1], "series": [], "values": [[1.0]]}).encode()),
     "invalid_batch", "values has 1 rows for 0 series"),
    (gzip.compress(json.dumps({"batch_id": "no spaces allowed", "node": "node-1",
                               "backend": "sim", "times_ms": [1], "series": [],
                               "values": []}).encode()),
     "invalid_batch", "batch_id"),
    (body(snapshot(0, unit(gpu__sm_active=1.0))) + body(snapshot(10, unit(gpu__sm_active=2.0)),
                                                        batch_id="b2"),
     "malformed_batch", "second gzip member"),
    (body(snapshot(0, unit(gpu__sm_active=1.0))) + b"trailing", "malformed_batch", "after"),
    (encode(columnar("b1", [snapshot(0, UnitSnapshot(gpu_uuid=GPU_A, processes=(
        ProcessSnapshot(pid=7, name="py\x00thon", values={"process.sm_utilization": 1.0}),
    )))])), "nul_character", "processes[0].name"),
])
def test_a_malformed_batch_is_refused_naming_the_problem(node, gf, payload, code, named):
    response = post(node, payload)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == code and named in error["message"]
    assert gf.ingest.counters.refusals == {code: 1}
    assert gf.telemetry.latest() == []  # nothing of it was stored


@pytest.fixture
def small_limits(settings) -> Settings:
    return settings.model_copy(update={"telemetry_max_batch_bytes": 2048,
                                       "telemetry_max_batch_uncompressed_bytes": 4096})


@SQLITE_ONLY
def test_oversized_bodies_are_refused_before_and_after_decompression(store, small_limits,
                                                                    clock):
    from fastapi.testclient import TestClient

    from gpufleet.api.app import create_app
    from gpufleet.server import bootstrap_admin_token
    from tests.conftest import Api

    small = Gpufleet(store, small_limits, clock)
    with TestClient(create_app(small, background_loops=False)) as client:
        api = Api(client, bootstrap_admin_token(small, small_limits.data_dir / "admin-token"))
        create_environment(api)
        agent = api.as_(register(api, 1, gpus=2)["credential"])
        bomb = gzip.compress(b" " * 100_000)  # ~100 bytes on the wire, 100 kB inflated
        inflated = post(agent, bomb)
        assert inflated.status_code == 413
        assert inflated.json()["error"]["code"] == "batch_too_large"
        too_big = post(agent, bytes(3000))
        assert too_big.status_code == 413
        assert too_big.json()["error"]["code"] == "payload_too_large"


class _BrokenStore(DuckDBTelemetryStore):
    def write_columns(self, batches):
        raise OSError("disk full")


@SQLITE_ONLY
def test_a_batch_the_store_cannot_take_is_not_acknowledged(store, settings, clock, tmp_path):
    from fastapi.testclient import TestClient

    from gpufleet.api.app import create_app
    from gpufleet.server import bootstrap_admin_token
    from tests.conftest import Api

    broken = Gpufleet(store, settings, clock, telemetry=_BrokenStore(":memory:"))
    with TestClient(create_app(broken, background_loops=False)) as client:
        api = Api(client, bootstrap_admin_token(broken, tmp_path / "admin-token"))
        create_environment(api)
        agent = api.as_(register(api, 1, gpus=1)["credential"])
        response = post(agent, body(snapshot(0, unit(gpu__sm_active=1.0))))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "telemetry_store_unavailable"


@SQLITE_ONLY
def test_upkeep_rolls_minutes_up_once_their_grace_has_passed(node, gf, clock, settings):
    assert post(node, body(snapshot(0, unit(gpu__sm_active=20.0)),
                           snapshot(30, unit(gpu__sm_active=40.0)))).status_code == 200

    def minute_tier() -> list[float]:
        """The 1-minute rollup rows themselves (a query would read raw rows where the
        rollup has not reached yet)."""
        return [v for (v,) in gf.telemetry._con.execute(
            "SELECT v_mean FROM rollup_1m").fetchall()]

    clock.advance(60 + settings.telemetry_rollup_grace_s - 1)  # the minute is still open
    gf.telemetry_upkeep()
    assert minute_tier() == []
    clock.advance(2)
    gf.telemetry_upkeep()
    assert minute_tier() == [30.0]


# --- Prometheus remote-write ---------------------------------------------------------------

REMOTE_WRITE = "/api/v1/telemetry/remote-write"


def dcgm_series(name: str, gpu: str, host: str | None, samples, **labels):
    base = {"__name__": name, "UUID": gpu, "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3",
            **labels}
    if host is not None:
        base["Hostname"] = host
    return base, samples


@pytest.fixture
def relay(node, api):
    register(api, 2, gpus=1)
    token = api.post("/api/v1/tokens", json={"name": "prom", "role": "ingest"}).json()["token"]
    return api.as_(token)


def push(api, series):
    return api.post(REMOTE_WRITE, content=encode_write_request(series),
                    headers={"Content-Type": "application/x-protobuf",
                             "Content-Encoding": "snappy"})


@SQLITE_ONLY
def test_remote_write_maps_dcgm_exporter_series_and_counts_what_it_cannot_use(relay, gf):
    t0 = int(START.timestamp() * 1000)
    node_2_gpu = gpu_uuid(2, 0)
    series = [
        dcgm_series("DCGM_FI_PROF_SM_ACTIVE", GPU_A, "node-1",
                    [(t0, 0.25), (t0 + 10_000, 0.5)]),
        dcgm_series("DCGM_FI_DEV_FB_USED", GPU_A, "node-1", [(t0, 1024.0)]),  # MiB
        # The node is the one the inventory places the GPU on, whatever Hostname says: in
        # Kubernetes it is the dcgm-exporter pod's name unless NODE_NAME is set.
        dcgm_series("DCGM_FI_DEV_GPU_UTIL", node_2_gpu, "nvidia-dcgm-exporter-cwbcm",
                    [(t0, 5.0)]),
        dcgm_series("DCGM_FI_DEV_GPU_UTIL", GPU_B, None, [(t0, 7.0)]),
        dcgm_series("DCGM_FI_DEV_GPU_UTIL", "GPU-99999999-0000-0000-0000-000000000000",
                    "node-1", [(t0, 5.0)]),  # no node has registered this GPU
        ({"__name__": "up", "job": "dcgm"}, [(t0, 1.0)]),
    ]
    response = push(relay, series)
    assert response.status_code == 204, response.text
    assert response.headers["X-Gpufleet-Stored"] == "5"
    assert response.headers["X-Gpufleet-Dropped"] == "not_dcgm=1, unknown_gpu=1"
    assert stored(gf, "gpu.sm_active") == [(GPU_A, 50.0)]  # a 0–1 ratio became percent
    assert stored(gf, "gpu.memory_used_bytes") == [(GPU_A, 1024.0 * 1024**2)]
    utilization = {v.series.gpu_uuid: (v.series.node, v.value)
                   for v in gf.telemetry.latest(metric="gpu.utilization")}
    assert utilization == {node_2_gpu: ("node-2", 5.0), GPU_B: ("node-1", 7.0)}
    again = push(relay, series)  # a sender's retry of the same body
    assert again.headers["X-Gpufleet-Stored"] == "0"
    assert gf.ingest.counters.samples_stored == 5


@SQLITE_ONLY
def test_remote_write_is_for_ingest_tokens_and_refuses_what_is_not_remote_write(relay, node):
    assert push(node, []).status_code == 403  # an agent uploads batches instead
    garbage = relay.post(REMOTE_WRITE, content=b"\x00\x01 not snappy")
    assert garbage.status_code == 400
    assert garbage.json()["error"]["code"] == "malformed_remote_write"


@SQLITE_ONLY
def test_ingest_health_is_on_the_servers_metrics(node, api):
    from tests.api.test_prometheus import scrape

    payload = body(snapshot(0, unit(gpu__sm_active=10.0, gpu__utilization=150.0)))
    post(node, payload)
    post(node, payload)
    post(node, b"not gzip")
    metrics = scrape(api)
    assert metrics["gpufleet_ingest_batches"] == {
        (("outcome", "stored"),): 1, (("outcome", "duplicate"),): 1,
        (("outcome", "refused"),): 1}
    assert metrics["gpufleet_ingest_refusals"] == {(("code", "malformed_batch"),): 1}
    assert metrics["gpufleet_ingest_samples_stored"] == {(): 1}
    assert metrics["gpufleet_ingest_samples_dropped"] == {(("reason", "out_of_range"),): 1}


@SQLITE_ONLY
def test_a_mig_instances_values_are_its_own_in_the_latest_snapshot(node, api):
    mig = UnitSnapshot(gpu_uuid=GPU_B, mig_uuid="MIG-1", mig_profile="1g.10gb",
                       values={"gpu.gr_engine_active": 42.0})
    assert post(node, body(snapshot(0, mig))).status_code == 200
    latest = api.get("/api/v1/telemetry/latest").json()["items"]
    unit = next(u for u in latest if u["mig_uuid"] == "MIG-1")
    assert unit["values"] == {"gpu.gr_engine_active": 42.0}
    assert (unit["activity_percent"], unit["activity_source"]) == (42.0, "gr_engine_active")


@SQLITE_ONLY
def test_remote_write_sees_a_gpu_registered_through_another_server(relay, node, gf, store,
                                                                  settings, clock):
    from gpufleet.wire.agent import NodeRegistration
    from tests.helpers import registration

    t0 = int(START.timestamp() * 1000)
    assert push(relay, [dcgm_series("DCGM_FI_DEV_GPU_UTIL", GPU_A, "node-1", [(t0, 5.0)])]
                ).headers["X-Gpufleet-Stored"] == "1"  # this server now remembers 2 GPUs
    other = Gpufleet(store, settings, clock)  # a second replica: its own memory
    other.register_node(node.token, NodeRegistration.model_validate(registration(1, gpus=3)))
    third = gpu_uuid(1, 2)
    response = push(relay, [dcgm_series("DCGM_FI_DEV_GPU_UTIL", third, "node-1",
                                        [(t0 + 10_000, 7.0)])])
    assert response.headers["X-Gpufleet-Stored"] == "1"
    assert "X-Gpufleet-Dropped" not in response.headers


@pytest.mark.parametrize(("path", "status", "body_type"), [
    (TELEMETRY_BATCHES_PATH, "200", "application/json"),
    (REMOTE_WRITE, "204", "application/x-protobuf")])
def test_the_upload_routes_are_documented_like_any_route(client, path, status, body_type):
    """They skip FastAPI's dependency solving and answer encoding (api/request_route.py),
    not its documentation: the bearer token, the body, the answer."""
    operation = client.get("/openapi.json").json()["paths"][path]["post"]
    assert operation["security"] == [{"HTTPBearer": []}]
    assert operation["requestBody"]["required"] is True
    assert list(operation["requestBody"]["content"]) == [body_type]
    assert [s for s in operation["responses"] if s < "400"] == [status]
    # The errors they answer with (docs/telemetry-ingest.md): 400 for a malformed body
    # (never 422: they validate their body themselves), 404 unknown_node, 409 foreign_gpus.
    refusals = ["400", "401", "403", "404", "409", "413", "503"] if status == "200" else [
        "400", "401", "403", "413", "503"]  # remote-write drops, never refuses, contents
    assert [s for s in operation["responses"] if s >= "400"] == refusals
    if status == "200":
        schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/TelemetryAck"}


def test_an_acknowledgement_is_the_ack_schema_in_json(node):
    response = post(node, body(snapshot(0, unit(gpu__sm_active=1.0)), batch_id="b9"))
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"batch_id": "b9", "duplicate": False, "samples_stored": 1,
                               "dropped": {}}


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
def test_a_series_holds_one_sample_per_time_whatever_the_batch_repeats(node, gf):
    """A tick time sent twice, a series row sent twice, a process row sent twice: the store
    keeps the first value present at each time, and the rest is dropped as repeated_time."""
    process = ProcessSnapshot(pid=7, name="py", values={"process.sm_utilization": 10.0})
    batch = columnar("b1", [snapshot(0, UnitSnapshot(gpu_uuid=GPU_A, processes=(process,),
                                                     values={"gpu.sm_active": 40.0})),
                            snapshot(0, unit(gpu__sm_active=90.0)),
                            snapshot(10, unit(GPU_B, gpu__power_usage_watts=300.0))])
    raw = batch.model_dump()
    assert raw["times_ms"][0] == raw["times_ms"][1]
    # The GPU-B row again, and the process row again with another value.
    power = next(n for n, key in enumerate(raw["series"])
                 if key["metric"] == "gpu.power_usage_watts")
    raw["series"].append(raw["series"][power])
    raw["values"].append([None, None, 999.0])
    raw["processes"].append({**raw["processes"][0], "values": {"process.sm_utilization": 77.0}})
    response = post(node, gzip.compress(json.dumps(raw).encode()))
    assert response.status_code == 200, response.text
    assert response.json()["dropped"] == {"repeated_time": 3}
    assert response.json()["samples_stored"] == 3
    gf.telemetry.apply_journal()
    minute = timedelta(minutes=1)

    def points(metric: str) -> list[float]:
        result = gf.telemetry.query_range(metric, START, START + minute, minute)
        return [v for _, v in result[0].points]

    assert stored(gf, "gpu.sm_active") == [(GPU_A, 40.0)]
    assert points("gpu.power_usage_watts") == [300.0]
    assert points("process.sm_utilization") == [10.0]
