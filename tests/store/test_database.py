"""The state store seam: time types, SQLite's one writer, and errors mapped to the domain's."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text

from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.domain.errors import Conflict, InvalidInput, Unavailable
from gpufleet.services.access.principal import SYSTEM
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import ApiToken, AuditEvent, Environment, Gpu, Node, Project
from gpufleet.wire.agent import NodeRegistration
from gpufleet.wire.inventory import EnvironmentCreate, JoinTokenCreate, ProjectCreate
from tests.helpers import registration


def _event(at: datetime) -> AuditEvent:
    return AuditEvent(at=at, actor="test", action="test.event", subject_kind="test",
                      subject="x", details={})


def _read_back(store: StateStore, event_id: int) -> datetime:
    with store.read() as session:
        return session.scalar(select(AuditEvent.at).where(AuditEvent.id == event_id))


@pytest.mark.parametrize("tz", [UTC, timezone(timedelta(hours=9)), timezone(timedelta(hours=-5))],
                         ids=["utc", "kst", "est"])
def test_utc_datetime_round_trips_aware_utc(store, tz):
    at = datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=tz)
    with store.write() as session:
        event = _event(at)
        session.add(event)
        session.flush()
        event_id = event.id
    read = _read_back(store, event_id)
    assert read == at
    assert read.tzinfo is UTC
    assert read.utcoffset() == timedelta(0)


def test_utc_datetime_compares_as_instants_in_queries(store):
    instant = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    with store.write() as session:
        session.add(_event(instant))
    same_instant_elsewhere = instant.astimezone(timezone(timedelta(hours=9)))
    with store.read() as session:
        found = session.scalars(select(AuditEvent).where(
            AuditEvent.at == same_instant_elsewhere)).all()
        later = session.scalars(select(AuditEvent).where(
            AuditEvent.at > instant - timedelta(microseconds=1))).all()
    assert len(found) == 1
    assert len(later) == 1


def test_utc_datetime_rejects_naive(store):
    with pytest.raises(Exception, match="naive datetime"), store.write() as session:
        session.add(_event(datetime(2026, 1, 1, 12, 0)))
        session.flush()
    with store.read() as session:
        assert session.scalar(select(AuditEvent.id)) is None


SQLITE_ONLY = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


@SQLITE_ONLY
def test_sqlite_runs_in_wal_mode(store):
    assert store.is_sqlite
    with store.read() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert session.execute(text("PRAGMA foreign_keys")).scalar() == 1
    with store.write() as session:
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_unique_violation_becomes_conflict(store):
    now = datetime(2026, 1, 1, tzinfo=UTC)
    with store.write() as session:
        session.add(Environment(name="dup", kind="onprem", default_sharing_mode="exclusive",
                                created_at=now))
    with pytest.raises(Conflict) as raised, store.write() as session:
        session.add(Environment(name="dup", kind="cloud", default_sharing_mode="exclusive",
                                created_at=now))
    assert raised.value.code == "integrity_conflict"
    with store.read() as session:
        assert session.scalars(select(Environment)).all()[0].kind == "onprem"


def test_out_of_range_value_is_invalid_input_on_both_databases(store):
    """SQLite raises OverflowError, PostgreSQL a DataError: both are the caller's bad input."""
    with pytest.raises(InvalidInput), store.read() as session:
        session.get(ApiToken, 2**70)


@SQLITE_ONLY
def test_concurrent_sqlite_writes_never_lock(gf, store):
    """16 threads × 16 writes (registrations and project creations) plus reads beside them:
    SQLite's one-writer path must never answer "database is locked"."""
    threads, per_thread = 16, 16
    gf.create_environment(SYSTEM, EnvironmentCreate(name="onprem-hpc", kind="onprem"))
    issued = gf.create_join_tokens(SYSTEM, JoinTokenCreate(
        environment="onprem-hpc", count=threads * per_thread // 2)).tokens
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(per_thread // 2):
                n = t * 100 + i
                body = NodeRegistration.model_validate(registration(n, gpus=1))
                reply = gf.register_node(issued[t * (per_thread // 2) + i].token, body)
                gf.create_project(SYSTEM, ProjectCreate(name=f"p-{t}-{i}", organisation="org"))
                gf.authenticate(reply.credential)  # a read, then a last-used write
                gf.list_environments(SYSTEM, None, 100)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not errors, errors[:3]
    with store.read() as session:
        assert len(session.scalars(select(Node)).all()) == threads * per_thread // 2
        assert len(session.scalars(select(Gpu)).all()) == threads * per_thread // 2
        assert len(session.scalars(select(Project)).all()) == threads * per_thread // 2


@pytest.mark.parametrize("url", [
    "postgresql+psycopg://postgres@127.0.0.1:1/nothing?connect_timeout=2",
    "sqlite:///{tmp}",  # a directory, not a database file
], ids=["postgres-closed-port", "sqlite-unopenable"])
def test_unreachable_database_is_unavailable(url, tmp_path):
    store = StateStore(url.format(tmp=tmp_path))
    gf = Gpufleet(store, Settings(data_dir=tmp_path), ManualClock())
    with pytest.raises(Unavailable):
        store.ping()
    with TestClient(create_app(gf, background_loops=False)) as client:
        assert client.get("/healthz").status_code == 200  # liveness needs no database
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json() == {"error": {
            "code": "database_unavailable",
            "message": "the state store cannot answer right now; retry shortly",
            "details": {}}}
        # An authenticated endpoint says the same, not "unauthenticated" or a 500.
        listed = client.get("/api/v1/gpus", headers={"Authorization": "Bearer gfa_whatever"})
        assert listed.status_code == 503
        assert listed.json()["error"]["code"] == "database_unavailable"
    store.dispose()


def test_leader_locks_of_names_sharing_a_prefix_are_distinct(store):
    """Two background loops whose names share their first 8 bytes each find a leader."""
    if store.is_sqlite:
        pytest.skip("SQLite means one server process: it always leads")
    with store.write() as one, store.write() as other:
        assert store.try_leader_lock(one, "reclamation")
        assert store.try_leader_lock(other, "reclamation-report")
        assert not store.try_leader_lock(other, "reclamation")
