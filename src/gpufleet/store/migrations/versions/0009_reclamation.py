"""Reclamation: policies per environment and project, exemptions, and the warnings log
(docs/operations.md, "Reclamation").

Revision ID: 0009_reclamation
Revises: 0008_alert_state
Create Date: 2026-11-25
"""

import sqlalchemy as sa
from alembic import op

from gpufleet.store.types import Id, UtcDateTime

revision = "0009_reclamation"
down_revision = "0008_alert_state"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reclaim_policies",
        sa.Column("id", Id, primary_key=True),
        sa.Column("environment_id", Id, nullable=True),
        sa.Column("project_id", Id, nullable=True),
        sa.Column("idle_window_s", sa.Integer(), nullable=True),
        sa.Column("idle_held", sa.String(16), nullable=True),
        sa.Column("grace_s", sa.Integer(), nullable=True),
        sa.Column("end_warning_lead_s", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(16), nullable=True),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column("dry_run", sa.Boolean(), nullable=True),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
        sa.Column("updated_by", sa.String(127), nullable=False),
        sa.ForeignKeyConstraint(["environment_id"], ["environments.id"], ondelete="CASCADE",
                                name="fk_reclaim_policies_environment_id_environments"),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE",
                                name="fk_reclaim_policies_project_id_projects"),
        sa.PrimaryKeyConstraint("id", name="pk_reclaim_policies"),
        sa.UniqueConstraint("environment_id", name="uq_reclaim_policies_environment_id"),
        sa.UniqueConstraint("project_id", name="uq_reclaim_policies_project_id"),
    )
    op.create_table(
        "reclaim_exemptions",
        sa.Column("id", Id, primary_key=True),
        sa.Column("request_id", Id, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.Column("asked_by", sa.String(127), nullable=False),
        sa.Column("asked_at", UtcDateTime(), nullable=False),
        sa.Column("granted_by", sa.String(127), nullable=True),
        sa.Column("granted_at", UtcDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["request_id"], ["gpu_requests.id"],
                                name="fk_reclaim_exemptions_request_id_gpu_requests"),
        sa.PrimaryKeyConstraint("id", name="pk_reclaim_exemptions"),
    )
    op.create_index("ix_reclaim_exemptions_request_id", "reclaim_exemptions", ["request_id"])
    op.create_table(
        "reclaim_warnings",
        sa.Column("id", Id, primary_key=True),
        sa.Column("request_id", Id, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("project", sa.String(63), nullable=False),
        sa.Column("environment", sa.String(63), nullable=True),
        sa.Column("owner", sa.String(127), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("dry_run", sa.Boolean(), nullable=False),
        sa.Column("units", sa.Integer(), nullable=False),
        sa.Column("idle_units", sa.JSON(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("warned_at", UtcDateTime(), nullable=False),
        sa.Column("deadline_at", UtcDateTime(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.Column("outcome_at", UtcDateTime(), nullable=True),
        sa.Column("units_taken", sa.Integer(), nullable=False),
        sa.Column("gpus_taken", sa.Float(), nullable=False),
        sa.Column("planned_end_at", UtcDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["request_id"], ["gpu_requests.id"],
                                name="fk_reclaim_warnings_request_id_gpu_requests"),
        sa.PrimaryKeyConstraint("id", name="pk_reclaim_warnings"),
    )
    op.create_index("ix_reclaim_warnings_request_id", "reclaim_warnings", ["request_id"])
    op.create_index("ix_reclaim_warnings_warned_at", "reclaim_warnings", ["warned_at"])
    op.create_index("ix_reclaim_warnings_open", "reclaim_warnings", ["outcome", "request_id"])


def downgrade() -> None:
    op.drop_table("reclaim_warnings")
    op.drop_table("reclaim_exemptions")
    op.drop_table("reclaim_policies")
