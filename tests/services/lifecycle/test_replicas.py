"""Two server replicas on one database act on a request once (docs/deployment.md).

Each replica is its own `Gpufleet` over its own `StateStore` (its own connections and
placement cache), as two `gpufleet serve` processes are; tests/scale_out runs the real
processes. On PostgreSQL the replicas truly race; SQLite has one writer, so there the
same assertions hold trivially.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gpufleet.domain.errors import Conflict
from gpufleet.domain.requests import request_id_from_code
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.store.database import StateStore
from gpufleet.store.tables import AuditEvent, Binding, GpuRequest
from gpufleet.wire.requests import RequestCreate
from tests.helpers import create_environment, register

QUEUED = 10


@pytest.fixture
def fleet(api):
    create_environment(api)
    register(api, 1, gpus=8)
    register(api, 2, gpus=4)
    api.post("/api/v1/projects", json={"name": "vision", "organisation": "research"})


@pytest.fixture
def replica(store, settings, clock):
    """A second server replica: its own store (connections) on the same database."""
    other = StateStore(store.url.render_as_string(hide_password=False))
    services = Gpufleet(other, settings, clock)
    yield services
    services.close_telemetry()
    other.dispose()


def test_a_request_changed_by_another_replica_meanwhile_is_not_overwritten(fleet, gf, store):
    if store.is_sqlite:
        pytest.skip("SQLite has one writer: nothing changes a row inside a write transaction")
    code = gf.lifecycle.create_request(SYSTEM, RequestCreate(project="vision", count=1)).code
    with pytest.raises(Conflict) as refused, store.write() as session:
        request = session.get(GpuRequest, request_id_from_code(code))
        assert request.state == "pending"
        gf.lifecycle.cancel(SYSTEM, code, "cancelled on the other replica")  # commits first
        request.state = "approved"  # this replica's stale decision
    assert refused.value.code == "concurrent_update"
    assert gf.lifecycle.show_request(SYSTEM, code).state == "cancelled"


def test_two_replicas_granting_one_queue_grant_each_request_once(fleet, gf, replica, clock,
                                                                 store):
    start = clock.now() + timedelta(minutes=10)
    codes = [gf.lifecycle.create_request(SYSTEM, RequestCreate(
        project="vision", count=1, starts_at=start, duration_hours=1)).code
        for _ in range(QUEUED)]
    for code in codes:
        assert gf.lifecycle.approve(SYSTEM, code, None).state == "approved"  # not yet
    clock.advance(11 * 60)

    with ThreadPoolExecutor(max_workers=2) as pool:
        rounds = [pool.submit(services.lifecycle.grant_waiting)
                  for services in (gf, replica, gf, replica)]
        for round_ in rounds:
            round_.result()

    with store.read() as session:
        activations = session.execute(
            select(AuditEvent.subject, func.count()).where(
                AuditEvent.action == "request.activated").group_by(AuditEvent.subject)).all()
        open_bindings = session.scalar(select(func.count()).select_from(Binding)
                                       .where(Binding.ended_at.is_(None)))
    assert sorted(subject for subject, _ in activations) == sorted(codes)
    assert all(n == 1 for _, n in activations)
    assert open_bindings == QUEUED


def test_two_replicas_expiring_together_record_each_expiry_once(fleet, gf, replica, clock,
                                                                store):
    codes = [gf.lifecycle.create_request(SYSTEM, RequestCreate(
        project="vision", count=1, duration_hours=1)).code for _ in range(QUEUED)]
    for code in codes:
        assert gf.lifecycle.approve(SYSTEM, code, None).state == "active"
    clock.advance(2 * 3600)

    with ThreadPoolExecutor(max_workers=2) as pool:
        rounds = [pool.submit(services.lifecycle.expire_due)
                  for services in (gf, replica, gf, replica)]
        expired = [code for round_ in rounds for code in round_.result()]

    assert sorted(expired) == sorted(codes)
    with store.read() as session:
        events = session.scalar(select(func.count()).select_from(AuditEvent).where(
            AuditEvent.action == "request.expired"))
    assert events == QUEUED
