"""The server's and the agent's files on disk are owner-only whatever the umask: the data
dir and its state store (SQLite with its -wal and -shm), the telemetry store (DuckDB, its
WAL, its journal), the admin token, and the agent's spool. Checked by stat."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.agent.spool import Spool
from gpufleet.server import admin_token_path, bootstrap_admin_token, build_gpufleet
from gpufleet.settings import Settings
from gpufleet.store.database import StateStore
from gpufleet.tsdb.duckdb_store import DuckDBTelemetryStore
from tests.tsdb_behaviour import columns_of, ticks


@pytest.fixture(autouse=True)
def permissive_umask() -> Iterator[None]:
    """The usual umask (022): files are world-readable unless made private on purpose."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(directory: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in directory.iterdir()}


def test_the_data_dir_and_every_file_of_the_server_are_owner_only(tmp_path):
    data_dir = tmp_path / "data"
    gf = build_gpufleet(Settings(data_dir=data_dir))
    try:
        bootstrap_admin_token(gf, admin_token_path(gf.settings))
        gf.telemetry.write(ticks("gpu.power_usage_watts", "GPU-b", [3.0], node="node-1"))
        found = modes(data_dir)
    finally:
        gf.close_telemetry()
        gf.store.dispose()
    assert mode(data_dir) == 0o700
    for name in ("gpufleet.db", "gpufleet.db-wal", "gpufleet.db-shm", "admin-token",
                 "telemetry.duckdb"):
        assert found.pop(name) == 0o600, name
    assert found.pop("telemetry.duckdb.journal") == 0o700
    # DuckDB re-creates its WAL after each checkpoint at the umask: the data dir guards it.
    assert set(found) <= {"telemetry.duckdb.wal"}, found


def test_an_existing_world_readable_store_is_tightened_at_start(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    database = data_dir / "gpufleet.db"
    StateStore(f"sqlite:///{database}").dispose()
    for name in ("gpufleet.db", "gpufleet.db-wal", "gpufleet.db-shm"):
        (data_dir / name).touch()
        os.chmod(data_dir / name, 0o644)  # as versions before this one left them
    gf = build_gpufleet(Settings(data_dir=data_dir))
    try:
        found = {n: m for n, m in modes(data_dir).items() if n.startswith("gpufleet.db")}
    finally:
        gf.close_telemetry()
        gf.store.dispose()
    assert mode(data_dir) == 0o700
    assert found == {"gpufleet.db": 0o600, "gpufleet.db-wal": 0o600, "gpufleet.db-shm": 0o600}


def test_the_telemetry_journal_is_owner_only(tmp_path):
    store = DuckDBTelemetryStore(tmp_path / "telemetry.duckdb", threads=1,
                                 apply_interval_s=None)  # what is journalled stays there
    try:
        store.write_columns([("node-1:b1", columns_of(ticks(
            "gpu.power_usage_watts", "GPU-a", [1.0, 2.0], node="node-1")))])
        journal = tmp_path / "telemetry.duckdb.journal"
        segments = modes(journal)
    finally:
        store.close()
    assert mode(journal) == 0o700
    assert segments and set(segments.values()) == {0o600}


def test_a_shared_sticky_directory_is_never_tightened(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    store = StateStore(f"sqlite:///{shared / 'gpufleet.db'}")
    store.dispose()
    gf = build_gpufleet(Settings(data_dir=shared))
    gf.close_telemetry()
    gf.store.dispose()
    assert mode(shared) == 0o1777  # like /tmp: others' files live there too
    assert mode(shared / "gpufleet.db") == 0o600


def test_the_agent_spool_is_owner_only(tmp_path):
    spool = Spool(tmp_path / "state" / "spool")
    spool.put("b1", b"pods, namespaces, projects")
    assert mode(tmp_path / "state" / "spool") == 0o700
    assert {mode(b.path) for b in spool.pending()} == {0o600}
