"""The health loop end to end, on SQLite and PostgreSQL: a simulated GPU reports XID 79
through the real telemetry upload, one evaluation quarantines it, the allocation on it
loses the unit, its owner is told through the outbox; a second evaluation does nothing;
an operator clears it and the history says who."""

from __future__ import annotations

from gpufleet.sim.faults import FaultKind
from tests.health_world import add_receiver, allocate, outbox, sim_world
from tests.helpers import create_environment, gpu_uuid, register


def test_an_xid_79_gpu_is_quarantined_and_its_owner_told(api, gf, clock, people):
    member, operator = people
    node = sim_world(api, clock)
    add_receiver(gf)  # the users' own inbox: tells owners
    add_receiver(gf, "ops-channel", kind="webhook", broadcast=True, tells_owners=False)
    request = allocate(member, operator, count=2)
    struck = request["units"][0]["gpu_uuid"]
    node.upload(ticks=3)
    assert gf.evaluate_gpu_health() == []  # a healthy fleet: nothing moves

    clock.advance(60)
    node.strike(struck, FaultKind.FALLEN_OFF_BUS)
    node.upload(ticks=2)
    clock.advance(30)
    moves = gf.evaluate_gpu_health()

    assert moves == [(struck, "healthy", "quarantined", "xid")]
    view = api.get(f"/api/v1/gpus/{struck}/health").json()
    assert view["health"] == "quarantined" and view["rule"] == "xid"
    assert view["evidence"]["metric"] == "gpu.xid_errors_total"
    assert view["evidence"]["line"].startswith("XID 79 (GPU has fallen off the bus)")
    assert [(t["from_state"], t["to_state"], t["actor"]) for t in view["history"]] == \
        [("healthy", "quarantined", "system:health")]
    after = member.get(f"/api/v1/requests/{request['code']}").json()
    assert after["wait_code"] == "units_lost" and "lost 1 of 2 units" in after["wait_message"]
    summary = (f"{request['code']}: {struck} on dgx-health-1 quarantined (XID 79 (GPU has "
               f"fallen off the bus): +1 in 10 min); 1 of 2 units lost")
    assert outbox(gf) == [("inbox", "mia", "health.quarantined", summary),
                          ("ops-channel", None, "health.quarantined", summary)]
    placed = api.get("/api/v1/gpus", params={"health": "quarantined"}).json()["items"]
    assert [g["uuid"] for g in placed] == [struck]

    clock.advance(60)
    node.upload()
    assert gf.evaluate_gpu_health() == []  # idempotent: nothing moves, nobody told twice
    assert len(outbox(gf)) == 2

    cleared = operator.post(f"/api/v1/gpus/{struck}/clear", json={"reason": "reseated"})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["health"] == "healthy"
    assert cleared.json()["cleared_by"] == "user:olga"
    clock.advance(60)
    node.upload()
    assert gf.evaluate_gpu_health() == []  # the old XID is not news after the clear
    audit = api.get("/api/v1/audit-events", params={"subject": struck}).json()["items"]
    assert [e["action"] for e in audit][:2] == ["gpu.health_cleared", "gpu.health_changed"]


def test_an_uncorrectable_ecc_error_quarantines_whatever_the_xids_say(api, gf, clock, people):
    """On Hopper an uncorrectable error is XID 94 (contained: suspect) plus XID 63; the
    increase of the uncorrectable ECC counter is what quarantines."""
    member, operator = people
    node = sim_world(api, clock)
    gpu = allocate(member, operator, count=1)["units"][0]["gpu_uuid"]
    node.upload(ticks=2)
    clock.advance(60)
    node.strike(gpu, FaultKind.ECC_UNCORRECTED)
    node.upload(ticks=2)
    assert gf.evaluate_gpu_health() == [(gpu, "healthy", "quarantined", "ecc_uncorrected")]


def test_a_gpu_an_operator_quarantines_by_hand_is_in_the_history_and_owners_told(
        api, gf, clock, people):
    member, operator = people
    sim_world(api, clock)
    add_receiver(gf)
    request = allocate(member, operator, count=1)
    gpu = request["units"][0]["gpu_uuid"]
    response = operator.post(f"/api/v1/gpus/{gpu}/health",
                             json={"health": "quarantined", "reason": "fans failing"})
    assert response.status_code == 200, response.text
    view = api.get(f"/api/v1/gpus/{gpu}/health").json()
    assert view["rule"] is None and view["history"][0]["actor"] == "user:olga"
    assert view["history"][0]["reason"] == "fans failing"
    assert outbox(gf) == [("inbox", "mia", "health.quarantined",
                           f"{request['code']}: {gpu} on dgx-health-1 quarantined (by "
                           f"user:olga: fans failing); 1 of 1 units lost")]
    operator.post(f"/api/v1/gpus/{gpu}/health", json={"health": "healthy", "reason": "ok"})
    history = api.get(f"/api/v1/gpus/{gpu}/health").json()["history"]
    assert [(t["from_state"], t["to_state"]) for t in history] == \
        [("quarantined", "healthy"), ("healthy", "quarantined")]


def test_a_sustained_thermal_slowdown_marks_suspect_tells_broadcast_only_then_clears(
        api, gf, clock, people, settings):
    member, operator = people
    node = sim_world(api, clock)
    add_receiver(gf)
    add_receiver(gf, "ops-channel", kind="webhook", broadcast=True, tells_owners=False)
    request = allocate(member, operator, count=1)
    hot = request["units"][0]["gpu_uuid"]
    node.train(request["code"])
    node.sync()
    node.strike(hot, FaultKind.THERMAL)
    node.upload(ticks=11)
    assert gf.evaluate_gpu_health() == [(hot, "healthy", "suspect", "thermal_slowdown")]
    assert outbox(gf) == [("ops-channel", None, "health.suspect",
                           f"{hot} on dgx-health-1 is suspect (thermal slowdown in 90% of "
                           "samples over 10 min)")]
    gpu = api.get(f"/api/v1/gpus/{hot}").json()
    assert gpu["health"] == "suspect" and gpu["status"] == "allocated"  # still usable

    operator.post(f"/api/v1/requests/{request['code']}/release", json={"reason": "done"})
    node.sync()  # nothing runs on it now: it cools down
    clock.advance(settings.health_suspect_hold_s)
    node.upload(ticks=11)
    assert gf.evaluate_gpu_health() == [(hot, "suspect", "healthy", None)]


def test_a_gpu_missing_from_its_nodes_inventory_is_quarantined_after_the_grace(
        api, gf, clock, settings):
    create_environment(api)
    register(api, 1, gpus=2)
    clock.advance(3 * 86_400)  # the node registered long before the GPU went missing
    register(api, 1, gpus=1)  # GPU 1 is gone from the node's inventory
    gone = gpu_uuid(1, 1)
    assert api.get(f"/api/v1/gpus/{gone}").json()["health"] == "suspect"
    assert gf.evaluate_gpu_health() == []  # suspect already; not missing for long yet
    clock.advance(settings.health_missing_quarantine_s - 60)
    assert gf.evaluate_gpu_health() == []
    clock.advance(60)
    assert gf.evaluate_gpu_health() == [(gone, "suspect", "quarantined",
                                         "missing_from_inventory")]
    view = api.get(f"/api/v1/gpus/{gone}/health").json()
    assert view["evidence"]["line"].startswith("missing from its node's inventory since ")
