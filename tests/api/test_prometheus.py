"""The server's `/metrics`: the fleet's state in Prometheus' text format, read back with
Prometheus' own parser (prometheus-client)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import create_environment, gpu, join_token, register, registration
from tests.lifecycle_world import act, create


def scrape(api) -> dict[str, dict[tuple, float]]:
    response = api.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
            for family in text_string_to_metric_families(response.text)}


def test_gpus_nodes_and_requests_are_counted(api, h100s):
    member, _ = h100s
    create(member, count=2)
    metrics = scrape(api)
    gpus = metrics["gpufleet_gpus"]
    assert sum(gpus.values()) == 16
    assert gpus[(("environment", "onprem-hpc"), ("model", "H100-80GB"), ("status", "free"))] == 16
    assert metrics["gpufleet_nodes"] == {(("environment", "onprem-hpc"), ("status", "ready")): 2}
    assert metrics["gpufleet_requests"] == {(("state", "pending"),): 1}


def test_allocated_gpus_weigh_mig_instances_by_their_share(api, h100s):
    member, operator = h100s
    act(operator, create(member, count=3)["code"], "approve")
    create_environment(api, name="onprem-slicing")
    body = registration(7, gpus=0)
    body["gpus"] = [gpu(7, 0, mig_enabled=True)]
    token = join_token(api, "onprem-slicing")
    assert api.as_(token).post("/api/v1/agent/register", json=body).status_code == 200
    act(operator, create(member, count=2, mig_profile="1g.10gb")["code"], "approve")
    allocated = scrape(api)["gpufleet_allocated_gpus"]
    whole = (("environment", "onprem-hpc"), ("kind", "whole"), ("project", "vision"))
    mig = (("environment", "onprem-slicing"), ("kind", "mig"), ("project", "vision"))
    assert allocated[whole] == 3
    # 1g.10gb on an H100: 1 of 7 compute slices, held as round(1000 / 7) milli each
    assert allocated[mig] == pytest.approx(2 / 7, abs=1e-3)


def test_agent_silence_grows_with_the_clock(api, h100s, clock):
    before = scrape(api)["gpufleet_agent_silence_max_seconds"]
    clock.advance(300)
    after = scrape(api)["gpufleet_agent_silence_max_seconds"]
    key = (("environment", "onprem-hpc"),)
    assert after[key] - before[key] == 300


def test_metrics_need_a_token(client):
    assert client.get("/metrics").status_code == 401


def test_a_fresh_fleet_scrapes_cleanly(api):
    assert scrape(api)["gpufleet_gpus"] == {}


def test_a_registered_node_appears(api):
    create_environment(api)
    register(api, 1, gpus=4)
    assert sum(scrape(api)["gpufleet_gpus"].values()) == 4


def test_a_member_gets_no_metrics_a_viewer_does(api, h100s):
    """/metrics shows every project's allocations (`gpufleet_allocated_gpus{project}`) and
    the fleet's requests: a member's token, which sees only its own projects, gets a 403."""
    member, operator = h100s
    act(operator, create(member, count=1)["code"], "approve")
    refused = member.get("/metrics")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "forbidden"
    assert "gpufleet_allocated_gpus" not in refused.text
    viewer = api.as_(api.post("/api/v1/tokens", json={"name": "prometheus",
                                                       "role": "viewer"}).json()["token"])
    assert scrape(viewer)["gpufleet_allocated_gpus"]
