"""GET /api/v1/gpus/{uuid}/health and POST /api/v1/gpus/{uuid}/clear over real HTTP:
who may read and act, and the refusals in the canonical error shape."""

from __future__ import annotations

from tests.helpers import create_environment, gpu_uuid, register
from tests.lifecycle_world import act, create


def quarantined_by_hand(api, operator, uuid: str, reason: str = "xid 79") -> None:
    response = operator.post(f"/api/v1/gpus/{uuid}/health",
                             json={"health": "quarantined", "reason": reason})
    assert response.status_code == 200, response.text


def test_members_read_only_the_gpus_their_projects_hold(h100s, api):
    member, operator = h100s
    code = act(operator, create(member, count=1, duration_hours=24)["code"], "approve")["code"]
    held = member.get(f"/api/v1/requests/{code}").json()["units"][0]["gpu_uuid"]
    other = next(gpu_uuid(n, i) for n in (1, 2) for i in range(8)
                 if gpu_uuid(n, i) != held)
    mine = member.get(f"/api/v1/gpus/{held}/health")
    assert mine.status_code == 200 and mine.json()["health"] == "healthy"
    assert mine.json()["history"] == [] and mine.json()["since"] is None
    refused = member.get(f"/api/v1/gpus/{other}/health")
    assert refused.status_code == 404
    assert refused.json()["error"]["code"] == "gpu_not_found"
    assert operator.get(f"/api/v1/gpus/{other}/health").status_code == 200


def test_only_operators_clear_and_the_history_says_who(h100s, api):
    member, operator = h100s
    uuid = gpu_uuid(1, 0)
    quarantined_by_hand(api, operator, uuid)
    forbidden = member.post(f"/api/v1/gpus/{uuid}/clear", json={"reason": "looks fine"})
    assert forbidden.status_code == 403
    assert forbidden.json()["error"]["code"] == "forbidden"
    cleared = operator.post(f"/api/v1/gpus/{uuid}/clear", json={"reason": "reseated"})
    assert cleared.status_code == 200, cleared.text
    body = cleared.json()
    assert body["health"] == "healthy" and body["cleared_by"] == "user:olga"
    assert [(t["from_state"], t["to_state"], t["actor"], t["reason"])
            for t in body["history"]] == [("quarantined", "healthy", "user:olga", "reseated"),
                                          ("healthy", "quarantined", "user:olga", "xid 79")]
    gpu = api.get(f"/api/v1/gpus/{uuid}").json()
    assert gpu["health"] == "healthy" and gpu["status"] == "free"
    audit = api.get("/api/v1/audit-events", params={"subject": uuid,
                                                    "action": "gpu.health_cleared"})
    assert [e["actor"] for e in audit.json()["items"]] == ["user:olga"]


def test_clearing_a_healthy_gpu_is_a_409_naming_the_state(h100s, api):
    _, operator = h100s
    response = operator.post(f"/api/v1/gpus/{gpu_uuid(1, 1)}/clear", json={"reason": "x"})
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "gpu_already_healthy" and "healthy" in error["message"]
    assert error["details"]["health"] == "healthy"


def test_bad_input_is_a_clear_4xx(api):
    create_environment(api)
    register(api, 1, gpus=2)
    unknown = api.get("/api/v1/gpus/GPU-nope/health")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "gpu_not_found"
    assert api.post("/api/v1/gpus/GPU-nope/clear", json={"reason": "x"}).status_code == 404
    no_reason = api.post(f"/api/v1/gpus/{gpu_uuid(1, 0)}/clear", json={})
    assert no_reason.status_code == 422
    empty = api.post(f"/api/v1/gpus/{gpu_uuid(1, 0)}/clear", json={"reason": ""})
    assert empty.status_code == 422
    extra = api.post(f"/api/v1/gpus/{gpu_uuid(1, 0)}/clear",
                     json={"reason": "x", "force": True})
    assert extra.status_code == 422


def test_a_quarantined_gpu_retires_for_good(h100s, api):
    member, operator = h100s
    uuid = gpu_uuid(2, 3)
    early = operator.post(f"/api/v1/gpus/{uuid}/retire", json={"reason": "RMA"})
    assert early.status_code == 409
    assert early.json()["error"]["code"] == "gpu_not_quarantined"
    quarantined_by_hand(api, operator, uuid)
    assert member.post(f"/api/v1/gpus/{uuid}/retire", json={"reason": "x"}).status_code == 403
    retired = operator.post(f"/api/v1/gpus/{uuid}/retire", json={"reason": "RMA"})
    assert retired.status_code == 200, retired.text
    assert retired.json()["health"] == "retired"
    assert retired.json()["history"][0]["to_state"] == "retired"
    gpu = api.get(f"/api/v1/gpus/{uuid}").json()
    assert (gpu["health"], gpu["status"]) == ("retired", "retired")
    listed = api.get("/api/v1/gpus", params={"health": "retired"}).json()["items"]
    assert [g["uuid"] for g in listed] == [uuid]
    # nothing returns it: not a clear, not an unquarantine, not a new quarantine
    clear = operator.post(f"/api/v1/gpus/{uuid}/clear", json={"reason": "x"})
    assert clear.status_code == 409 and clear.json()["error"]["code"] == "gpu_retired"
    back = operator.post(f"/api/v1/gpus/{uuid}/health",
                         json={"health": "healthy", "reason": "x"})
    assert back.status_code == 409 and back.json()["error"]["code"] == "gpu_retired"
    # and it is no longer capacity: of the 16 H100s, 15 are left to ask for
    refused = create(member, expect=400, count=16, duration_hours=1)
    assert refused["error"]["code"] == "not_enough_in_fleet"
    assert "the fleet has 15 H100-80GB" in refused["error"]["message"]


def test_retired_is_not_a_health_to_set_by_hand(h100s, api):
    _, operator = h100s
    response = operator.post(f"/api/v1/gpus/{gpu_uuid(1, 2)}/health",
                             json={"health": "retired", "reason": "x"})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "use_gpu_retire"
