"""Pools end: when an active pool stopped (`ended_at`), who ended it and why.

Chargeback bills a pool from approval to end (docs/billing.md); without an end every pool
was billed forever. Existing pools keep no end (`NULL`): they are still active.

Revision ID: 0016_pool_end
Revises: 0015_chatops
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import UtcDateTime

revision = "0016_pool_end"
down_revision = "0015_chatops"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pools") as batch_op:
        batch_op.add_column(sa.Column("ended_at", UtcDateTime(), nullable=True))
        batch_op.add_column(sa.Column("ended_by", sa.String(127), nullable=True))
        batch_op.add_column(sa.Column("end_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch_op:
        batch_op.drop_column("end_reason")
        batch_op.drop_column("ended_by")
        batch_op.drop_column("ended_at")
