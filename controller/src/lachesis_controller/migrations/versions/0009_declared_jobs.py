"""Declared maintenance IO jobs (declared_io/).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 07:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "declared_jobs",
        sa.Column("id", sa.String(length=63), nullable=False),
        sa.Column("host_id", sa.String(length=63), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("deadline", sa.DateTime(), nullable=False),
        sa.Column("pace", sa.String(length=16), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("rate_bytes_per_s", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.String(length=128), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("bytes_declared", sa.BigInteger(), nullable=True),
        sa.Column("dispatched_bytes", sa.BigInteger(), nullable=False),
        sa.Column("foreground_bytes", sa.BigInteger(), nullable=False),
        sa.Column("shared_bytes", sa.BigInteger(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("checksums", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=128), nullable=False),
        sa.Column("reported_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_declared_jobs_host_state", "declared_jobs", ["host_id", "state"], unique=False)
    op.create_index(op.f("ix_declared_jobs_source"), "declared_jobs", ["source"], unique=False)
    op.create_index(op.f("ix_declared_jobs_tenant"), "declared_jobs", ["tenant"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_declared_jobs_tenant"), table_name="declared_jobs")
    op.drop_index(op.f("ix_declared_jobs_source"), table_name="declared_jobs")
    op.drop_index("ix_declared_jobs_host_state", table_name="declared_jobs")
    op.drop_table("declared_jobs")
