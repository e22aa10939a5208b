"""The placement cache follows the fleet, and the database stays the guard.

Grants decide on the server's in-memory copy of the fleet (services/lifecycle/placement_cache.py).
These tests load that copy first, then change the fleet the ways an operator or an agent
does — quarantine, cordon, a new node, a release — and check the next grant sees it. With
several servers (several caches) on one database, a stale copy can pick a unit another
server holds: the database refuses it and the grant tries again elsewhere.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import func, select

from gpufleet.domain.requests import FlavourKind
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.store.tables import Binding
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, register


def grant(gf: Gpufleet, count: int = 1, **body):
    code = gf.lifecycle.create_request(SYSTEM, RequestCreate(project="vision", count=count,
                                                             **body)).code
    return gf.lifecycle.approve(SYSTEM, code, None)


def nodes_of(view) -> set[str]:
    return {unit.node for unit in view.units}


def test_a_quarantined_gpu_and_a_cordoned_node_are_not_granted_after_the_cache_loaded(
        two_nodes, api, gf):
    gf.lifecycle.warm()
    cordoned = api.post("/api/v1/nodes/node-1/cordon", json={"reason": "maintenance"})
    assert cordoned.status_code == 200, cordoned.text
    gpus = api.get("/api/v1/gpus?node=node-2").json()["items"]
    quarantined = gpus[0]["uuid"]
    response = api.post(f"/api/v1/gpus/{quarantined}/health",
                        json={"health": "quarantined", "reason": "XID 79"})
    assert response.status_code == 200, response.text
    gf.lifecycle.warm()  # re-reads what was marked stale: no grant needs to be refused
    assert set(gf.lifecycle.placement.live.node_ids) == {"node-2"}
    assert quarantined not in gf.lifecycle.placement.live.gpu_ids
    granted = [grant(gf) for _ in range(4)]
    assert [g.state for g in granted] == ["active"] * 3 + ["approved"]
    held = {u.gpu_uuid for g in granted for u in g.units}
    assert quarantined not in held and all(nodes_of(g) <= {"node-2"} for g in granted)


def test_a_node_registered_after_the_cache_loaded_takes_grants(api, gf):
    create_environment(api)
    register(api, 1, gpus=4)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})
    gf.lifecycle.warm()
    assert grant(gf, count=4, same_node=True).state == "active"
    assert grant(gf, count=1).state == "approved"  # the fleet is full
    register(api, 2, gpus=4)
    assert nodes_of(grant(gf, count=2, same_node=True)) == {"node-2"}


def test_released_units_are_granted_again(two_nodes, gf):
    first = grant(gf, count=4, same_node=True)
    second = grant(gf, count=4, same_node=True)
    assert first.state == second.state == "active"
    waiting = grant(gf, count=4, same_node=True)
    assert waiting.state == "approved"
    gf.lifecycle.release(SYSTEM, first.code, "done")  # the queue is granted on release
    now = gf.lifecycle.show_request(SYSTEM, waiting.code)
    assert now.state == "active" and nodes_of(now) == nodes_of(first)


def test_expired_units_are_granted_again_by_the_loop(two_nodes, gf, clock):
    short = grant(gf, count=4, same_node=True, duration_hours=1)
    grant(gf, count=4, same_node=True)
    waiting = grant(gf, count=4, same_node=True)
    clock.advance(2 * 3600)
    expired, granted = gf.lifecycle.tick()
    assert expired == [short.code] and granted == 1
    assert nodes_of(gf.lifecycle.show_request(SYSTEM, waiting.code)) == nodes_of(short)


def test_a_server_with_a_stale_cache_is_refused_by_the_database_and_tries_elsewhere(
        two_nodes, gf, store, settings, clock):
    other = Gpufleet(store, settings, clock)  # a second server process, its own cache
    gf.lifecycle.warm()
    other.lifecycle.warm()
    taken = grant(other, count=4, same_node=True)  # gf's cache still sees node free
    mine = grant(gf, count=4, same_node=True)
    assert mine.state == "active" and nodes_of(mine) != nodes_of(taken)
    assert grant(gf, count=1).state == "approved"  # and it now knows the fleet is full


def test_fifty_approvals_on_three_servers_never_hold_a_unit_twice(two_nodes, gf, store,
                                                                   settings, clock):
    servers = [gf, Gpufleet(store, settings, clock), Gpufleet(store, settings, clock)]
    for server in servers:
        server.lifecycle.warm()
    codes = [gf.lifecycle.create_request(SYSTEM, RequestCreate(
        project="vision" if i % 2 else "speech", count=1)).code for i in range(50)]

    def approve(numbered):
        number, code = numbered
        return servers[number % 3].lifecycle.approve(SYSTEM, code, None).state

    with ThreadPoolExecutor(max_workers=12) as pool:
        states = list(pool.map(approve, enumerate(codes)))
    assert states.count("active") == 8 and states.count("approved") == 42
    with store.read() as session:
        open_per_gpu = session.execute(
            select(Binding.gpu_id, func.count()).where(Binding.ended_at.is_(None))
            .group_by(Binding.gpu_id)).all()
    assert len(open_per_gpu) == 8 and all(n == 1 for _, n in open_per_gpu)


def test_a_full_reread_runs_beside_the_grants_and_keeps_what_they_did(two_nodes, gf,
                                                                       monkeypatch):
    """Once the copy is older than placement_cache_max_age_s the fleet is re-read in
    another thread (seconds at 100,000 GPUs); grants go on meanwhile, and the nodes they
    touched are re-read once the new copy is in: it was read before they committed."""
    gf.lifecycle.warm()
    cache = gf.lifecycle.placement
    reading, go_on = threading.Event(), threading.Event()
    read_fleet = cache.read_fleet

    def slow_read(session):
        fleet = read_fleet(session)  # read before either grant below commits
        reading.set()
        go_on.wait(10)
        return fleet

    monkeypatch.setattr(cache, "read_fleet", slow_read)
    cache.max_age_s = 0  # the next grant finds the copy too old
    assert grant(gf, count=4, same_node=True).state == "active"
    assert reading.wait(10)
    cache.max_age_s = 3600
    assert grant(gf, count=4, same_node=True).state == "active"  # not waiting on the read
    go_on.set()
    deadline = time.monotonic() + 10
    while cache._touched_while_reading is not None:
        assert time.monotonic() < deadline, "the re-read never came in"
        time.sleep(0.01)
    with gf.store.read() as session:
        cache.refresh(session)
    assert sum(cache.free_milli(FlavourKind.WHOLE, model)
               for model in cache.models(FlavourKind.WHOLE)) == 0
