"""Retiring a node or quarantining a GPU ends the bindings on it, and the allocation that
held them is flagged as degraded (issue 12, item 5). SQLite and PostgreSQL, real app."""

from __future__ import annotations

from sqlalchemy import update

from gpufleet.store.tables import Gpu
from tests.lifecycle_world import act, create


def units_by_node(request: dict, *, open_only: bool = True) -> dict[str, int]:
    counts: dict[str, int] = {}
    for unit in request["units"]:
        if unit["ended_at"] is None or not open_only:
            counts[unit["node"]] = counts.get(unit["node"], 0) + 1
    return counts


def test_retiring_a_node_ends_the_units_on_it_and_flags_the_allocation(h100s, api):
    member, operator = h100s
    code = act(operator, create(member, count=10, duration_hours=24)["code"], "approve")["code"]
    held = units_by_node(member.get(f"/api/v1/requests/{code}").json())
    lost_node = min(held, key=held.get)  # the node with fewer of its units
    kept_node = max(held, key=held.get)
    assert api.post(f"/api/v1/nodes/{lost_node}/retire",
                    json={"reason": "decommissioned"}).status_code == 200

    request = member.get(f"/api/v1/requests/{code}").json()
    assert request["state"] == "active"
    assert units_by_node(request) == {kept_node: held[kept_node]}
    assert request["wait_code"] == "units_lost"
    assert f"lost {held[lost_node]} of 10 units" in request["wait_message"]
    assert f"on {lost_node} (node retired)" in request["wait_message"]
    assert lost_node not in request["exports"]["GPUFLEET_NODE"]
    why = member.get(f"/api/v1/requests/{code}/why").json()
    assert why["wait_code"] == "units_lost" and "degraded" in why["summary"]
    lost = member.get(f"/api/v1/requests/{code}/history").json()["items"]
    event = next(e for e in lost if e["action"] == "request.units_lost")
    assert event["actor"] == "user:admin"  # the operator who retired it
    assert event["reason"] == "decommissioned"
    gpus = api.get("/api/v1/gpus", params={"node": lost_node}).json()["items"]
    assert all("allocation" not in g["labels"] for g in gpus)


def test_quarantining_a_held_gpu_ends_that_unit_only(h100s, api):
    member, operator = h100s
    code = act(operator, create(member, count=2, duration_hours=24)["code"], "approve")["code"]
    other = act(operator, create(member, count=1, duration_hours=24)["code"], "approve")["code"]
    unit = member.get(f"/api/v1/requests/{code}").json()["units"][0]
    response = api.post(f"/api/v1/gpus/{unit['gpu_uuid']}/health",
                        json={"health": "quarantined", "reason": "xid 79"})
    assert response.status_code == 200, response.text
    assert "allocation" not in response.json()["labels"]

    request = member.get(f"/api/v1/requests/{code}").json()
    assert [u["gpu_uuid"] for u in request["units"] if u["ended_at"] is None] \
        and unit["gpu_uuid"] not in request["exports"]["CUDA_VISIBLE_DEVICES"]
    assert request["wait_code"] == "units_lost"
    assert "lost 1 of 2 units at" in request["wait_message"]
    assert f"{unit['gpu_uuid']} on {unit['node']} (GPU quarantined)" in request["wait_message"]
    untouched = member.get(f"/api/v1/requests/{other}").json()
    assert untouched["wait_code"] is None and len(untouched["units"]) == 1
    # Releasing the degraded request ends the rest and clears the flag.
    released = act(member, code, "release")
    assert released["state"] == "released" and released["wait_code"] is None


def test_a_retired_node_with_no_allocations_changes_no_request(h100s, api):
    member, operator = h100s
    code = act(operator, create(member, count=8, same_node=True, duration_hours=24)["code"],
               "approve")["code"]
    node = member.get(f"/api/v1/requests/{code}").json()["units"][0]["node"]
    idle = "node-2" if node == "node-1" else "node-1"
    api.post(f"/api/v1/nodes/{idle}/retire", json={"reason": "spare"})
    request = member.get(f"/api/v1/requests/{code}").json()
    assert request["wait_code"] is None and len(request["units"]) == 8


def test_a_grant_refuses_gpus_retired_or_quarantined_after_its_checks(h100s, api, gf):
    """The race on PostgreSQL: the operator's change commits between the grant's checks and
    its write. Simulated by the one thing the grant's write can still see, the GPUs' status
    column, changed without the health and node state the checks read."""
    member, operator = h100s
    with gf.store.write() as session:
        session.execute(update(Gpu).values(status="quarantined"))
    approved = act(operator, create(member, count=1, duration_hours=1)["code"], "approve")
    assert approved["state"] == "approved" and approved["units"] == []
