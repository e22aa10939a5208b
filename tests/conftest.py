"""Shared fixtures: real SQLite and real PostgreSQL, real HTTP through the ASGI app.

Every test that takes `store` (directly or through `gf`, `client`, `api`) runs twice: on
SQLite and on the PostgreSQL named by `GPUFLEET_TEST_POSTGRES_URL`. Without that variable
the PostgreSQL runs skip with a reason; with it set, an unreachable PostgreSQL is an error,
never a skip (`.ci/run` sets it).
"""

from __future__ import annotations

import os
import shutil
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.store.tables import Base

POSTGRES_ENV = "GPUFLEET_TEST_POSTGRES_URL"

# Fixtures of the lifecycle tests (people, h100s), available to every test module.
pytest_plugins = ["tests.lifecycle_world", "tests.cli_world"]


START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory, monkeypatch):
    """No test reads the developer's own ~/.config/gpufleet or GPUFLEET_* settings."""
    for name in list(os.environ):
        if name.startswith("GPUFLEET_") and name != POSTGRES_ENV:
            monkeypatch.delenv(name)
    monkeypatch.setenv("GPUFLEET_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A migrated SQLite file, copied for each test (migrating once keeps tests fast)."""
    path = tmp_path_factory.mktemp("template") / "gpufleet.db"
    store = StateStore(f"sqlite:///{path}")
    store.migrate()
    store.dispose()
    return path


@contextmanager
def private_postgres_schema(prefix: str) -> Iterator[str]:
    """A URL into a fresh, empty schema of the test PostgreSQL, dropped afterwards.

    Skips without `GPUFLEET_TEST_POSTGRES_URL`; with it, an unreachable PostgreSQL fails.
    """
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"PostgreSQL tests need {POSTGRES_ENV} (e.g. "
                    "postgresql+psycopg://postgres@127.0.0.1:5432/test)")
    schema = f"{prefix}_{uuidlib.uuid4().hex[:10]}"
    admin = create_engine(base)
    with admin.begin() as connection:  # fails loudly when PostgreSQL is unreachable
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    separator = "&" if "?" in base else "?"
    try:
        yield f"{base}{separator}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A private schema in the test PostgreSQL, migrated once for the session."""
    with private_postgres_schema("gpufleet_test") as url:
        store = StateStore(url)
        store.migrate()
        store.dispose()
        yield url


def _truncate_postgres(store: StateStore) -> None:
    tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    with store.write() as session:
        session.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request, tmp_path) -> Iterator[StateStore]:
    if request.param == "sqlite":
        path = tmp_path / "gpufleet.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        store = StateStore(f"sqlite:///{path}", sqlite_synchronous="NORMAL")
    else:
        store = StateStore(request.getfixturevalue("postgres_url"))
        _truncate_postgres(store)
    yield store
    store.dispose()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path / "data", heartbeat_interval_s=30,
                    unreachable_after_missed_heartbeats=3)


@pytest.fixture
def gf(store, settings, clock) -> Iterator[Gpufleet]:
    services = Gpufleet(store, settings, clock)
    yield services
    services.close_telemetry()


@pytest.fixture
def admin_token(gf, settings) -> str:
    return bootstrap_admin_token(gf, settings.data_dir / "admin-token")


@pytest.fixture
def client(gf) -> Iterator[TestClient]:
    with TestClient(create_app(gf, background_loops=False)) as test_client:
        yield test_client


class Api:
    """The test client with a token: `api.get(path)`, `api.as_(token).post(path, json=...)`."""

    def __init__(self, client: TestClient, token: str | None):
        self.client = client
        self.token = token

    def as_(self, token: str | None) -> Api:
        return Api(self.client, token)

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def request(self, method: str, path: str, **kwargs):
        headers = {**self._headers(), **kwargs.pop("headers", {})}
        return self.client.request(method, path, headers=headers, **kwargs)

    def get(self, path: str, **kwargs):
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs):
        return self.request("POST", path, **kwargs)


@pytest.fixture
def api(client, admin_token) -> Api:
    """The API as the bootstrap admin."""
    return Api(client, admin_token)
