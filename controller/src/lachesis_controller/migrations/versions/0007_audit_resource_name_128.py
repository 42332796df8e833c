"""Audit events name resources of up to 128 characters (stage names), not 63.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column(
            "resource_name", existing_type=sa.String(length=63), type_=sa.String(length=128), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column(
            "resource_name", existing_type=sa.String(length=128), type_=sa.String(length=63), existing_nullable=False
        )
