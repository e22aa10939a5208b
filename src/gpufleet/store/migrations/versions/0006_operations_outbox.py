"""Receivers, the notification outbox and its delivery log (docs/operations.md).

Revision ID: 0006_operations_outbox
Revises: 0005_nodes_mig_capabilities
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, UtcDateTime

revision = "0006_operations_outbox"
down_revision = "0005_nodes_mig_capabilities"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "receivers",
        sa.Column("id", Id, primary_key=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("kind", sa.String(31), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.Column("min_severity", sa.String(16), nullable=False),
        sa.Column("broadcast", sa.Boolean(), nullable=False),
        sa.Column("tells_owners", sa.Boolean(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(127), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_receivers"),
        sa.UniqueConstraint("name", name="uq_receivers_name"),
    )
    op.create_table(
        "outbox",
        sa.Column("id", Id, primary_key=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("receiver_id", Id, nullable=False),
        sa.Column("recipient", sa.String(63), nullable=True),
        sa.Column("idempotency_key", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(63), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", UtcDateTime(), nullable=False),
        sa.Column("delivered_at", UtcDateTime(), nullable=True),
        sa.Column("abandoned_at", UtcDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["receiver_id"], ["receivers.id"], ondelete="CASCADE",
                                name="fk_outbox_receiver_id_receivers"),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
        sa.UniqueConstraint("idempotency_key", name="uq_outbox_idempotency_key"),
    )
    op.create_index("ix_outbox_receiver_id", "outbox", ["receiver_id"])
    op.create_index("ix_outbox_recipient", "outbox", ["recipient"])
    op.create_index("ix_outbox_due", "outbox",
                    ["delivered_at", "abandoned_at", "next_attempt_at"])
    op.create_table(
        "outbox_deliveries",
        sa.Column("id", Id, primary_key=True),
        sa.Column("message_id", Id, nullable=False),
        sa.Column("receiver_id", Id, nullable=False),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.String(63), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["message_id"], ["outbox.id"], ondelete="CASCADE",
                                name="fk_outbox_deliveries_message_id_outbox"),
        sa.ForeignKeyConstraint(["receiver_id"], ["receivers.id"], ondelete="CASCADE",
                                name="fk_outbox_deliveries_receiver_id_receivers"),
        sa.PrimaryKeyConstraint("id", name="pk_outbox_deliveries"),
    )
    op.create_index("ix_outbox_deliveries_message_id", "outbox_deliveries", ["message_id"])
    op.create_index("ix_outbox_deliveries_receiver_id", "outbox_deliveries", ["receiver_id"])


def downgrade() -> None:
    op.drop_table("outbox_deliveries")
    op.drop_table("outbox")
    op.drop_table("receivers")
