"""The Alembic migrations build exactly the schema the models declare, on both databases."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from gpufleet.store.database import StateStore
from gpufleet.store.tables import Base
from tests.conftest import private_postgres_schema


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_store(request, tmp_path) -> Iterator[StateStore]:
    """A store over an empty database (not the migrated template the other tests copy)."""
    if request.param == "sqlite":
        store = StateStore(f"sqlite:///{tmp_path / 'fresh.db'}")
        yield store
        store.dispose()
        return
    with private_postgres_schema("gpufleet_migrate") as url:
        store = StateStore(url)
        try:
            yield store
        finally:
            store.dispose()


def schema_diff(store: StateStore) -> list:
    with store._write_engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        return compare_metadata(context, Base.metadata)


def test_migrations_are_idempotent_and_match_the_models(empty_store):
    empty_store.migrate()
    assert schema_diff(empty_store) == []
    with empty_store._write_engine.connect() as connection:
        revision = MigrationContext.configure(connection).get_current_revision()
        tables = set(inspect(connection).get_table_names())
    empty_store.migrate()
    empty_store.migrate()
    with empty_store._write_engine.connect() as connection:
        assert MigrationContext.configure(connection).get_current_revision() == revision
        assert set(inspect(connection).get_table_names()) == tables
    assert revision is not None
    assert {t.name for t in Base.metadata.sorted_tables} <= tables
    assert schema_diff(empty_store) == []


def test_migration_keeps_data(empty_store):
    """Running the migrations on a database in use changes nothing in it."""
    from gpufleet.clock import ManualClock
    from gpufleet.services.access.principal import SYSTEM
    from gpufleet.services.app import Gpufleet
    from gpufleet.settings import Settings
    from gpufleet.wire.inventory import ProjectCreate

    empty_store.migrate()
    gf = Gpufleet(empty_store, Settings(), ManualClock())
    gf.create_project(SYSTEM, ProjectCreate(name="vision", organisation="research"))
    empty_store.migrate()
    assert [p.name for p in gf.list_projects(SYSTEM, None, 100).items] == ["vision"]
