"""Rate cards: the stored rates chargeback prices unit-hours with (docs/billing.md,
"Rate cards, stored").

Revision ID: 0014_rate_cards
Revises: 0013_mig_instance_health
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, Money, UtcDateTime

revision = "0014_rate_cards"
down_revision = "0013_mig_instance_health"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "billing_rates",
        sa.Column("id", Id, primary_key=True),
        sa.Column("flavour", sa.String(80), nullable=False),
        sa.Column("environment", sa.String(63), nullable=True),
        sa.Column("price_per_unit_hour", Money(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("effective_from", UtcDateTime(), nullable=False),
        sa.Column("effective_to", UtcDateTime(), nullable=True),
        sa.Column("created_by", sa.String(127), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("ended_by", sa.String(127), nullable=True),
        sa.Column("ended_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_billing_rates"),
    )
    op.create_index("ix_billing_rates_flavour_effective_from", "billing_rates",
                    ["flavour", "effective_from"])


def downgrade() -> None:
    op.drop_index("ix_billing_rates_flavour_effective_from", table_name="billing_rates")
    op.drop_table("billing_rates")
