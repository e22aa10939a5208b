"""The state store: SQLAlchemy tables, Alembic migrations, and the SQLite/PostgreSQL seam."""
