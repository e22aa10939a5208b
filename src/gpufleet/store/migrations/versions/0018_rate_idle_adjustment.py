"""Rate cards: each rate's idle adjustment, a surcharge (> 0) or discount (< 0) on the cost
of the idle-allocated GPU-hours it prices (docs/billing.md). Existing rates get 0: no
adjustment, what statements computed before.

Revision ID: 0018_rate_idle_adjustment
Revises: 0017_chat_cursors
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Money

revision = "0018_rate_idle_adjustment"
down_revision = "0017_chat_cursors"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("billing_rates") as batch_op:
        batch_op.add_column(sa.Column("idle_adjustment", Money(), nullable=False,
                                      server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("billing_rates") as batch_op:
        batch_op.drop_column("idle_adjustment")
