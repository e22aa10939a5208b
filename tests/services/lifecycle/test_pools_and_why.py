"""Pools and quotas count a unit once (quota caps, pools guarantee), and `request why`
gives the granter's own verdict (docs/lifecycle.md, "Quotas" and "Pools")."""

from __future__ import annotations

from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.lifecycle import requests as lifecycle_requests
from tests.helpers import create_environment, gpu, join_token, registration
from tests.lifecycle_world import act, create


def _pool(api, operator, project: str, count: int) -> str:
    pool = api.post("/api/v1/pools", json={"project": project, "flavour": "H100-80GB",
                                           "count": count, "reason": "reserved"}).json()
    approved = operator.post(f"/api/v1/pools/{pool['code']}/approve").json()
    assert approved["state"] == "active", approved
    return pool["code"]


def _quota(api, project: str, limit: float) -> None:
    response = api.request("PUT", f"/api/v1/projects/{project}/quotas",
                           json={"flavour": "H100-80GB", "limit": limit})
    assert response.status_code == 200, response.text


def test_a_request_served_from_the_projects_pool_is_not_counted_twice(h100s, api):
    """A 16-GPU pool with 15 free and a quota equal to what the project holds: one more
    GPU comes from the pool, which the quota already counts, so it is auto-approved."""
    member, operator = h100s
    pool = _pool(api, operator, "vision", 16)
    assert act(operator, create(member, count=1)["code"], "approve")["pool"] == pool
    _quota(api, "vision", 16)
    api.request("PUT", "/api/v1/projects/vision/auto-approve",
                json={"max_gpus": 1, "max_hours": 24})

    second = create(member, count=1, duration_hours=12)
    assert (second["state"], second["decided_by"], second["pool"]) == \
        ("active", "policy:auto-approve", pool)
    (quota,) = member.get("/api/v1/projects/vision/quotas").json()["quotas"]
    assert (quota["used"], quota["pooled"], quota["available"]) == (16.0, 16.0, 0.0)
    # Beyond the pool the quota still caps: the pool is full now, the quota held.
    for _ in range(14):
        assert create(member, count=1, duration_hours=12)["state"] == "active"
    beyond = create(member, count=1, duration_hours=12)
    assert beyond["state"] == "pending"
    why = member.get(f"/api/v1/requests/{beyond['code']}/why").json()
    quota_verdict = next(v for v in why["verdicts"] if v["rule"] == "quota")
    assert quota_verdict["code"] == "quota_exhausted"


def test_a_request_no_usable_gpu_could_serve_waits_for_capacity_not_quota(api, people,
                                                                          gf):
    """The only shared GPU is on a cordoned node: the granter (which knows no usable GPU
    of the kind) and `why` both say it waits for capacity — no quota is involved."""
    member, operator = people
    create_environment(api)
    gf.lifecycle.warm()  # the placement cache is read before the node exists
    token = join_token(api)
    body = registration(1, gpus=0)
    body["gpus"] = [gpu(1, 0, sharing_mode="shared")]
    assert api.as_(token).post("/api/v1/agent/register", json=body).status_code == 200
    api.post("/api/v1/nodes/node-1/cordon", json={"reason": "maintenance"})
    code = create(member, count=1, fraction=0.5)["code"]
    assert act(operator, code, "approve")["wait_code"] == "waiting_for_capacity"
    assert member.get(f"/api/v1/requests/{code}/why").json()["wait_code"] == \
        "waiting_for_capacity"


def test_why_of_a_request_held_back_by_other_projects_pools_says_so(h100s, api):
    member, operator = h100s
    _pool(api, operator, "speech", 8)  # reserves the 8 GPUs vision does not hold
    assert act(operator, create(member, count=8)["code"], "approve")["state"] == "active"
    code = create(member, count=1)["code"]
    waiting = act(operator, code, "approve")
    assert (waiting["state"], waiting["wait_code"]) == ("approved", "pool_reserved")

    why = member.get(f"/api/v1/requests/{code}/why").json()
    assert (why["waiting"], why["wait_code"]) == (True, "pool_reserved")
    assert why["summary"].startswith(f"{code} is approved, waiting: pool_reserved")
    assert [(v["rule"], v["outcome"]) for v in why["verdicts"]] == \
        [("time_window", "accept"), ("quota", "accept"), ("pool_reservation", "wait")]


def test_why_of_an_approved_request_its_pool_will_serve_agrees_with_the_granter(
        h100s, api, gf, store, clock):
    """Quota held in full by the pool, the pool with room: `why` says it can be granted
    from the pool — and the granter grants it there."""
    member, operator = h100s
    pool = _pool(api, operator, "vision", 4)
    _quota(api, "vision", 4)
    code = create(member, count=2)["code"]
    with store.write() as session:  # approved, not yet granted: the loop has not run
        lifecycle_requests.approve(session, SYSTEM, code, clock.now(), None)
    why = member.get(f"/api/v1/requests/{code}/why").json()
    assert (why["waiting"], why["wait_code"]) == (False, None)
    quota_verdict = next(v for v in why["verdicts"] if v["rule"] == "quota")
    assert (quota_verdict["code"], pool in quota_verdict["message"]) == ("within_pool", True)
    gf.lifecycle.tick()
    granted = member.get(f"/api/v1/requests/{code}").json()
    assert (granted["state"], granted["pool"]) == ("active", pool)
