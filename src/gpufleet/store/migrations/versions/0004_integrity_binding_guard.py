"""The GPU's binding guard: the kind and count of its open bindings, and a pending mode.

`gpus.bound_kind` / `gpus.open_bindings` let the binding insert refuse a binding of another
kind on a held GPU with one conditional update (no double booking across whole, MIG and
shared units, on SQLite and PostgreSQL alike); `gpus.pending_sharing_mode` is the mode a
node reported while bindings of the old mode were open — applied when the last one ends.

Existing rows are backfilled from the open bindings; a GPU whose mode was already changed
under its bindings goes back to their mode, with the reported one pending.

Revision ID: 0004_integrity_binding_guard
Revises: 0003
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_integrity_binding_guard"
down_revision = "0003"
branch_labels = None
depends_on = None

MODE_OF_BOUND_KIND = "CASE bound_kind WHEN 'whole' THEN 'exclusive' ELSE bound_kind END"


def upgrade() -> None:
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.add_column(sa.Column("open_bindings", sa.Integer(), nullable=False,
                                      server_default="0"))
        batch_op.add_column(sa.Column("bound_kind", sa.String(length=16), nullable=True))
        batch_op.add_column(sa.Column("pending_sharing_mode", sa.String(length=16),
                                      nullable=True))
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.alter_column("open_bindings", server_default=None)
    op.execute("UPDATE gpus SET "
               "open_bindings = (SELECT count(*) FROM bindings b "
               "WHERE b.gpu_id = gpus.id AND b.ended_at IS NULL), "
               "bound_kind = (SELECT min(b.kind) FROM bindings b "
               "WHERE b.gpu_id = gpus.id AND b.ended_at IS NULL)")
    op.execute(f"UPDATE gpus SET pending_sharing_mode = sharing_mode, "
               f"sharing_mode = {MODE_OF_BOUND_KIND} "
               f"WHERE bound_kind IS NOT NULL AND sharing_mode <> {MODE_OF_BOUND_KIND}")


def downgrade() -> None:
    op.execute("UPDATE gpus SET sharing_mode = pending_sharing_mode "
               "WHERE pending_sharing_mode IS NOT NULL")
    with op.batch_alter_table("gpus") as batch_op:
        batch_op.drop_column("pending_sharing_mode")
        batch_op.drop_column("bound_kind")
        batch_op.drop_column("open_bindings")
