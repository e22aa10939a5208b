"""MIG instance health: each instance's own state, and its transitions beside the GPU's
(docs/operations.md, "GPU health and quarantine", "MIG instances").

Revision ID: 0013_mig_instance_health
Revises: 0012_alert_rules
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_mig_instance_health"
down_revision = "0012_alert_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mig_instances") as batch_op:
        batch_op.add_column(sa.Column("health", sa.String(16), nullable=False,
                                      server_default="healthy"))
        batch_op.add_column(sa.Column("health_reason", sa.Text(), nullable=True))
    with op.batch_alter_table("mig_instances") as batch_op:
        batch_op.alter_column("health", server_default=None)
    with op.batch_alter_table("gpu_health_transitions") as batch_op:
        batch_op.add_column(sa.Column("mig_profile_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mig_start", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("mig_uuid", sa.String(80), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_health_transitions") as batch_op:
        batch_op.drop_column("mig_uuid")
        batch_op.drop_column("mig_start")
        batch_op.drop_column("mig_profile_id")
    with op.batch_alter_table("mig_instances") as batch_op:
        batch_op.drop_column("health_reason")
        batch_op.drop_column("health")
