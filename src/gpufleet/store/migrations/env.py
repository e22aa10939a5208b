"""Alembic environment: always run programmatically with a connection from StateStore."""

from alembic import context

from gpufleet.store.tables import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata,
                  render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
with context.begin_transaction():
    context.run_migrations()
