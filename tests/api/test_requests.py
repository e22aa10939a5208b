"""The GPU lifecycle through the real app: request → approval → bound units → release."""

from __future__ import annotations

from tests.helpers import register
from tests.lifecycle_world import create


def test_request_approve_bind_and_release(h100s, api):
    member, operator = h100s
    request = create(member, count=8, models=["H100-80GB"], same_node=True,
                     duration_hours=24 * 14, reason="pretraining")
    code = request["code"]
    assert request["state"] == "pending" and code.startswith("GR-")
    why = member.get(f"/api/v1/requests/{code}/why").json()
    assert why["waiting"] and why["wait_code"] == "awaiting_approval"
    assert why["queue_position"] == 1

    approved = operator.post(f"/api/v1/requests/{code}/approve", json={"reason": "ok"})
    assert approved.status_code == 200, approved.text
    body = approved.json()
    assert body["state"] == "active"
    assert len(body["units"]) == 8 and len({u["node"] for u in body["units"]}) == 1
    assert body["exports"]["GPUFLEET_ALLOCATION"] == code
    assert len(body["exports"]["CUDA_VISIBLE_DEVICES"].split(",")) == 8
    why = member.get(f"/api/v1/requests/{code}/why").json()
    assert not why["waiting"] and why["verdicts"] == []  # active: nothing to wait on

    listed = api.get("/api/v1/gpus", params={"label": f"allocation={code}"}).json()["items"]
    assert len(listed) == 8
    assert all(g["labels"]["project"] == "vision" and g["status"] == "allocated"
               for g in listed)

    released = member.post(f"/api/v1/requests/{code}/release")
    assert released.status_code == 200, released.text
    assert released.json()["state"] == "released"
    assert api.get("/api/v1/gpus", params={"label": f"allocation={code}"}).json()["items"] == []
    history = [e["action"] for e in api.get(f"/api/v1/requests/{code}/history").json()["items"]]
    assert history == ["request.created", "request.approved", "request.activated",
                       "request.released"]


def test_heartbeat_carries_the_bindings(h100s, api):
    member, operator = h100s
    code = create(member, count=2, models=["H100-80GB"], same_node=True)["code"]
    units = operator.post(f"/api/v1/requests/{code}/approve").json()["units"]
    node = units[0]["node"]
    number = int(node.split("-")[1])
    reply = register(api, number)  # re-registration is idempotent and returns the state
    state = reply["desired_state"]
    assert {b["gpu_uuid"] for b in state["bindings"]} == {u["gpu_uuid"] for u in units}
    assert {b["allocation"] for b in state["bindings"]} == {code}


def test_placement_fleet_state_round_trips(h100s, api):
    from gpufleet.domain.placement import FleetState

    member, operator = h100s
    code = create(member, count=3, same_node=True)["code"]
    operator.post(f"/api/v1/requests/{code}/approve")
    data = api.get("/api/v1/placement/fleet-state").json()
    state = FleetState.from_json(data)
    bound = [g for n in state.nodes for g in n.gpus if g.whole_bound]
    assert len(bound) == 3 and sum(len(n.gpus) for n in state.nodes) == 16


def test_lengths_and_times_out_of_range_are_refused_naming_the_field(h100s, api):
    """A year-1 start was accepted (a request pending until then), and a year-9999 start or
    a 10¹² h duration failed in the state store with a message naming neither."""
    member, _ = h100s
    base = {"project": "vision", "count": 1, "reason": "r"}
    for extra, field in [({"duration_hours": 1e12}, "duration_hours"),
                         ({"duration_hours": 1e300}, "duration_hours"),
                         ({"starts_at": "9999-12-31T23:00:00Z", "duration_hours": 5},
                          "starts_at"),
                         ({"starts_at": "0001-01-01T00:00:00Z", "duration_hours": 5},
                          "starts_at"),
                         ({"ends_at": "9999-12-31T23:59:59Z"}, "ends_at")]:
        response = member.post("/api/v1/requests", json={**base, **extra})
        assert response.status_code == 422, response.text
        assert response.json()["error"]["details"]["errors"][0]["field"] == field, extra
    assert member.get("/api/v1/requests").json()["items"] == []
    code = create(member, count=1, duration_hours=5, reason="r")["code"]
    response = member.post(f"/api/v1/requests/{code}/extend",
                           json={"ends_at": "0001-01-01T00:00:00Z"})
    assert response.status_code == 422, response.text


def test_a_code_naming_no_storable_id_is_not_found(api):
    """A number beyond the store's 64-bit ids, or digits `int` refuses ('²'), names no
    request or pool: a 404, not a 400 from the database driver or a 500."""
    for code in ("GR-99999999999999999999999", "GR-1²", "GR-1000"):
        response = api.get(f"/api/v1/requests/{code}")
        assert response.status_code == 404, (code, response.text)
        assert response.json()["error"]["code"] == "request_not_found"
    for code in ("POOL-99999999999999999999999", "POOL-²"):
        response = api.get(f"/api/v1/pools/{code}")
        assert response.status_code == 404, (code, response.text)
