"""Requests no fleet state could grant are refused at creation, in the CLI's words, and a
request that names no end gets the default duration (issue 12, item 4). SQLite and
PostgreSQL through the real app."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.lifecycle_world import act, create

DAY = 86400

IMPOSSIBLE = {
    "a model the fleet lacks": (
        {"count": 1, "models": ["A100-80GB"]}, "model_not_in_fleet",
        "--model A100-80GB: the fleet has none in exclusive mode; it has H100-80GB"),
    "an unknown environment": (
        {"count": 1, "environment": "nowhere"}, "unknown_environment",
        "--env nowhere: no such environment; the fleet has onprem-hpc"),
    "more GPUs than the fleet": (
        {"count": 17}, "not_enough_in_fleet",
        "--gpus 17: the fleet has 16 H100-80GB; largest node 8"),
    "a MIG profile no MIG GPU offers": (
        {"count": 1, "mig_profile": "1g.10gb"}, "no_such_gpus",
        "the fleet has no usable GPUs in mig mode"),
    "more cores than any node": (
        {"count": 1, "cpu_cores_per_unit": 200}, "host_cpu_exceeded",
        "--cpu 200 cores per unit: the largest node has 112 cores"),
    "more cores than one node, together": (
        {"count": 8, "same_node": True, "cpu_cores_per_unit": 20}, "host_cpu_exceeded",
        "--cpu 20 cores per unit × 8 units on one node: the largest node has 112 cores"),
    "more memory than any node": (
        {"count": 1, "memory_gib_per_unit": 4096}, "host_memory_exceeded",
        "--memory 4096 GiB per unit: the largest node has 2048 GiB"),
}


@pytest.mark.parametrize("case", IMPOSSIBLE, ids=list(IMPOSSIBLE))
def test_an_impossible_request_is_refused_naming_the_limit(h100s, api, case):
    member, _ = h100s
    api.request("PUT", "/api/v1/projects/vision/auto-approve",  # auto-approval changes nothing
                json={"max_gpus": 100, "max_hours": 24 * 30})
    body, code, message = IMPOSSIBLE[case]
    error = create(member, expect=400, **body)["error"]
    assert (error["code"], error["message"]) == (code, message)
    assert "milli" not in error["message"] and "_per_unit" not in error["message"]
    assert api.get("/api/v1/requests").json()["items"] == []


def test_retired_nodes_and_quarantined_gpus_are_not_capacity(h100s, api):
    member, _ = h100s
    assert api.post("/api/v1/nodes/node-2/retire",
                    json={"reason": "decommissioned"}).status_code == 200
    error = create(member, expect=400, count=9)["error"]
    assert error["message"] == "--gpus 9: the fleet has 8 H100-80GB; largest node 8"
    gpu = api.get("/api/v1/gpus", params={"node": "node-1"}).json()["items"][0]
    api.post(f"/api/v1/gpus/{gpu['uuid']}/health",
             json={"health": "quarantined", "reason": "xid 79"})
    error = create(member, expect=400, count=8, same_node=True)["error"]
    assert (error["code"], error["message"]) == (
        "not_enough_in_fleet", "--gpus 8: the fleet has 7 H100-80GB; largest node 7")
    assert create(member, count=7, same_node=True)["state"] == "pending"


def test_a_cordoned_node_still_counts_as_capacity(h100s, api):
    """Cordoning is temporary: a request for its GPUs waits rather than being refused."""
    member, _ = h100s
    api.post("/api/v1/nodes/node-1/cordon", json={"reason": "maintenance"})
    assert create(member, count=16)["state"] == "pending"


def test_a_request_with_no_end_gets_the_default_duration(h100s, api, clock):
    member, operator = h100s
    code = create(member, count=1)["code"]
    assert member.get(f"/api/v1/requests/{code}").json()["duration_s"] == 7 * DAY
    active = act(operator, code, "approve")
    assert active["ends_at"].startswith((clock.now() + timedelta(days=7)).isoformat()[:16])


def test_the_default_duration_never_exceeds_max_request_days(h100s, api, settings):
    member, _ = h100s
    settings.max_request_days = 3
    assert create(member, count=1)["duration_s"] == 3 * DAY


def test_an_open_ended_request_within_the_policy_is_auto_approved(h100s, api, settings):
    """With the default duration it has an end, so the policy may decide it."""
    member, _ = h100s
    api.request("PUT", "/api/v1/projects/vision/quotas",
                json={"flavour": "H100-80GB", "limit": 8})
    api.request("PUT", "/api/v1/projects/vision/auto-approve",
                json={"max_gpus": 1, "max_hours": 24 * 7})
    granted = create(member, count=1)
    assert granted["state"] == "active" and granted["decided_by"] == "policy:auto-approve"
