"""One running app over a database of its own, for a whole test module.

The function-scoped fixtures of conftest give every test a clean database; tests that only
read a fleet (or, like the access matrix, run hundreds of independent requests against one)
build it once per module instead. The PostgreSQL run gets a private schema, so the session's
shared one (truncated by each function-scoped test) is never touched.
"""

from __future__ import annotations

import atexit
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.app import create_app
from gpufleet.clock import ManualClock
from gpufleet.server import bootstrap_admin_token
from gpufleet.services.app import Gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from tests.conftest import START, Api, private_postgres_schema

DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@dataclass
class ModuleWorld:
    store: StateStore
    gf: Gpufleet
    clock: ManualClock
    client: TestClient
    api: Api  # as the bootstrap admin


@contextmanager
def private_store(request: pytest.FixtureRequest, directory) -> Iterator[StateStore]:
    if request.param == "sqlite":
        path = directory / "gpufleet.db"
        shutil.copy(request.getfixturevalue("sqlite_template"), path)
        store = StateStore(f"sqlite:///{path}", sqlite_synchronous="NORMAL")
        try:
            yield store
        finally:
            store.dispose()
        return
    with private_postgres_schema("gpufleet_module") as url:
        store = StateStore(url)
        try:
            store.migrate()
            yield store
        finally:
            store.dispose()


def isolated_settings(data_dir) -> Settings:
    """The conftest `settings`, built without the developer's own GPUFLEET_* or config files
    (the autouse isolation of conftest is function-scoped and has not run yet)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in list(os.environ):
            if name.startswith("GPUFLEET_"):
                mp.delenv(name)
        mp.setenv("GPUFLEET_CONFIG_DIR", str(data_dir / "config"))
        return Settings(data_dir=data_dir, heartbeat_interval_s=30,
                        unreachable_after_missed_heartbeats=3)


@contextmanager
def module_world(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[ModuleWorld]:
    directory = tmp_path_factory.mktemp("module-world")
    with private_store(request, directory) as store:
        clock = ManualClock(START)
        gf = Gpufleet(store, isolated_settings(directory / "data"), clock)
        admin_token = bootstrap_admin_token(gf, directory / "data" / "admin-token")
        with TestClient(create_app(gf, background_loops=False)) as client:
            yield ModuleWorld(store, gf, clock, client, Api(client, admin_token))
        gf.close_telemetry()


class _CurrentGpufleet:
    """Stands in for the test's `Gpufleet` inside an app shared by many tests."""

    def __init__(self, gf: Gpufleet):
        self.current = gf

    def __getattr__(self, name: str):
        return getattr(self.current, name)


_SHARED: dict[str, tuple[_CurrentGpufleet, TestClient, int]] = {}


@contextmanager
def shared_client(gf: Gpufleet) -> Iterator[TestClient]:
    """A test client on one app for the whole session, serving the given `gf`.

    FastAPI compiles an app's routes on its first request (~50 ms); a fresh app per test
    pays that every time. The app reads `max_request_body_bytes` once, when built: tests
    that change it must build their own app.
    """
    if "app" not in _SHARED:
        proxy = _CurrentGpufleet(gf)
        client = TestClient(create_app(proxy, background_loops=False))  # type: ignore[arg-type]
        client.__enter__()
        atexit.register(client.__exit__, None, None, None)
        _SHARED["app"] = (proxy, client, gf.settings.max_request_body_bytes)
    proxy, client, max_body_bytes = _SHARED["app"]
    assert gf.settings.max_request_body_bytes == max_body_bytes
    proxy.current = gf
    try:
        yield client
    finally:
        client.cookies.clear()
