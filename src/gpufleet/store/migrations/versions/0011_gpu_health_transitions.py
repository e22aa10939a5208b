"""GPU health transitions: the history of each GPU's health, with the rule and evidence
that moved it or the operator who did (docs/operations.md, "GPU health and quarantine").

Revision ID: 0011_gpu_health_transitions
Revises: 0010_outbox_sender
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, UtcDateTime

revision = "0011_gpu_health_transitions"
down_revision = "0010_outbox_sender"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_health_transitions",
        sa.Column("id", Id, primary_key=True),
        sa.Column("gpu_id", Id, nullable=False),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=False),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("rule", sa.String(63), nullable=True),
        sa.Column("evidence", sa.JSON(), nullable=True),
        sa.Column("actor", sa.String(127), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["gpu_id"], ["gpus.id"], ondelete="CASCADE",
                                name="fk_gpu_health_transitions_gpu_id_gpus"),
        sa.PrimaryKeyConstraint("id", name="pk_gpu_health_transitions"),
    )
    op.create_index("ix_gpu_health_transitions_gpu_id_id", "gpu_health_transitions",
                    ["gpu_id", "id"])


def downgrade() -> None:
    op.drop_table("gpu_health_transitions")
