"""Chat-ops outbound: the notifier's cursor over the event log (docs/chatops.md).

Revision ID: 0017_chat_cursors
Revises: 0016_pool_end
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import UtcDateTime

revision = "0017_chat_cursors"
down_revision = "0016_pool_end"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_cursors",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("after_seq", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UtcDateTime(), nullable=False),
        sa.Column("lease_owner", sa.String(63), nullable=True),
        sa.Column("lease_until", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_chat_cursors"),
    )


def downgrade() -> None:
    op.drop_table("chat_cursors")
