"""Chat-ops: chat users linked to gpufleet users, one-time link codes, and where each
request lives in chat (docs/chatops.md).

Revision ID: 0015_chatops
Revises: 0014_rate_cards
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, UtcDateTime

revision = "0015_chatops"
down_revision = "0014_rate_cards"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chat_identities",
        sa.Column("id", Id, primary_key=True),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.Column("team_id", sa.String(63), nullable=False),
        sa.Column("chat_user_id", sa.String(63), nullable=False),
        sa.Column("user_id", Id, sa.ForeignKey(
            "users.id", ondelete="CASCADE", name="fk_chat_identities_user_id_users"),
            nullable=False),
        sa.Column("linked_by", sa.String(127), nullable=False),
        sa.Column("linked_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_identities"),
        sa.UniqueConstraint("platform", "team_id", "chat_user_id",
                            name="uq_chat_identities_chat_user"),
    )
    op.create_index("ix_chat_identities_user_id", "chat_identities", ["user_id"])
    op.create_table(
        "chat_link_codes",
        sa.Column("id", Id, primary_key=True),
        sa.Column("code_hash", sa.String(64), nullable=False),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.Column("team_id", sa.String(63), nullable=False),
        sa.Column("chat_user_id", sa.String(63), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.Column("used_at", UtcDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_chat_link_codes"),
        sa.UniqueConstraint("code_hash", name="uq_chat_link_codes_code_hash"),
    )
    op.create_table(
        "chat_threads",
        sa.Column("request_id", Id, sa.ForeignKey(
            "gpu_requests.id", ondelete="CASCADE",
            name="fk_chat_threads_request_id_gpu_requests"), nullable=False),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.Column("team_id", sa.String(63), nullable=True),
        sa.Column("requester_chat_user_id", sa.String(63), nullable=True),
        sa.Column("channel_id", sa.String(80), nullable=True),
        sa.Column("thread_ts", sa.String(32), nullable=True),
        sa.Column("approval_channel_id", sa.String(80), nullable=True),
        sa.Column("approval_ts", sa.String(32), nullable=True),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", name="pk_chat_threads"),
    )


def downgrade() -> None:
    op.drop_table("chat_threads")
    op.drop_table("chat_link_codes")
    op.drop_index("ix_chat_identities_user_id", table_name="chat_identities")
    op.drop_table("chat_identities")
