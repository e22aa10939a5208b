"""A small fleet with five hours of billable history (docs/billing.md, "Statements from the
store"): what the statement tests, API and CLI, work out by hand."""

from __future__ import annotations

from datetime import timedelta

from gpufleet.services.access.principal import SYSTEM
from gpufleet.tsdb import Sample, series
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, register

ATTRS = {"node": "node-1", "environment": "onprem-hpc", "model": "H100-80GB"}


def grant(gf, project: str):
    view = gf.lifecycle.create_request(SYSTEM, RequestCreate(project=project, count=1,
                                                            models=["H100-80GB"]))
    view = gf.lifecycle.approve(SYSTEM, view.code, None)
    assert view.state == "active"
    return view


def busy_minutes(gf, start, uuid: str, percent: float, count: int) -> None:
    gf.telemetry.write([Sample(series("gpu.gr_engine_active", uuid, None, **ATTRS),
                               start + timedelta(minutes=m, seconds=30), percent)
                        for m in range(count)])


def statement_world(api, gf, clock) -> dict:
    """node-1 with 4 H100s, H100-80GB at 2.00 EUR per hour. Over five hours from T0:
    vision holds a GPU the whole time, busy; speech holds one for the first two hours,
    idle; vision's pool of one H100 is approved at T0 + 2 h and its next request (drawn on
    the pool) holds a GPU from then on, with no telemetry (unknown)."""
    create_environment(api)
    register(api, 1, gpus=4)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research",
                                       "department": "cv", "cost_centre": "CC-1"})
    api.post("/api/v1/projects", json={"name": "speech", "organisation": "research",
                                       "department": "audio"})
    api.post("/api/v1/projects", json={"name": "ledger", "organisation": "finance"})
    api.post("/api/v1/users", json={"name": "mia", "role": "member"})
    api.post("/api/v1/projects/vision/members", json={"user": "mia"})
    member = api.post("/api/v1/tokens", json={"name": "mia", "user": "mia"}).json()["token"]
    t0 = clock.now()
    response = api.post("/api/v1/billing/rates", json={
        "flavour": "H100-80GB", "price_per_unit_hour": "2.00", "currency": "EUR",
        "effective_from": (t0 - timedelta(days=1)).isoformat()})
    assert response.status_code == 201, response.text
    vision = grant(gf, "vision")
    speech = grant(gf, "speech")
    busy_minutes(gf, t0, vision.units[0].gpu_uuid, 80.0, 5 * 60)
    busy_minutes(gf, t0, speech.units[0].gpu_uuid, 1.0, 2 * 60)
    clock.advance(2 * 3600)
    gf.lifecycle.release(SYSTEM, speech.code, None)
    pool = api.post("/api/v1/pools", json={"project": "vision", "flavour": "H100-80GB",
                                           "count": 1})
    assert pool.status_code == 201, pool.text
    approved = api.post(f"/api/v1/pools/{pool.json()['code']}/approve", json={})
    assert approved.status_code == 200, approved.text
    pooled = grant(gf, "vision")
    assert pooled.pool == pool.json()["code"]
    clock.advance(3 * 3600)
    gf.telemetry.rollup(clock.now())
    return {"t0": t0, "member": api.as_(member), "pool": pool.json()["code"],
            "pooled": pooled.code}
