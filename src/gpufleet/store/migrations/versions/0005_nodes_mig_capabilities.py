"""What a node's agent can do with MIG, and what it could not read.

`nodes.applies_mig_plans`: whether the node's backend creates and destroys MIG instances
to apply gpufleet's MIG plans (the simulator does; the read-only `nvml` and
`dcgm-exporter` backends do not). Placement treats the MIG layout of a node that cannot
apply plans as fixed. Existing nodes keep what the protocol always assumed (true) until
their agent registers again and says.

`gpus.mig_instances_unread`: MIG instances the node saw on a GPU but could not identify
(a profile its model's geometry does not name); a layout with unread instances is never
exported for mig-parted, which would destroy them.

Revision ID: 0005_nodes_mig_capabilities
Revises: 0004_integrity_binding_guard
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_nodes_mig_capabilities"
down_revision = "0004_integrity_binding_guard"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.add_column(sa.Column("applies_mig_plans", sa.Boolean(), nullable=False,
                                      server_default=sa.true()))
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.alter_column("applies_mig_plans", server_default=None)
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.add_column(sa.Column("mig_instances_unread", sa.Integer(), nullable=False,
                                      server_default="0"))
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.alter_column("mig_instances_unread", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.drop_column("mig_instances_unread")
    with op.batch_alter_table("nodes") as batch_op:
        batch_op.drop_column("applies_mig_plans")
