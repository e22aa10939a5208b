"""MIG instance health end to end, on SQLite and PostgreSQL: a simulated MIG GPU reports
through the real telemetry upload; a contained XID 94 that names one instance quarantines
that instance only (its allocation loses that unit, its owner is told, the other
instances keep serving and stay placeable); an uncontained error quarantines the GPU and
so every instance on it; an application XID on an instance moves nothing; an operator
clears an instance (docs/operations.md, "MIG instances")."""

from __future__ import annotations

from sqlalchemy import select

from gpufleet.domain.requests import FlavourKind, request_id_from_code
from gpufleet.services.lifecycle import placement_state
from gpufleet.sim.faults import FaultKind
from gpufleet.store.tables import Binding, MigInstance
from gpufleet.tsdb.protocol import Sample, series
from tests.health_world import SimNode, add_receiver, outbox
from tests.helpers import create_environment
from tests.lifecycle_world import act, create
from tests.services.lifecycle.test_fixed_mig_layouts import join_mig_node

ONE_G = 19  # H100-80GB: 1g.10gb


def mig_world(api, clock, member, operator, count: int = 2) -> tuple[SimNode, dict]:
    """A MIG H100 node (GPU 1: 7 × 1g.10gb) and `mia` holding `count` 1g.10gb instances."""
    create_environment(api)
    node = SimNode(api, clock, shape="mig-h100")
    code = act(operator, create(member, count=count, mig_profile="1g.10gb",
                                duration_hours=24)["code"], "approve")["code"]
    request = member.get(f"/api/v1/requests/{code}").json()
    assert request["state"] == "active"
    assert len({u["gpu_uuid"] for u in request["units"]}) == 1  # one GPU, two instances
    node.sync()
    node.upload(ticks=3)
    return node, request


def open_units(gf, request_code: str) -> list[tuple[int, int]]:
    number = request_id_from_code(request_code)
    with gf.store.read() as s:
        return sorted(tuple(row) for row in s.execute(
            select(Binding.mig_profile_id, Binding.mig_start).where(
                Binding.request_id == number, Binding.ended_at.is_(None))))


def held_slots(gf, gpu: str) -> dict[int, bool]:
    """The 1g.10gb instances of `gpu` as the placement loads them: start → held."""
    with gf.store.read() as s:
        live = placement_state.load(s, kinds=[FlavourKind.MIG])
    state = next(g for n in live.state.nodes for g in n.gpus if g.key == gpu)
    return {slot.start: slot.bound for slot in state.mig_instances
            if slot.profile_id == ONE_G}


def test_a_contained_xid_94_quarantines_its_instance_only(api, gf, clock, people):
    member, operator = people
    add_receiver(gf)  # the users' own inbox: tells owners
    node, request = mig_world(api, clock, member, operator)
    gpu = request["units"][0]["gpu_uuid"]
    struck, spared = request["units"][0], request["units"][1]
    assert gf.evaluate_gpu_health() == []

    clock.advance(60)
    node.strike(gpu, FaultKind.ECC_UNCORRECTED, mig_uuid=struck["mig_uuid"])
    node.upload(ticks=2)
    moves = gf.evaluate_gpu_health()

    # the GPU wants a reset (a row remapping is pending): suspect, still in service
    assert moves == [(gpu, "healthy", "suspect", "xid"),
                     (struck["mig_uuid"], "healthy", "quarantined", "mig_xid")]
    view = api.get(f"/api/v1/gpus/{gpu}/health").json()
    assert view["health"] == "suspect"
    instances = {m["mig_uuid"]: m for m in view["mig_instances"]}
    hit = instances[struck["mig_uuid"]]
    assert (hit["health"], hit["in_service"], hit["rule"]) == ("quarantined", False, "mig_xid")
    assert hit["evidence"]["line"] == (f"XID 94 (contained ECC error) on MIG instance "
                                       f"{struck['mig_uuid']}: +1 in 10 min")
    assert [(t["from_state"], t["to_state"], t["mig_uuid"]) for t in hit["history"]] == \
        [("healthy", "quarantined", struck["mig_uuid"])]
    others = [m for uuid, m in instances.items() if uuid != struck["mig_uuid"]]
    assert others and all(m["health"] == "healthy" and m["in_service"] for m in others)
    assert all(t["mig_uuid"] is None for t in view["history"])  # the GPU's own history

    # the allocation keeps its other instance; its owner is told which one went
    assert open_units(gf, request["code"]) == [(ONE_G, spared["mig_start"])]
    after = member.get(f"/api/v1/requests/{request['code']}").json()
    assert after["wait_code"] == "units_lost" and "lost 1 of 2 units" in after["wait_message"]
    summary = (f"{request['code']}: MIG instance {struck['mig_uuid']} (1g.10gb) of {gpu} on "
               f"dgx-health-1 quarantined (XID 94 (contained ECC error) on MIG instance "
               f"{struck['mig_uuid']}: +1 in 10 min); 1 of 2 units lost")
    assert outbox(gf) == [("inbox", "mia", "health.quarantined", summary)]

    # placement: the struck instance is held by its quarantine, the free ones stay free
    slots = held_slots(gf, gpu)
    assert slots[struck["mig_start"]] is True and slots[spared["mig_start"]] is True
    free = sorted(start for start, held in slots.items() if not held)
    assert len(free) == 5
    more = act(operator, create(member, count=5, mig_profile="1g.10gb",
                                duration_hours=1)["code"], "approve")
    assert more["state"] == "active"
    assert (gpu, struck["mig_start"]) not in {(u["gpu_uuid"], u["mig_start"])
                                              for u in more["units"]}

    clock.advance(60)
    node.upload()
    assert gf.evaluate_gpu_health() == []  # idempotent: nothing moves, nobody told twice
    assert len(outbox(gf)) == 1

    # only operators clear; a healthy instance, or one the GPU lacks, is said so
    body = {"reason": "GPU reset", "mig_instance": struck["mig_uuid"]}
    assert member.post(f"/api/v1/gpus/{gpu}/clear", json=body).status_code == 403
    missing = operator.post(f"/api/v1/gpus/{gpu}/clear",
                            json={**body, "mig_instance": "MIG-nope"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "mig_instance_not_found"
    cleared = operator.post(f"/api/v1/gpus/{gpu}/clear", json=body)
    assert cleared.status_code == 200, cleared.text
    back = {m["mig_uuid"]: m for m in cleared.json()["mig_instances"]}[struck["mig_uuid"]]
    assert (back["health"], back["in_service"], back["cleared_by"]) == \
        ("healthy", True, "user:olga")
    assert cleared.json()["health"] == "suspect"  # the GPU's own state is its own
    again = operator.post(f"/api/v1/gpus/{gpu}/clear", json=body)
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "mig_instance_already_healthy"
    clock.advance(60)
    node.upload()
    assert gf.evaluate_gpu_health() == []  # the old XID is not news after the clear
    assert held_slots(gf, gpu)[struck["mig_start"]] is False  # placeable again
    audit = api.get("/api/v1/audit-events", params={"subject": gpu}).json()["items"]
    assert [e["action"] for e in audit][:3] == ["gpu.mig_health_cleared",
                                                "gpu.mig_health_changed",
                                                "gpu.health_changed"]


def test_an_uncontained_error_quarantines_the_gpu_and_every_instance(api, gf, clock, people):
    """XID 95 (uncontained) and a failed row remapping are the GPU's, even when the errors
    struck one instance's memory: the GPU goes, and every binding on it."""
    member, operator = people
    node, request = mig_world(api, clock, member, operator)
    gpu = request["units"][0]["gpu_uuid"]
    clock.advance(60)
    node.strike(gpu, FaultKind.ROW_REMAP_FAILURE, mig_uuid=request["units"][0]["mig_uuid"])
    node.upload(ticks=2)
    assert gf.evaluate_gpu_health() == [(gpu, "healthy", "quarantined", "xid")]
    assert open_units(gf, request["code"]) == []
    view = api.get(f"/api/v1/gpus/{gpu}/health").json()
    assert view["mig_instances"]
    assert all(m["health"] == "healthy" and not m["in_service"]
               for m in view["mig_instances"])
    with gf.store.read() as s:
        live = placement_state.load(s, kinds=[FlavourKind.MIG])
    assert gpu not in {g.key for n in live.state.nodes for g in n.gpus}


def test_an_application_xid_on_an_instance_never_moves_it(api, gf, clock, people):
    member, operator = people
    _, request = mig_world(api, clock, member, operator)
    unit = request["units"][0]
    clock.advance(60)
    for code in ("13", "31", "43", "45"):
        gf.telemetry.write([Sample(series("gpu.xid_errors_total", unit["gpu_uuid"],
                                          unit["mig_uuid"], labels={"xid": code},
                                          node="dgx-health-1"), clock.now(), 1.0)])
    clock.advance(30)
    assert gf.evaluate_gpu_health() == []
    assert len(open_units(gf, request["code"])) == 2


def test_a_contained_xid_the_reader_could_not_attribute_stays_the_gpus(
        api, gf, clock, people):
    """A backend that cannot name the instance files XID 94 under the GPU: the GPU rules
    judge it as before MIG health — the uncorrectable ECC increase, which no instance is
    known to have contained, quarantines the GPU (and every instance with it)."""
    member, operator = people
    node, request = mig_world(api, clock, member, operator)
    gpu = request["units"][0]["gpu_uuid"]
    clock.advance(60)
    node.strike(gpu, FaultKind.ECC_UNCORRECTED)
    node.upload(ticks=2)
    assert gf.evaluate_gpu_health() == [(gpu, "healthy", "quarantined", "ecc_uncorrected")]


def test_a_grant_placed_before_a_quarantine_never_binds_the_instance(api, gf, people):
    """The placement may decide on a cached fleet that predates an instance's quarantine:
    writing the grant re-reads the instances and refuses it (and the request waits, as
    the node has no other free 1g.10gb)."""
    member, operator = people
    join_mig_node(api, "nvml")  # fixed layout: 1g.10gb at 0, 3g.40gb at 4
    warm = act(operator, create(member, count=1, mig_profile="3g.40gb")["code"], "approve")
    assert warm["state"] == "active"  # the placement has the fleet cached now
    with gf.store.write() as s:  # quarantined behind the cache's back
        instance = s.scalar(select(MigInstance).where(MigInstance.mig_uuid == "MIG-1g-at-0"))
        instance.health = "quarantined"
    late = act(operator, create(member, count=1, mig_profile="1g.10gb")["code"], "approve")
    assert late["state"] == "approved" and late["units"] == []
    with gf.store.read() as s:
        assert s.scalar(select(Binding.id).where(Binding.mig_start == 0,
                                                 Binding.ended_at.is_(None))) is None
