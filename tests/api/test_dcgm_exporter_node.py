"""A node read through its dcgm-exporter, end to end: what its agent registers from the real
page (agent/dcgm_inventory.py) and uploads as telemetry (agent/dcgm_exporter.py) must
meet on the server — the same MIG instances, with their profiles — and what an operator
exports for mig-parted must never drop instances the node has."""

from __future__ import annotations

import re

import yaml

from gpufleet.agent.dcgm_exporter import mig_uuids_of, snapshot_from_text
from gpufleet.agent.dcgm_inventory import registration_from_page
from gpufleet.agent.host import HostFacts
from gpufleet.wire.telemetry_batch import TELEMETRY_BATCHES_PATH, columnar, encode
from tests.helpers import create_environment, gpu, gpu_uuid, join_token, registration
from tests.paths import DATA_DIR

PAGE = (DATA_DIR / "dcgm_exporter" / "a100_mig.txt").read_text()
HOST = HostFacts("machine-a100", "a100-mig-03", 64, 512 * 1024**3, "Linux 6.8")
MIG_GPU = "GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"


def join_from_page(api, page: str = PAGE) -> str:
    """Register the page's node with a join token, as its agent would; its credential."""
    create_environment(api, "onprem-slicing", default_sharing_mode="mig")
    body = registration_from_page(page, HOST).model_dump(mode="json", exclude_none=True)
    reply = api.as_(join_token(api, "onprem-slicing")).post("/api/v1/agent/register",
                                                            json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["credential"]


def upload_page(api, credential: str, clock, page: str = PAGE) -> None:
    snapshot = snapshot_from_text(page, HOST.hostname, clock.now(),
                                  mig_uuids_of(registration_from_page(page, HOST)))
    response = api.as_(credential).post(
        TELEMETRY_BATCHES_PATH, content=encode(columnar("b1", [snapshot])),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert response.status_code == 200, response.text


def test_mig_instances_of_the_inventory_and_the_telemetry_are_the_same_units(api, clock):
    upload_page(api, join_from_page(api), clock)
    latest = api.get("/api/v1/telemetry/latest", params={"node": HOST.hostname}).json()
    units = [(u["mig_uuid"], u["mig_profile"]) for u in latest["items"]
             if u["gpu_uuid"] == MIG_GPU and u["mig_uuid"] is not None]
    assert sorted(units) == [(f"{MIG_GPU}/gi/1", "3g.20gb"), (f"{MIG_GPU}/gi/13", "1g.5gb"),
                             (f"{MIG_GPU}/gi/14", "1g.5gb"), (f"{MIG_GPU}/gi/5", "2g.10gb")]
    three_g = next(u for u in latest["items"] if u["mig_uuid"] == f"{MIG_GPU}/gi/1")
    assert three_g["values"]  # the instance's own telemetry is on the same unit


def test_a_query_by_mig_profile_finds_the_dcgm_instances(api, clock):
    upload_page(api, join_from_page(api), clock)
    clock.advance(60)
    response = api.get("/api/v1/telemetry/query", params={
        "metric": "gpu.gr_engine_active", "by": "mig_profile", "since": "10m", "step": "1m"})
    assert response.status_code == 200, response.text
    groups = {s["labels"]["mig_profile"] for s in response.json()["series"]}
    assert groups == {"3g.20gb", "2g.10gb", "1g.5gb"}


def export_notes(api) -> tuple[dict, str]:
    body = api.get("/api/v1/mig/configs", params={"format": "json"}).json()
    return body, api.get("/api/v1/mig/configs").text


def test_a_page_without_model_name_exports_the_instances_it_has(api):
    join_from_page(api, re.sub(r'modelName="[^"]*",?', "", PAGE))
    body, text = export_notes(api)
    (node,) = body["nodes"]
    assert node["devices"][0]["model"] == "A100-40GB"
    assert node["devices"][0]["mig_devices"] == {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
    assert "mig-devices: {}" not in text


def test_a_mig_gpu_whose_instances_were_not_read_is_never_exported(api):
    """What an agent sends for a page whose profiles it cannot identify: the node is left
    out with a note naming the GPU, never exported as a MIG GPU without instances."""
    create_environment(api, "onprem-slicing", default_sharing_mode="mig")
    old_agent = {**gpu(1, 0, name="unknown", pci_device_id=None, mig_enabled=True)}
    unread = {**gpu(2, 0, mig_enabled=True, mig_instances_unread=2, mig_instances=[
        {"profile_id": 19, "gpu_instance_id": 13}])}
    for number, reported in ((1, old_agent), (2, unread)):
        body = {**registration(number, gpus=0), "gpus": [reported]}
        reply = api.as_(join_token(api, "onprem-slicing")).post("/api/v1/agent/register",
                                                                json=body)
        assert reply.status_code == 200, reply.text
    body, text = export_notes(api)
    assert body["nodes"] == []
    assert [n.split(":")[0] for n in body["notes"][:2]] == ["node node-1 left out",
                                                           "node node-2 left out"]
    assert gpu_uuid(1, 0) in body["notes"][0] and "could not be read" in body["notes"][0]
    assert gpu_uuid(2, 0) in body["notes"][1] and "2 MIG instance(s)" in body["notes"][1]
    assert "mig-configs" not in yaml.safe_load(text)
