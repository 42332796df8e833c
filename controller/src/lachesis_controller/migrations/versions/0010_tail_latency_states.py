"""The tail-latency application's decision per stage (tail_latency/), so forwarding survives
a controller restart or a leader change.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25 10:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tail_latency_states",
        sa.Column("stage", sa.String(length=128), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("forwarded_to", sa.Text(), nullable=True),
        sa.Column("reclaim_bytes_per_s", sa.BigInteger(), nullable=True),
        sa.Column("baseline_us", sa.Float(), nullable=True),
        sa.Column("forwards", sa.Integer(), nullable=False),
        sa.Column("reclaims", sa.Integer(), nullable=False),
        sa.Column("since_rollout", sa.String(length=36), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("stage"),
    )


def downgrade() -> None:
    op.drop_table("tail_latency_states")
