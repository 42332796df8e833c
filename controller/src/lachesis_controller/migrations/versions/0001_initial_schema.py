"""Initial schema: hosts, tenants, rules, rollouts and their targets.

Date-times are stored as naive UTC (see db.UTCDateTime).

Revision ID: 0001
Revises:
Create Date: 2026-11-21 22:30:10.202001
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "hosts",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("agent_version", sa.String(length=64), nullable=False),
        sa.Column("capabilities", sa.JSON(), nullable=False),
        sa.Column("enrolled_at", sa.DateTime(), nullable=False),
        sa.Column("registered_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.Column("desired_generation", sa.Integer(), nullable=False),
        sa.Column("acked_generation", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "rollouts",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("cause", sa.Text(), nullable=False),
        sa.Column("traceparent", sa.String(length=55), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("deadline", sa.DateTime(), nullable=False),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_rollouts_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_rollouts_state"), ["state"], unique=False)

    op.create_table(
        "tenants",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("classifiers", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "rollout_targets",
        sa.Column("rollout_id", sa.String(length=36), nullable=False),
        sa.Column("host_id", sa.String(length=63), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("acked_at", sa.DateTime(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["rollout_id"], ["rollouts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("rollout_id", "host_id"),
        sa.UniqueConstraint("host_id", "generation", name="uq_rollout_targets_host_generation"),
    )
    op.create_table(
        "rules",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=True),
        sa.Column("hosts", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("match", sa.JSON(), nullable=False),
        sa.Column("detours", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("rules", schema=None) as batch_op:
        batch_op.create_index("ix_rules_priority_name", ["priority", "name"], unique=False)
        batch_op.create_index(batch_op.f("ix_rules_tenant"), ["tenant"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("rules", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rules_tenant"))
        batch_op.drop_index("ix_rules_priority_name")

    op.drop_table("rules")
    op.drop_table("rollout_targets")
    op.drop_table("tenants")
    with op.batch_alter_table("rollouts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_rollouts_state"))
        batch_op.drop_index(batch_op.f("ix_rollouts_created_at"))

    op.drop_table("rollouts")
    op.drop_table("hosts")
