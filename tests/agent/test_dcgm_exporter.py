"""The dcgm-exporter backend: real HTTP to a local exporter stand-in, sample pages modelled on
dcgm-exporter's output (tests/data/dcgm_exporter/), values checked against the catalogue."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from gpufleet.agent.backend import SourceUnavailable, TelemetrySource
from gpufleet.agent.dcgm_exporter import (
    DcgmExporterBackend,
    DcgmExporterUnavailable,
    MalformedPage,
    derived_mig_uuid,
    mig_uuids_of,
    snapshot_from_text,
)
from gpufleet.agent.prometheus_text import parse_page
from gpufleet.clock import ManualClock
from gpufleet.domain.telemetry.catalogue import by_dcgm_field, metric
from gpufleet.wire.agent import NodeRegistration
from gpufleet.wire.telemetry import NodeSnapshot, UnitSnapshot
from tests.paths import DATA_DIR

DATA = DATA_DIR / "dcgm_exporter"
H100_PAGE = (DATA / "h100_8gpu.txt").read_text()
MIG_PAGE = (DATA / "a100_mig.txt").read_text()
AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
MIB = 1024 * 1024

H100 = [
    "GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f",
    "GPU-8d2f6a1e-3b4c-4e5f-9a0b-1c2d3e4f5a6b",
    "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
    "GPU-7b3e9c41-52a6-4d8f-b1e0-2c9a7f6d3e15",
    "GPU-a41c2e7d-9f03-4b6e-8d52-6e1f0c3b9a87",
    "GPU-3e6d1f90-b8a2-47c5-9e13-d0f4a2b6c8e1",
    "GPU-c92b7e05-1d4f-4a63-b8e9-0a5c3d7f1e24",
    "GPU-e18f4a3b-6c2d-4e91-a7b5-9d3c0f2e8b46",
]
A100_MIG = "GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"
A100_WHOLE = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"


class Exporter:
    """A local HTTP server standing in for dcgm-exporter: serves `body` with `status` after
    `delay_s`, and counts the requests it answered."""

    def __init__(self) -> None:
        self.status, self.body, self.delay_s, self.requests = 200, "", 0.0, 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.requests += 1
                time.sleep(stub.delay_s)
                payload = stub.body.encode()
                self.send_response(stub.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                # The client may have given up waiting: the timeout test.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def serve(self, body: str, status: int = 200, delay_s: float = 0.0) -> None:
        self.body, self.status, self.delay_s = body, status, delay_s

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    stub = Exporter()
    yield stub
    stub.close()


def backend(url: str, **kwargs) -> DcgmExporterBackend:
    return DcgmExporterBackend(url, "dgx-h100-07", clock=ManualClock(AT), **kwargs)


@pytest.fixture
def h100(exporter: Exporter) -> NodeSnapshot:
    exporter.serve(H100_PAGE)
    with backend(exporter.url) as source:
        return source.collect()


def gpu(snapshot: NodeSnapshot, uuid: str) -> UnitSnapshot:
    unit = snapshot.unit(uuid)
    assert unit is not None, f"no unit for {uuid}"
    return unit


def labelled(unit: UnitSnapshot, name: str) -> dict[tuple[tuple[str, str], ...], float | None]:
    return {tuple(sorted(lv.labels.items())): lv.value for lv in unit.labelled
            if lv.metric == name}


# --- the H100 page over real HTTP ----------------------------------------------------------


def test_is_a_telemetry_source(exporter):
    exporter.serve(H100_PAGE)
    source: TelemetrySource = backend(exporter.url)
    assert source.collect().backend == "dcgm-exporter"
    assert exporter.requests == 1


def test_an_8_gpu_h100_page_becomes_one_unit_per_gpu(h100):
    assert h100.node == "dgx-h100-07"
    assert h100.at == AT
    assert [u.gpu_uuid for u in h100.units] == H100
    assert not any(u.is_mig for u in h100.units)
    assert all(u.processes == () for u in h100.units)  # dcgm-exporter lists no processes
    assert NodeSnapshot.model_validate_json(h100.model_dump_json()) == h100


def test_profiling_ratios_become_percent(h100):
    values = gpu(h100, H100[0]).values
    assert values["gpu.gr_engine_active"] == pytest.approx(99.1204)
    assert values["gpu.sm_active"] == pytest.approx(87.4512)
    assert values["gpu.tensor_active"] == pytest.approx(52.7)
    assert values["gpu.dram_active"] == pytest.approx(61.1)
    assert gpu(h100, H100[5]).values["gpu.sm_active"] == 0.0


def test_units_follow_the_catalogue(h100):
    values = gpu(h100, H100[0]).values
    assert values["gpu.memory_used_bytes"] == 78881 * MIB
    assert values["gpu.memory_free_bytes"] == 2161 * MIB
    assert values["gpu.memory_reserved_bytes"] == 517 * MIB
    assert values["gpu.energy_joules_total"] == pytest.approx(918273645.123)  # mJ -> J
    assert values["gpu.power_usage_watts"] == pytest.approx(598.117)
    assert values["gpu.sm_clock_mhz"] == 1980
    assert values["gpu.temperature_celsius"] == 61
    assert values["gpu.utilization"] == 100
    assert values["gpu.pcie_tx_bytes_per_second"] == 1843200123
    assert gpu(h100, H100[6]).values["gpu.pcie_replays_total"] == 12
    # The scale is the catalogue's, not restated here.
    assert by_dcgm_field("DCGM_FI_DEV_FB_USED").dcgm.scale == MIB


def test_an_older_field_name_maps_through_its_alias(h100):
    assert gpu(h100, H100[1]).values["gpu.clock_throttle_reasons"] == 4  # SW power cap


def test_blank_sentinels_and_nan_are_missing_not_numbers(h100):
    idle = gpu(h100, H100[7]).values
    assert idle["gpu.memory_temperature_celsius"] is None  # int64 blank + 2 (not supported)
    assert idle["gpu.power_usage_watts"] is None  # fp64 blank, 2**47
    assert idle["gpu.sm_occupancy"] is None  # NaN
    assert gpu(h100, H100[6]).values["gpu.ecc_uncorrected_errors_total"] is None  # int32 blank
    assert gpu(h100, H100[5]).values["gpu.ecc_uncorrected_errors_total"] == 1
    # Missing is None on an offered metric; a metric the page does not carry is absent.
    assert "gpu.fan_speed_percent" not in idle


def test_xid_counter_is_one_series_per_code_on_the_gpu(h100):
    assert labelled(gpu(h100, H100[2]), "gpu.xid_errors_total") == {
        (("xid", "13"),): 3, (("xid", "31"),): 1}
    assert labelled(gpu(h100, H100[5]), "gpu.xid_errors_total") == {(("xid", "79"),): 1}
    assert labelled(gpu(h100, H100[0]), "gpu.xid_errors_total") == {}
    assert gpu(h100, H100[2]).values["gpu.xid_last_code"] == 13


def test_nvlink_links_are_labelled_series(h100):
    busy = gpu(h100, H100[0])
    tx = labelled(busy, "gpu.nvlink_link_tx_bytes_per_second")
    rx = labelled(busy, "gpu.nvlink_link_rx_bytes_per_second")
    assert sorted(int(dict(k)["link"]) for k in tx) == list(range(18))
    assert tx[(("link", "3"),)] == 16_000_003_000
    assert rx[(("link", "17"),)] == 16_000_017_000
    assert busy.values["gpu.nvlink_tx_bytes_per_second"] == 300_000_000_000
    idle = labelled(gpu(h100, H100[6]), "gpu.nvlink_link_tx_bytes_per_second")
    assert set(idle.values()) == {0}


def test_pod_mapping_becomes_the_units_workload(h100):
    trainer = gpu(h100, H100[3])
    assert (trainer.pod, trainer.namespace, trainer.container) == (
        "llm-pretrain-0", "research", "trainer")
    assert gpu(h100, H100[4]).pod == "vllm-7c9f8d6b5-xk2lp"
    free = gpu(h100, H100[5])  # the exporter writes pod="" for an unassigned GPU
    assert (free.pod, free.namespace, free.container, free.slurm_job) == (None,) * 4


def test_unknown_series_are_named_once_per_collect(h100):
    assert h100.problems == (
        "ignored 5 series not in the metric catalogue (40 samples): DCGM_FI_DEV_DEC_UTIL, "
        "DCGM_FI_DEV_ENC_UTIL, DCGM_FI_DEV_MEM_COPY_UTIL, DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, "
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",)


def test_every_collect_scrapes_again(exporter):
    exporter.serve(H100_PAGE)
    source = backend(exporter.url)
    first = source.collect()
    exporter.serve(H100_PAGE.replace("} 1980\n", "} 1755\n", 1))
    second = source.collect()
    assert exporter.requests == 2
    assert gpu(first, H100[0]).values["gpu.sm_clock_mhz"] == 1980
    assert gpu(second, H100[0]).values["gpu.sm_clock_mhz"] == 1755


# --- MIG -----------------------------------------------------------------------------------


@pytest.fixture
def mig() -> NodeSnapshot:
    return snapshot_from_text(MIG_PAGE, "a100-mig-03", AT)


def test_mig_series_stay_per_instance(mig):
    instances = [u for u in mig.units if u.is_mig]
    assert [(u.gpu_uuid, u.gpu_instance_id, u.mig_profile) for u in instances] == [
        (A100_MIG, 1, "3g.20gb"), (A100_MIG, 5, "2g.10gb"),
        (A100_MIG, 13, "1g.5gb"), (A100_MIG, 14, "1g.5gb")]
    small = next(u for u in instances if u.gpu_instance_id == 13)
    assert small.values["gpu.memory_used_bytes"] == 4552 * MIB
    assert small.values["gpu.gr_engine_active"] == pytest.approx(41.23)
    assert (small.pod, small.namespace, small.container) == ("bert-infer-0", "serving",
                                                             "server")
    assert [u.gpu_uuid for u in mig.units if not u.is_mig] == [A100_MIG, A100_WHOLE]


def test_device_metrics_of_mig_series_go_to_the_parent_gpu(mig):
    parent = gpu(mig, A100_MIG)
    assert parent.values["gpu.temperature_celsius"] == 52
    assert parent.values["gpu.power_usage_watts"] == pytest.approx(231.44)
    assert parent.values["gpu.utilization"] is None  # DCGM blank on MIG instances
    assert parent.pod is None  # the instances' workloads are theirs, not the GPU's
    for unit in mig.units:
        if unit.is_mig:
            assert not metric("gpu.temperature_celsius").per_mig
            assert "gpu.temperature_celsius" not in unit.values
            assert "gpu.power_usage_watts" not in unit.values
            assert "gpu.memory_used_bytes" in unit.values


def test_mig_uuids_are_derived_unique_and_stable_without_an_inventory(mig):
    uuids = [u.mig_uuid for u in mig.units if u.is_mig]
    assert uuids == [derived_mig_uuid(A100_MIG, gi) for gi in (1, 5, 13, 14)]
    assert len(set(uuids)) == 4
    assert not any(u.startswith("MIG-") for u in uuids)  # never taken for a real one
    again = snapshot_from_text(MIG_PAGE, "a100-mig-03", AT)
    assert [u.mig_uuid for u in again.units] == [u.mig_uuid for u in mig.units]


def registration_with_mig() -> NodeRegistration:
    return NodeRegistration.model_validate({
        "machine_id": "m-1", "hostname": "a100-mig-03", "cpu_cores": 64,
        "memory_bytes": 512 * 1024**3,
        "gpus": [{"uuid": A100_MIG.upper(), "index": 0,
                  "name": "NVIDIA A100-SXM4-40GB", "mig_enabled": True,
                  "mig_instances": [
                      {"profile_id": 9, "placement_start": 4, "gpu_instance_id": 1,
                       "mig_uuid": "MIG-1b9e6f3a-24c5-5d6e-8f70-91a2b3c4d5e6"},
                      {"profile_id": 19, "placement_start": 0, "gpu_instance_id": 13,
                       "mig_uuid": "MIG-2c0f7a4b-35d6-5e7f-9081-a2b3c4d5e6f7"}]},
                 {"uuid": A100_WHOLE, "index": 1, "name": "NVIDIA A100-SXM4-40GB"}]})


def test_real_mig_uuids_come_from_the_agents_inventory(exporter):
    exporter.serve(MIG_PAGE)
    source = backend(exporter.url)
    source.use_inventory(registration_with_mig())
    snapshot = source.collect()
    by_gi = {u.gpu_instance_id: u.mig_uuid for u in snapshot.units if u.is_mig}
    assert by_gi == {
        1: "MIG-1b9e6f3a-24c5-5d6e-8f70-91a2b3c4d5e6",
        5: derived_mig_uuid(A100_MIG, 5),  # not in the inventory: derived
        13: "MIG-2c0f7a4b-35d6-5e7f-9081-a2b3c4d5e6f7",
        14: derived_mig_uuid(A100_MIG, 14)}
    assert snapshot.unit(A100_MIG, "MIG-2c0f7a4b-35d6-5e7f-9081-a2b3c4d5e6f7").pod == \
        "bert-infer-0"


def test_mig_uuids_of_a_registration_match_gpus_case_blind():
    assert mig_uuids_of(registration_with_mig()) == {
        (A100_MIG.lower(), 1): "MIG-1b9e6f3a-24c5-5d6e-8f70-91a2b3c4d5e6",
        (A100_MIG.lower(), 13): "MIG-2c0f7a4b-35d6-5e7f-9081-a2b3c4d5e6f7"}


# --- labels and odd series -----------------------------------------------------------------

UUID = "GPU-11111111-2222-3333-4444-555555555555"


def page(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def test_hpc_job_mapping_becomes_the_units_job():
    snapshot = snapshot_from_text(page(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="{UUID}",Hostname="n1",hpc_job="4815162"}} 40',
    ), "n1", AT)
    assert gpu(snapshot, UUID).slurm_job == "4815162"


def test_a_shared_gpu_keeps_only_the_workload_fields_its_series_agree_on():
    base = f'gpu="0",UUID="{UUID}",namespace="serving",container="vllm"'
    snapshot = snapshot_from_text(page(
        f'DCGM_FI_DEV_GPU_TEMP{{{base},pod="a-0"}} 40',
        f'DCGM_FI_DEV_GPU_TEMP{{{base},pod="b-0"}} 40',
    ), "n1", AT)
    unit = gpu(snapshot, UUID)
    assert (unit.pod, unit.namespace, unit.container) == (None, "serving", "vllm")
    assert unit.values == {"gpu.temperature_celsius": 40}
    assert snapshot.problems == (
        f"1 unit(s) carry several workloads (a shared GPU); only what they agree on is "
        f"kept: {UUID}",)


def test_a_repeated_series_keeps_its_first_number():
    mig = 'GPU_I_PROFILE="1g.5gb",GPU_I_ID'
    snapshot = snapshot_from_text(page(
        f'DCGM_FI_DEV_POWER_USAGE{{UUID="{UUID}",{mig}="1"}} 140737488355328.000000',
        f'DCGM_FI_DEV_POWER_USAGE{{UUID="{UUID}",{mig}="2"}} 201.5',
        f'DCGM_FI_DEV_POWER_USAGE{{UUID="{UUID}",{mig}="3"}} 202.0',
    ), "n1", AT)
    assert gpu(snapshot, UUID).values == {"gpu.power_usage_watts": 201.5}


def test_the_old_label_names_are_read_too():
    snapshot = snapshot_from_text(page(
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",uuid="{UUID}",pod_name="p",pod_namespace="ns",'
        f'container_name="c"}} 40'), "n1", AT)
    unit = gpu(snapshot, UUID)
    assert (unit.pod, unit.namespace, unit.container) == ("p", "ns", "c")


def test_series_without_a_gpu_or_with_a_bad_instance_are_skipped_and_said():
    snapshot = snapshot_from_text(page(
        'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 40',
        f'DCGM_FI_DEV_FB_USED{{UUID="{UUID}",GPU_I_ID="seven"}} 10',
        f'DCGM_FI_DEV_FB_USED{{UUID="{"G" * 300}"}} 10',
        f'DCGM_EXP_XID_ERRORS_TOTAL{{UUID="{UUID}"}} 2',
        f'DCGM_FI_DEV_GPU_TEMP{{UUID="{UUID}"}} 41',
    ), "n1", AT)
    assert [u.values for u in snapshot.units] == [{"gpu.temperature_celsius": 41}]
    assert snapshot.problems == (
        "ignored 2 sample(s) without a GPU UUID label: DCGM_FI_DEV_FB_USED, "
        "DCGM_FI_DEV_GPU_TEMP",
        "ignored 1 sample(s) whose GPU_I_ID is not a GPU instance id: seven",
        "ignored 1 sample(s) without a usable label of their own (xid): "
        "gpu.xid_errors_total")


def test_series_from_several_hosts_are_said():
    snapshot = snapshot_from_text(page(
        f'DCGM_FI_DEV_GPU_TEMP{{UUID="{UUID}",Hostname="n1"}} 40',
        'DCGM_FI_DEV_GPU_TEMP{UUID="GPU-2",Hostname="n2"} 40',
    ), "n1", AT)
    assert len(snapshot.units) == 2
    assert snapshot.problems == ("series from 2 hosts (n1, n2): scrape this node's own "
                                 "dcgm-exporter, not a shared service",)


def test_a_page_without_gpu_series_is_an_empty_snapshot_that_says_so():
    snapshot = snapshot_from_text(page(
        "# HELP node_load1 1m load average.", "# TYPE node_load1 gauge", "node_load1 0.5"),
        "n1", AT)
    assert snapshot.units == ()
    assert snapshot.problems[-1] == ("no GPU series on the page: dcgm-exporter sees no GPU, "
                                     "or this is not its /metrics")
    assert "node_load1" in snapshot.problems[0]


def test_problem_lines_fit_the_wire():
    names = [f"DCGM_FI_DEV_UNKNOWN_FIELD_NUMBER_{i:03}" for i in range(40)]
    snapshot = snapshot_from_text(page(*(f'{n}{{UUID="{UUID}"}} 1' for n in names)), "n", AT)
    assert all(len(p) <= 253 for p in snapshot.problems)
    assert snapshot.problems[0].startswith("ignored 40 series not in the metric catalogue")


# --- malformed pages and an unreachable exporter -------------------------------------------


def test_a_partly_malformed_page_is_read_as_far_as_it_goes(exporter):
    lines = H100_PAGE.splitlines()
    broken = next(i for i, line in enumerate(lines) if line.startswith("DCGM_FI_DEV_GPU_TEMP"))
    lines[broken] = 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-5c89852c 61'  # cut short
    exporter.serve("\n".join(lines) + "\n")
    snapshot = backend(exporter.url).collect()
    assert len(snapshot.units) == 8
    assert "gpu.temperature_celsius" not in gpu(snapshot, H100[0]).values
    assert gpu(snapshot, H100[1]).values["gpu.temperature_celsius"] == 64
    assert gpu(snapshot, H100[7]).values["gpu.memory_used_bytes"] == 0  # after the bad line
    assert snapshot.problems[0] == (
        f"skipped 1 malformed line(s) of the page, first line {broken + 1}: "
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-5c89852c 61')


def test_a_page_that_is_not_metrics_is_unavailable(exporter):
    exporter.serve("<html>\n<body>Grafana</body>\n</html>\n")
    with pytest.raises(DcgmExporterUnavailable) as caught:
        backend(exporter.url).collect()
    message = str(caught.value)
    assert message.startswith(f"dcgm-exporter at {exporter.url}: the page is not Prometheus "
                              "metrics (3 unreadable line(s), first line 1: <html>)")
    assert "--dcgm-exporter-url" in message
    with pytest.raises(MalformedPage):
        snapshot_from_text("<html>", "n", AT)


def test_an_http_error_is_unavailable(exporter):
    exporter.serve("collector failed: DCGM is not running", status=500)
    with pytest.raises(SourceUnavailable) as caught:
        backend(exporter.url).collect()
    assert isinstance(caught.value, DcgmExporterUnavailable)
    assert caught.value.url == exporter.url
    assert str(caught.value) == (
        f"dcgm-exporter at {exporter.url}: answered HTTP 500 Internal Server Error: "
        "collector failed: DCGM is not running")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_refused_connection_is_unavailable():
    url = f"http://127.0.0.1:{free_port()}/metrics"
    with pytest.raises(DcgmExporterUnavailable) as caught:
        backend(url).collect()
    assert str(caught.value).startswith(f"dcgm-exporter at {url}: cannot connect (")
    assert "Is dcgm-exporter running on this node" in str(caught.value)


def test_a_slow_exporter_times_out(exporter):
    exporter.serve(H100_PAGE, delay_s=1.0)
    with pytest.raises(DcgmExporterUnavailable) as caught:  # the read timed out, it did
        backend(exporter.url, timeout_s=0.2).collect()        # not wait for the page
    assert str(caught.value).startswith(
        f"dcgm-exporter at {exporter.url}: no answer within 0.2 s (ReadTimeout)")


def test_a_broken_response_is_unavailable():
    def drop(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("peer closed connection", request=request)

    client = httpx.Client(transport=httpx.MockTransport(drop))
    with pytest.raises(DcgmExporterUnavailable) as caught:
        backend("http://gpu-node:9400/metrics", client=client).collect()
    assert str(caught.value) == ("dcgm-exporter at http://gpu-node:9400/metrics: the request "
                                 "failed (RemoteProtocolError: peer closed connection)")


def test_the_url_gets_metrics_when_it_names_no_path():
    assert backend("http://localhost:9400").url == "http://localhost:9400/metrics"
    assert backend("http://localhost:9400/").url == "http://localhost:9400/metrics"
    assert backend("https://gpu-7:9400/custom").url == "https://gpu-7:9400/custom"
    with pytest.raises(ValueError, match="must be http"):
        backend("localhost:9400")


# --- the text parser around prometheus_client ----------------------------------------------


def test_counters_keep_the_name_the_page_wrote():
    parsed = parse_page(page("# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter",
                             f'DCGM_FI_DEV_PCIE_REPLAY_COUNTER{{UUID="{UUID}"}} 3',
                             "# TYPE DCGM_EXP_XID_ERRORS_TOTAL counter",
                             f'DCGM_EXP_XID_ERRORS_TOTAL{{UUID="{UUID}",xid="79"}} 1'))
    assert [s.name for s in parsed.samples] == ["DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                                                "DCGM_EXP_XID_ERRORS_TOTAL"]


def test_repeated_label_blocks_parse_like_the_first_and_apart():
    block = 'UUID="GPU-x",modelName="A \\"quoted\\" name, with \\\\ and }"'
    parsed = parse_page(page(f"a{{{block}}} 1", f"b{{{block}}} 2"))
    first, second = parsed.samples
    assert first.labels == second.labels == {"UUID": "GPU-x",
                                             "modelName": 'A "quoted" name, with \\ and }'}
    assert first.labels is not second.labels
    assert first.value == 1 and second.value == 2


def test_int64_sentinels_stay_exact():
    parsed = parse_page("DCGM_FI_DEV_MEMORY_TEMP 9223372036854775794\n")
    assert parsed.samples[0].value == 0x7FFFFFFFFFFFFFF2
