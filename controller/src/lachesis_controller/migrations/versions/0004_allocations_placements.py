"""Cache allocation (curves, guarantees, current and proposed allocations) and FDP device
placements.

Off 0003; 0005 branches off 0003 too and the controller upgrades to all heads.
Date-times are naive UTC, as in 0001.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 01:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "allocation_curves",
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("sizes", sa.JSON(), nullable=False),
        sa.Column("miss_ratios", sa.JSON(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant"),
    )
    op.create_table(
        "allocation_guarantees",
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["tenant"], ["tenants.name"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("tenant"),
    )
    op.create_table(
        "cache_allocations",
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("capacity_bytes", sa.Float(), nullable=False),
        sa.Column("epsilon_bytes", sa.Float(), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("utility", sa.Float(), nullable=False),
        sa.Column("upper_bound", sa.Float(), nullable=False),
        sa.Column("optimal", sa.Boolean(), nullable=False),
        sa.Column("tenants", sa.JSON(), nullable=False),
        sa.Column("computed_at", sa.DateTime(), nullable=False),
        sa.Column("computed_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("state"),
    )
    op.create_table(
        "device_placements",
        sa.Column("host_id", sa.String(length=63), nullable=False),
        sa.Column("device", sa.String(length=63), nullable=False),
        sa.Column("handles", sa.Integer(), nullable=False),
        sa.Column("overprovisioning", sa.Float(), nullable=False),
        sa.Column("reclaim_units", sa.Integer(), nullable=False),
        sa.Column("streams", sa.JSON(), nullable=False),
        sa.Column("shared", sa.JSON(), nullable=False),
        sa.Column("predicted_dlwa", sa.Float(), nullable=False),
        sa.Column("predicted_by", sa.String(length=16), nullable=False),
        sa.Column("model_dlwa", sa.Float(), nullable=False),
        sa.Column("warnings", sa.JSON(), nullable=False),
        sa.Column("computed_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("host_id", "device"),
    )


def downgrade() -> None:
    op.drop_table("device_placements")
    op.drop_table("cache_allocations")
    op.drop_table("allocation_guarantees")
    op.drop_table("allocation_curves")
