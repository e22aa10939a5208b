"""POST /api/v1/requests/preview: what creating a request would come to, writing nothing —
the same checks, verdicts and placement plan as the real thing, so the preview cannot lie."""

from __future__ import annotations

from tests.lifecycle_world import create

BODY = {"project": "vision", "count": 2, "models": ["H100-80GB"], "same_node": True,
        "duration_hours": 4}


def preview(api, expect: int = 200, **body):
    response = api.post("/api/v1/requests/preview", json={**BODY, **body})
    assert response.status_code == expect, response.text
    return response.json()


def counts(api) -> tuple[int, int]:
    requests = api.get("/api/v1/requests").json()["items"]
    events = api.get("/api/v1/audit-events", params={"limit": 200}).json()["items"]
    return len(requests), len(events)


def test_a_pending_preview_names_its_verdicts_and_placement_and_writes_nothing(h100s, api):
    member, _ = h100s
    before = counts(api)
    found = preview(member)
    assert counts(api) == before
    assert found["state"] == "pending" and found["needs_operator"]
    rules = {v["rule"]: v for v in found["admission"]}
    assert list(rules) == ["time_window", "maximum_duration", "quota", "approval"]
    assert rules["quota"]["code"] == "no_quota"
    assert rules["approval"]["code"] == "awaiting_approval"
    placement = found["placement"]
    assert placement["placed"] and len(placement["units"]) == 2
    assert len(set(placement["nodes"])) == 1  # same node, as asked
    assert placement["message"] == "2 units on 1 node, from free capacity"
    assert {u["model"] for u in placement["units"]} == {"H100-80GB"}


def test_the_preview_places_where_approval_then_places(h100s, api):
    member, operator = h100s
    planned = preview(member, count=3)["placement"]
    code = create(member, **{**BODY, "count": 3})["code"]
    granted = operator.post(f"/api/v1/requests/{code}/approve").json()
    assert sorted(u["gpu_uuid"] for u in granted["units"]) == sorted(
        u["gpu_uuid"] for u in planned["units"])


def test_within_the_auto_approve_policy_it_would_be_approved(h100s, api):
    member, _ = h100s
    api.request("PUT", "/api/v1/projects/vision/quotas", json={"flavour": "H100-80GB", "limit": 4})
    api.request("PUT", "/api/v1/projects/vision/auto-approve", json={"max_gpus": 2, "max_hours": 8})
    found = preview(member)
    assert found["state"] == "approved"
    assert found["admission"][-1]["code"] == "auto_approved"
    assert [q["flavour"] for q in found["quotas"]] == ["H100-80GB"]
    created = create(member, **BODY)
    assert created["state"] == "active"  # what the preview said: approved, and placed


def test_no_room_now_is_a_wait_with_the_granters_reason(h100s, api):
    member, operator = h100s
    code = create(member, count=16, models=["H100-80GB"])["code"]
    assert operator.post(f"/api/v1/requests/{code}/approve").json()["state"] == "active"
    placement = preview(member, count=1)["placement"]
    assert not placement["placed"] and placement["wait_code"] == "waiting_for_capacity"
    assert placement["steps"][-1]["rule"] == "capacity"


def test_refused_as_creation_refuses(h100s, api):
    member, _ = h100s
    too_many = preview(member, 400, count=17, same_node=False)
    assert too_many["error"]["code"] == "not_enough_in_fleet"
    assert preview(member, 403, project="speech")["error"]["code"] == "not_a_member"
    assert preview(member, 422, count=0)["error"]["code"]
    viewer = api.post("/api/v1/tokens", json={"name": "v", "role": "viewer"}).json()["token"]
    assert preview(api.as_(viewer), 403)["error"]["code"] == "forbidden"
