"""Indexes for sorting GPUs by health and by environment (keyset pages stay index scans).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.create_index("ix_gpus_health_uuid", ["health", "uuid"], unique=False)
        batch_op.create_index("ix_gpus_environment_uuid", ["environment_id", "uuid"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.drop_index("ix_gpus_environment_uuid")
        batch_op.drop_index("ix_gpus_health_uuid")
