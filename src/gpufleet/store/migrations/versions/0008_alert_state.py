"""Alerts, their history and silences (docs/operations.md, "Alert lifecycle").

Revision ID: 0008_alert_state
Revises: 0007_event_log
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, UtcDateTime

revision = "0008_alert_state"
down_revision = "0007_event_log"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", Id, primary_key=True),
        sa.Column("fingerprint", sa.String(32), nullable=False),
        sa.Column("rule", sa.String(127), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("annotations", sa.JSON(), nullable=False),
        sa.Column("group_key", sa.String(255), nullable=False),
        sa.Column("environment", sa.String(63), nullable=True),
        sa.Column("projects_key", sa.Text(), nullable=True),
        sa.Column("owners", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("active_since", UtcDateTime(), nullable=False),
        sa.Column("fired_at", UtcDateTime(), nullable=True),
        sa.Column("resolved_at", UtcDateTime(), nullable=True),
        sa.Column("last_seen_at", UtcDateTime(), nullable=True),
        sa.Column("last_value", sa.Double(), nullable=True),
        sa.Column("evidence", sa.Text(), nullable=False),
        sa.Column("state_changes", sa.JSON(), nullable=False),
        sa.Column("flapping", sa.Boolean(), nullable=False),
        sa.Column("silenced_by", sa.JSON(), nullable=False),
        sa.Column("silenced", sa.Boolean(), nullable=False),
        sa.Column("acked_by", sa.String(127), nullable=True),
        sa.Column("acked_at", UtcDateTime(), nullable=True),
        sa.Column("ack_expires_at", UtcDateTime(), nullable=True),
        sa.Column("ack_comment", sa.Text(), nullable=True),
        sa.Column("notified_state", sa.String(16), nullable=True),
        sa.Column("notified_at", UtcDateTime(), nullable=True),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_alerts"),
        sa.UniqueConstraint("fingerprint", name="uq_alerts_fingerprint"),
    )
    op.create_index("ix_alerts_rule", "alerts", ["rule"])
    op.create_index("ix_alerts_state_notified", "alerts", ["state", "notified_state"])
    op.create_table(
        "alert_history",
        sa.Column("id", Id, primary_key=True),
        sa.Column("alert_id", Id, nullable=False),
        sa.Column("at", UtcDateTime(), nullable=False),
        sa.Column("event", sa.String(31), nullable=False),
        sa.Column("actor", sa.String(127), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["alert_id"], ["alerts.id"], ondelete="CASCADE",
                                name="fk_alert_history_alert_id_alerts"),
        sa.PrimaryKeyConstraint("id", name="pk_alert_history"),
    )
    op.create_index("ix_alert_history_alert_id", "alert_history", ["alert_id"])
    op.create_table(
        "silences",
        sa.Column("id", Id, primary_key=True),
        sa.Column("matchers", sa.JSON(), nullable=False),
        sa.Column("starts_at", UtcDateTime(), nullable=False),
        sa.Column("ends_at", UtcDateTime(), nullable=False),
        sa.Column("created_by", sa.String(127), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("expired_by", sa.String(127), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_silences"),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])


def downgrade() -> None:
    op.drop_table("silences")
    op.drop_table("alert_history")
    op.drop_table("alerts")
