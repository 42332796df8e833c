"""Stages declared through REST (/api/v1/stages); joins the 0004 and 0005 heads.

Revision ID: 0006
Revises: 0004, 0005
Create Date: 2026-11-24 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: tuple[str, ...] | None = ("0004", "0005")
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "stages",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("owner", sa.String(length=63), nullable=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.ForeignKeyConstraint(["owner"], ["tenants.name"], ondelete="RESTRICT"),
        sa.PrimaryKeyConstraint("name"),
    )
    with op.batch_alter_table("stages") as batch:
        batch.create_index(batch.f("ix_stages_owner"), ["owner"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("stages") as batch:
        batch.drop_index(batch.f("ix_stages_owner"))
    op.drop_table("stages")
