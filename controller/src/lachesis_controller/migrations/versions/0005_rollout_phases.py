"""Two-phase rollouts (per-target phase, rollback link) and per-agent Redis credentials.

Off 0003 on purpose: 0004 is developed in parallel; the controller upgrades to all heads.

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-22 01:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("phase", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("rolled_back_by", sa.String(length=36), nullable=True))
    with op.batch_alter_table("rollout_targets") as batch:
        batch.add_column(sa.Column("phase", sa.String(length=16), server_default="install", nullable=False))
        batch.add_column(sa.Column("quiesce_message", sa.Text(), nullable=True))
        batch.add_column(sa.Column("drained_at", sa.DateTime(), nullable=True))
    op.create_table(
        "agent_credentials",
        sa.Column("host_id", sa.String(length=63), nullable=False),
        sa.Column("redis_user", sa.String(length=80), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("host_id"),
        sa.UniqueConstraint("redis_user"),
    )


def downgrade() -> None:
    op.drop_table("agent_credentials")
    with op.batch_alter_table("rollout_targets") as batch:
        batch.drop_column("drained_at")
        batch.drop_column("quiesce_message")
        batch.drop_column("phase")
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("rolled_back_by")
        batch.drop_column("phase")
