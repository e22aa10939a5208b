"""Alert rules declared through the API (docs/operations.md, "Alert rules").

Revision ID: 0012_alert_rules
Revises: 0011_gpu_health_transitions
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, UtcDateTime

revision = "0012_alert_rules"
down_revision = "0011_gpu_health_transitions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", Id, primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(127), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_by", sa.String(127), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alert_rules"),
        sa.UniqueConstraint("name", name="uq_alert_rules_name"),
    )


def downgrade() -> None:
    op.drop_table("alert_rules")
