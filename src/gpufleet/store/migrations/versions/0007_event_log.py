"""The audit log as the event source: each audit event's project and labels
(docs/operations.md, "Events").

The project is a column so that listing events for a member ("only my projects' events")
and filtering by project are index reads, not a scan of every event. `seq` is the event's
position in the log, given at commit in commit order (PostgreSQL: from the sequence
`audit_event_seq`, under a transaction lock); events written before are numbered by id.
Event subscriptions themselves are receivers (table `receivers`, migration 0006): no table
of their own.

Revision ID: 0007_event_log
Revises: 0006_operations_outbox
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_event_log"
down_revision = "0006_operations_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.add_column(sa.Column("project", sa.String(63), nullable=True))
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
    op.execute("UPDATE audit_events SET seq = id")
    with op.batch_alter_table("audit_events") as batch:
        batch.create_unique_constraint("uq_audit_events_seq", ["seq"])
    op.create_index("ix_audit_events_project", "audit_events", ["project", "seq"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE SEQUENCE audit_event_seq OWNED BY audit_events.seq")
        op.execute("SELECT setval('audit_event_seq', COALESCE(MAX(id), 0) + 1, false) "
                   "FROM audit_events")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP SEQUENCE audit_event_seq")
    op.drop_index("ix_audit_events_project", table_name="audit_events")
    with op.batch_alter_table("audit_events") as batch:
        batch.drop_constraint("uq_audit_events_seq", type_="unique")
        batch.drop_column("seq")
        batch.drop_column("labels")
        batch.drop_column("project")
