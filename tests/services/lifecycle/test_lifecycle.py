"""The lifecycle through the real app on SQLite and PostgreSQL: every state transition,
quotas, pools, auto-approval, MIG and shared units, expiry by the loop, and bad input."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from gpufleet.domain.errors import Conflict
from gpufleet.domain.gpu_models import model
from gpufleet.domain.mig import MigInstanceSpec, layout_problems
from gpufleet.domain.requests import TRANSITIONS, RequestState, transition_event
from tests.helpers import create_environment, gpu, join_token, register, registration
from tests.lifecycle_world import act, create

HOUR = 3600


def open_units(api) -> dict[str, int]:
    """GPU uuid -> allocations labelled on it, over the whole fleet."""
    items = api.get("/api/v1/gpus", params={"limit": 1000}).json()["items"]
    return {g["uuid"]: g["labels"].get("allocation") for g in items}


# --- the transition table ------------------------------------------------------------------
PAIRS = list(itertools.product(RequestState, RequestState))


@pytest.mark.parametrize(("current", "target"), PAIRS,
                         ids=[f"{a.value} => {b.value}" for a, b in PAIRS])
def test_every_transition_is_allowed_or_refused(current, target):
    if (current, target) in TRANSITIONS:
        assert transition_event(current, target, "GR-1001").startswith("request.")
    else:
        with pytest.raises(Conflict) as refused:
            transition_event(current, target, "GR-1001")
        assert refused.value.code == "invalid_transition"


# --- each transition through the API ------------------------------------------------------
def test_pending_to_rejected_and_cancelled(h100s, api):
    member, operator = h100s
    rejected = act(operator, create(member, count=1)["code"], "reject", reason="not now")
    assert rejected["state"] == "rejected" and rejected["decided_by"] == "user:olga"
    cancelled = act(member, create(member, count=1)["code"], "cancel")
    assert cancelled["state"] == "cancelled"
    error = act(member, rejected["code"], "cancel", expect=409)["error"]
    assert error["code"] == "invalid_transition"


def test_reservation_waits_for_its_start_then_activates(h100s, api, gf, clock):
    member, operator = h100s
    start = clock.now() + timedelta(hours=2)
    code = create(member, count=2, starts_at=start.isoformat(), duration_hours=4)["code"]
    approved = act(operator, code, "approve")
    assert approved["state"] == "approved" and approved["wait_code"] == "waiting_for_start"
    assert member.get(f"/api/v1/requests/{code}/why").json()["wait_code"] == "waiting_for_start"
    clock.advance(2 * HOUR)
    gf.lifecycle.tick()
    active = member.get(f"/api/v1/requests/{code}").json()
    assert active["state"] == "active" and len(active["units"]) == 2
    assert active["ends_at"].startswith((clock.now() + timedelta(hours=4)).isoformat()[:16])


def test_approved_can_be_cancelled_and_can_expire_waiting(h100s, api, gf, clock):
    member, operator = h100s
    start = clock.now() + timedelta(hours=1)
    first = create(member, count=1, starts_at=start.isoformat(), duration_hours=1)["code"]
    act(operator, first, "approve")
    assert act(member, first, "cancel")["state"] == "cancelled"
    # An approved request that never found capacity expires at its end.
    act(operator, create(member, count=16)["code"], "approve")  # takes the whole fleet
    late = create(member, count=1, ends_at=(clock.now() + timedelta(hours=1)).isoformat())
    assert act(operator, late["code"], "approve")["wait_code"] == "waiting_for_capacity"
    clock.advance(HOUR)
    expired, _ = gf.lifecycle.tick()
    assert late["code"] in expired
    assert member.get(f"/api/v1/requests/{late['code']}").json()["state"] == "expired"


def test_active_expires_and_frees_its_units_for_the_queue(h100s, api, gf, clock):
    member, operator = h100s
    big = create(member, count=16, duration_hours=1)["code"]
    assert act(operator, big, "approve")["state"] == "active"
    waiting = create(member, count=4)["code"]
    assert act(operator, waiting, "approve")["state"] == "approved"
    why = member.get(f"/api/v1/requests/{waiting}/why").json()
    assert why["wait_code"] == "waiting_for_capacity" and why["queue_position"] == 1
    clock.advance(HOUR)
    expired, granted = gf.lifecycle.tick()
    assert expired == [big] and granted == 1
    assert member.get(f"/api/v1/requests/{big}").json()["state"] == "expired"
    assert member.get(f"/api/v1/requests/{waiting}").json()["state"] == "active"
    labels = open_units(api)
    assert sum(1 for v in labels.values() if v == waiting) == 4
    assert big not in labels.values()
    actions = [e["action"] for e in api.get(f"/api/v1/requests/{big}/history").json()["items"]]
    assert actions == ["request.created", "request.approved", "request.activated",
                       "request.expired"]


def test_release_frees_and_the_next_in_line_is_granted(h100s, api):
    member, operator = h100s
    first = create(member, count=16)["code"]
    act(operator, first, "approve")
    second = create(member, count=8, same_node=True)["code"]
    assert act(operator, second, "approve")["state"] == "approved"
    assert act(member, first, "release")["state"] == "released"
    assert member.get(f"/api/v1/requests/{second}").json()["state"] == "active"
    assert act(member, first, "release", expect=409)["error"]["code"] == "invalid_transition"


def test_extend_moves_the_end(h100s, api, clock):
    member, operator = h100s
    code = create(member, count=1, duration_hours=10)["code"]
    ends = act(operator, code, "approve")["ends_at"]
    extended = act(member, code, "extend", hours=5)
    assert extended["ends_at"] > ends
    assert act(member, code, "extend", expect=400,
               ends_at=clock.now().isoformat())["error"]["code"] == "not_an_extension"
    assert act(member, code, "extend", expect=400, hours=24 * 200)["error"]["code"] \
        == "duration_too_long"


# --- quotas, auto-approval, pools ---------------------------------------------------------
def test_quota_limits_and_waits(h100s, api):
    member, operator = h100s
    assert api.request("PUT", "/api/v1/projects/vision/quotas",
                       json={"flavour": "H100-80GB", "limit": 4}).status_code == 200
    error = create(member, expect=400, count=5, models=["H100-80GB"])["error"]
    assert error["code"] == "quota_exceeded"
    first = create(member, count=3, models=["H100-80GB"])
    assert first["needs_operator"] is False
    act(operator, first["code"], "approve")
    second = create(member, count=2, models=["H100-80GB"])["code"]
    assert act(operator, second, "approve")["wait_code"] == "quota_exhausted"
    why = member.get(f"/api/v1/requests/{second}/why").json()
    assert why["quotas"][0] == {"project": "vision", "flavour": "H100-80GB", "limit": 4.0,
                                "used": 3.0, "pooled": 0.0, "available": 1.0}
    shown = member.get("/api/v1/projects/vision/quotas").json()["quotas"]
    assert shown[0]["used"] == 3.0
    no_quota = create(member, count=1, project="vision", models=None)  # any model
    assert no_quota["needs_operator"] is False  # H100 is the fleet's only model: quota'd
    speech = api.post("/api/v1/requests", json={"project": "speech", "count": 1}).json()
    assert speech["needs_operator"] is True


def test_auto_approve_within_policy(h100s, api):
    member, _ = h100s
    api.request("PUT", "/api/v1/projects/vision/quotas",
                json={"flavour": "H100-80GB", "limit": 8})
    api.request("PUT", "/api/v1/projects/vision/auto-approve",
                json={"max_gpus": 1, "max_hours": 24})
    small = create(member, count=1, duration_hours=12)
    assert small["state"] == "active" and small["decided_by"] == "policy:auto-approve"
    assert create(member, count=2, duration_hours=12)["state"] == "pending"
    assert create(member, count=1, duration_hours=48)["state"] == "pending"
    assert create(member, count=1)["state"] == "pending"  # open-ended: a person decides


def test_pool_is_reserved_for_its_project(h100s, api):
    member, operator = h100s
    pool = api.post("/api/v1/pools", json={"project": "speech", "flavour": "H100-80GB",
                                           "count": 8, "reason": "asr"}).json()
    assert pool["state"] == "pending"
    approved = operator.post(f"/api/v1/pools/{pool['code']}/approve").json()
    assert approved["state"] == "active" and approved["approved_at"]
    too_big = api.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                              "count": 9}).json()
    refused = operator.post(f"/api/v1/pools/{too_big['code']}/approve")
    assert refused.status_code == 409 and refused.json()["error"]["code"] \
        == "insufficient_capacity"
    vision = create(member, count=12)["code"]
    waiting = act(operator, vision, "approve")
    assert waiting["state"] == "approved" and waiting["wait_code"] == "pool_reserved"
    fits = create(member, count=8)["code"]
    assert act(operator, fits, "approve")["state"] == "active"
    speech = api.post("/api/v1/requests", json={"project": "speech", "count": 8}).json()
    granted = act(operator, speech["code"], "approve")
    assert granted["state"] == "active" and granted["pool"] == pool["code"]
    assert operator.get(f"/api/v1/pools/{pool['code']}").json()["used"] == 8


# --- placement on MIG and shared GPUs -------------------------------------------------------
def _register_mig_node(api, number: int, gpus: int = 2) -> str:
    """Join a node of `gpus` MIG GPUs without instances; its credential."""
    token = join_token(api, "onprem-slicing")
    body = registration(number, gpus=0)
    body["gpus"] = [gpu(number, i, mig_enabled=True) for i in range(gpus)]
    reply = api.as_(token).post("/api/v1/agent/register", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["credential"]


def test_mig_request_repartitions_a_free_mig_gpu(api, people):
    member, operator = people
    create_environment(api, name="onprem-slicing")
    credential = _register_mig_node(api, 7)
    code = create(member, count=4, mig_profile="1g.10gb")["code"]
    granted = act(operator, code, "approve")
    assert granted["state"] == "active"
    units = granted["units"]
    assert {u["kind"] for u in units} == {"mig"} and {u["mig_profile"] for u in units} == \
        {"1g.10gb"}
    assert len({(u["gpu_uuid"], u["mig_start"]) for u in units}) == 4
    reply = register(api, 7, environment="onprem-slicing",
                     gpus=0) if False else None
    del reply
    detail = api.get("/api/v1/nodes/node-7").json()
    assert detail["name"] == "node-7"
    # The plan the agent receives is a valid layout holding every bound instance.
    token = api.post("/api/v1/tokens", json={"name": "probe", "role": "viewer"}).json()
    del token
    geometry = model("H100-80GB").mig
    plans = _desired_state(api, credential, 7)["mig_plans"]
    assert plans
    for plan in plans:
        layout = [MigInstanceSpec(i["profile_id"], i["placement_start"])
                  for i in plan["instances"]]
        assert layout_problems(geometry, layout) == []
    planned = {(p["gpu_uuid"], i["profile_id"], i["placement_start"])
               for p in plans for i in p["instances"]}
    assert {(u["gpu_uuid"], u["mig_profile_id"], u["mig_start"]) for u in units} <= planned
    # Ten more fill both GPUs (seven 1g.10gb fit one); the fifteenth waits.
    more = create(member, count=10, mig_profile="1g.10gb")["code"]
    assert act(operator, more, "approve")["state"] == "active"
    last = create(member, count=1, mig_profile="1g.10gb")["code"]
    assert act(operator, last, "approve")["state"] == "approved"


def _desired_state(api, credential: str, number: int) -> dict:
    """The node's desired state, as its agent gets it when it registers again."""
    body = registration(number, gpus=0)
    body["gpus"] = [gpu(number, i, mig_enabled=True) for i in range(2)]
    reply = api.as_(credential).post("/api/v1/agent/register", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["desired_state"]


def test_shared_fractions_never_pass_one_gpu(api, people):
    member, operator = people
    create_environment(api, name="onprem-shared", default_sharing_mode="shared")
    token = join_token(api, "onprem-shared")
    assert api.as_(token).post("/api/v1/agent/register",
                               json=registration(9, gpus=2)).status_code == 200
    codes = [create(member, count=1, fraction=0.4)["code"] for _ in range(5)]
    states = [act(operator, code, "approve")["state"] for code in codes]
    assert states == ["active"] * 4 + ["approved"]  # 2 per GPU: 0.4 + 0.4 <= 1 < 1.2
    gpus = api.get("/api/v1/gpus", params={"node": "node-9"}).json()["items"]
    for g in gpus:
        held = [c for c in codes[:4] if c in (g["labels"].get("allocation") or "")]
        assert len(held) <= 2
    act(member, codes[0], "release")
    assert member.get(f"/api/v1/requests/{codes[4]}").json()["state"] == "active"


# --- what is excluded, and bad input ------------------------------------------------------
def test_cordoned_nodes_and_quarantined_gpus_are_excluded(h100s, api):
    member, operator = h100s
    api.post("/api/v1/nodes/node-1/cordon", json={"reason": "maintenance"})
    items = api.get("/api/v1/gpus", params={"node": "node-2"}).json()["items"]
    api.post(f"/api/v1/gpus/{items[0]['uuid']}/health",
             json={"health": "quarantined", "reason": "xid 79"})
    code = create(member, count=8, same_node=True)["code"]
    assert act(operator, code, "approve")["state"] == "approved"
    why = member.get(f"/api/v1/requests/{code}/why").json()
    capacity = next(v for v in why["verdicts"] if v["rule"] == "capacity")
    assert capacity["outcome"] == "wait"
    assert capacity["details"]["quarantined_gpus"] == 1
    assert capacity["details"]["unschedulable_gpus"] == 8
    fits = create(member, count=7, same_node=True)["code"]
    units = act(operator, fits, "approve")["units"]
    assert {u["node"] for u in units} == {"node-2"}
    assert items[0]["uuid"] not in {u["gpu_uuid"] for u in units}


BAD = {
    "zero gpus": ({"count": 0}, 422, "validation_failed"),
    "negative gpus": ({"count": -2}, 422, "validation_failed"),
    "unknown model": ({"count": 1, "models": ["H900-1TB"]}, 400, "unknown_model"),
    "unknown mig profile": ({"count": 1, "mig_profile": "9g.999gb"}, 400,
                            "unknown_mig_profile"),
    "fraction of one": ({"count": 1, "fraction": 1.0}, 422, "validation_failed"),
    "fraction above one": ({"count": 1, "fraction": 1.5}, 422, "validation_failed"),
    "too many for one node": ({"count": 9, "same_node": True}, 400, "too_many_for_one_node"),
    "end before start": ({"count": 1, "starts_at": "2031-01-02T00:00:00Z",
                          "ends_at": "2031-01-01T00:00:00Z"}, 400, "end_before_start"),
    "too long": ({"count": 1, "duration_hours": 24 * 400}, 400, "duration_too_long"),
    "unknown project": ({"count": 1, "project": "nope"}, 404, "project_not_found"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_impossible_requests_are_refused_and_write_nothing(h100s, api, case):
    body, status, code = BAD[case]
    response = api.post("/api/v1/requests", json={"project": "vision", **body})
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert api.get("/api/v1/requests").json()["items"] == []


def test_approvals_need_an_operator_and_never_ones_own(h100s, api):
    member, operator = h100s
    code = create(member, count=1)["code"]
    assert act(member, code, "approve", expect=403)["error"]["code"] == "forbidden"
    own = operator.post("/api/v1/requests", json={"project": "vision", "count": 1}).json()
    assert act(operator, own["code"], "approve", expect=403)["error"]["code"] \
        == "self_approval"
    other = api.post("/api/v1/requests", json={"project": "speech", "count": 1}).json()
    assert member.get(f"/api/v1/requests/{other['code']}").status_code == 404
    assert act(member, other["code"], "cancel", expect=404)["error"]["code"] \
        == "request_not_found"


def test_a_user_less_operator_token_cannot_approve_its_own_request(h100s, api):
    """Self-approval is judged by the caller's actor, so a token bound to no user is held to
    the same rule as a user's token (issue 12, item 11)."""
    robot = api.as_(api.post("/api/v1/tokens", json={"name": "ci-bot", "role": "operator"})
                    .json()["token"])
    own = robot.post("/api/v1/requests", json={"project": "vision", "count": 1}).json()
    assert own["requested_by"] == "token:ci-bot"
    refused = act(robot, own["code"], "approve", expect=403)["error"]
    assert refused["code"] == "self_approval"
    assert api.get(f"/api/v1/requests/{own['code']}").json()["state"] == "pending"
    _member, operator = h100s
    assert act(operator, own["code"], "approve")["state"] == "active"
