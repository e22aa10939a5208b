"""The delivery log keeps each attempt's status code (HTTP, SMTP) beside its outcome
(docs/operations.md, "The outbox").

Revision ID: 0010_outbox_sender
Revises: 0009_reclamation
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_outbox_sender"
down_revision = "0009_reclamation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox_deliveries") as batch:
        batch.add_column(sa.Column("status", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("outbox_deliveries") as batch:
        batch.drop_column("status")
