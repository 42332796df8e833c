"""Versioned policy documents and what each compiled to.

Date-times are naive UTC, as in 0001.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 23:41:10.892270
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "policy_versions",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("compiled", sa.JSON(), nullable=False),
        sa.Column("tenants", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("rollout_id", sa.String(length=36), nullable=True),
        sa.PrimaryKeyConstraint("name", "version"),
    )


def downgrade() -> None:
    op.drop_table("policy_versions")
