"""Ending a pool through real HTTP, on SQLite and PostgreSQL: who may, what it frees, and
what it refuses (docs/lifecycle.md, "Pools": ending a pool)."""

from __future__ import annotations

import threading
import time
from datetime import datetime

import pytest
from sqlalchemy import func, select

from gpufleet.domain.errors import Conflict
from gpufleet.domain.placement import StaleDecision
from gpufleet.domain.requests import pool_id_from_code
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.lifecycle import granting, pools
from gpufleet.store.tables import AuditEvent
from tests.lifecycle_world import act, create


def _pool(api, operator, count: int = 4, project: str = "vision") -> str:
    asked = api.post("/api/v1/pools", json={"project": project, "flavour": "H100-80GB",
                                            "count": count, "reason": "steady training"})
    assert asked.status_code == 201, asked.text
    code = asked.json()["code"]
    approved = operator.post(f"/api/v1/pools/{code}/approve")
    assert approved.json()["state"] == "active", approved.text
    return code


def _end(caller, code: str, expect: int, **body):
    response = caller.post(f"/api/v1/pools/{code}/end", json=body or None)
    assert response.status_code == expect, response.text
    return response.json()["error"] if expect >= 400 else response.json()


def _ended_events(api, code: str) -> list[dict]:
    events = api.get("/api/v1/audit-events", params={"limit": 500}).json()["items"]
    return [e for e in events if e["action"] == "pool.ended" and e["subject"] == code]


def test_a_member_ends_their_projects_pool_and_it_is_audited(h100s, api, clock):
    member, operator = h100s
    code = _pool(api, operator)
    clock.advance(3600)
    ended = _end(member, code, 200, reason="training finished")
    assert (ended["state"], ended["ended_by"], ended["end_reason"]) == \
        ("ended", "user:mia", "training finished")
    assert datetime.fromisoformat(ended["ended_at"]) == clock.now()
    assert api.get(f"/api/v1/pools/{code}").json() == ended
    (event,) = _ended_events(api, code)
    assert (event["actor"], event["reason"]) == ("user:mia", "training finished")
    (streamed,) = member.get("/api/v1/events", params={"type": "pool.ended"}).json()["items"]
    assert (streamed["subject"]["id"], streamed["labels"]["project"]) == (code, "vision")
    listed = member.get("/api/v1/pools", params={"state": "ended"}).json()["items"]
    assert [p["code"] for p in listed] == [code]
    assert member.get("/api/v1/pools", params={"state": "active"}).json()["items"] == []


def test_who_may_end_a_pool(h100s, api):
    member, operator = h100s
    speech = _pool(api, operator, project="speech")
    viewer = api.as_(api.post("/api/v1/tokens", json={"name": "vic", "role": "viewer"})
                     .json()["token"])
    assert _end(viewer, speech, 403)["code"] == "forbidden"
    # Another project's member does not see the pool at all: as GET, not found.
    assert _end(member, speech, 404)["code"] == "pool_not_found"
    assert _end(operator, speech, 200)["ended_by"] == "user:olga"
    assert _end(api, _pool(api, operator, project="speech"), 200)["state"] == "ended"


def test_only_an_active_pool_ends_and_only_once(h100s, api):
    member, operator = h100s
    code = _pool(api, operator)
    _end(member, code, 200)
    twice = _end(member, code, 409)
    assert (twice["code"], twice["details"]["state"]) == ("invalid_transition", "ended")
    pending = api.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                              "count": 1}).json()["code"]
    refused = _end(member, pending, 409)
    assert "pending" in refused["message"] and "rejects" in refused["message"]
    operator.post(f"/api/v1/pools/{pending}/reject", json={"reason": "no"})
    assert _end(member, pending, 409)["details"]["state"] == "rejected"
    assert len(_ended_events(api, code)) == 1
    assert _end(member, "POOL-999", 404)["code"] == "pool_not_found"
    assert _end(member, code, 422, at="2026-01-01T00:00:00Z")  # a time is not taken


def test_a_pool_whose_units_are_held_is_not_ended(h100s, api):
    """Its own bindings are charged as its usage at no cost: ending under them would hand
    out GPUs for free. The refusal names the requests; released, the pool ends."""
    member, operator = h100s
    code = _pool(api, operator, count=4)
    held = [act(operator, create(member, count=2)["code"], "approve") for _ in range(2)]
    assert [r["pool"] for r in held] == [code, code]
    refused = _end(member, code, 409)
    assert refused["code"] == "pool_in_use"
    assert refused["details"]["requests"] == [r["code"] for r in held]
    assert all(r["code"] in refused["message"] for r in held)
    assert member.get(f"/api/v1/pools/{code}").json()["state"] == "active"
    for r in held:
        act(member, r["code"], "release")
    assert _end(member, code, 200)["state"] == "ended"


def test_an_ended_pool_frees_its_quota_and_reservation(h100s, api):
    """vision holds its whole quota in a pool; speech waits behind the pool's reservation.
    Once the pool ends, both are free: vision's next request counts against its quota
    outside any pool, and speech's waiting request is granted."""
    member, operator = h100s
    api.request("PUT", "/api/v1/projects/vision/quotas",
                json={"flavour": "H100-80GB", "limit": 8})
    code = _pool(api, operator, count=8)
    assert act(operator, create(api, project="speech", count=8)["code"],
               "approve")["state"] == "active"
    waiting = act(operator, create(api, project="speech", count=4)["code"], "approve")
    assert waiting["wait_code"] == "pool_reserved"
    (quota,) = member.get("/api/v1/projects/vision/quotas").json()["quotas"]
    assert (quota["used"], quota["pooled"], quota["available"]) == (8.0, 8.0, 0.0)

    _end(member, code, 200)
    (quota,) = member.get("/api/v1/projects/vision/quotas").json()["quotas"]
    assert (quota["used"], quota["pooled"], quota["available"]) == (0.0, 0.0, 8.0)
    assert api.get(f"/api/v1/requests/{waiting['code']}").json()["state"] == "active"
    granted = act(operator, create(member, count=2)["code"], "approve")
    assert (granted["state"], granted["pool"]) == ("active", None)
    (quota,) = member.get("/api/v1/projects/vision/quotas").json()["quotas"]
    assert (quota["used"], quota["pooled"]) == (2.0, 0.0)


def test_an_ended_pool_serves_no_new_request(h100s, api):
    member, operator = h100s
    code = _pool(api, operator, count=2)
    _end(member, code, 200)
    granted = act(operator, create(member, count=1)["code"], "approve")
    assert (granted["state"], granted["pool"]) == ("active", None)


def test_two_ends_at_once_one_wins_one_is_refused(h100s, api, gf, store, clock):
    """The first end holds its transaction open; the second, started meanwhile, waits for
    the pool's row (PostgreSQL) or the write lock (SQLite) and then finds it ended."""
    _, operator = h100s
    code = _pool(api, operator)
    outcome: dict[str, object] = {}

    def second() -> None:
        try:
            outcome["view"] = gf.lifecycle.end_pool(SYSTEM, code, "second")
        except Conflict as exc:
            outcome["error"] = exc

    with store.write() as session:
        pools.end_pool(session, SYSTEM, code, clock.now(), "first")
        racer = threading.Thread(target=second)
        racer.start()
        time.sleep(0.3)  # let it read the still-active pool and reach the lock
    racer.join(timeout=30)
    assert not racer.is_alive()
    assert "view" not in outcome and outcome["error"].code == "invalid_transition"
    (event,) = _ended_events(api, code)
    assert event["reason"] == "first"
    with store.read() as session:
        assert session.scalar(select(func.count()).select_from(AuditEvent)
                              .where(AuditEvent.action == "pool.ended")) == 1


def test_a_grant_never_draws_on_a_pool_ended_since_its_ledger_was_read(h100s, api, store):
    member, operator = h100s
    code = _pool(api, operator)
    pool_id = pool_id_from_code(code)
    with store.write() as session:
        granting.lock_pools_drawn_on(session, {pool_id})  # active: the grant goes on
    _end(member, code, 200)
    with pytest.raises(StaleDecision), store.write() as session:
        granting.lock_pools_drawn_on(session, {pool_id})
