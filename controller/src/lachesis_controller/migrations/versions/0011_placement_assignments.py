"""Placement assignments in their own table: the handle each owned flash cache stream was
last shipped with, per host (stages/store.py), instead of parsing the last desired state.

Filled from each host's desired generation, so an upgrade keeps every stage's handle (a
stream whose handle changes is rebuilt cold).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 21:40:00
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    table = op.create_table(
        "placement_assignments",
        sa.Column("host_id", sa.String(length=63), nullable=False),
        sa.Column("device", sa.String(length=63), nullable=False),
        sa.Column("tenant", sa.String(length=63), nullable=False),
        sa.Column("part", sa.String(length=16), nullable=False),
        sa.Column("handle", sa.Integer(), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["host_id"], ["hosts.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("host_id", "device", "tenant", "part"),
    )
    # Written out here rather than imported: a migration must not change with the code.
    shipped = op.get_bind().execute(
        sa.text(
            "SELECT h.id, h.capabilities, t.generation, s.body FROM hosts h"
            " JOIN rollout_targets t ON t.host_id = h.id AND t.generation = h.desired_generation"
            " JOIN desired_states s ON s.id = t.state_id"
        )
    )
    rows = []
    for host_id, capabilities, generation, body in shipped:
        caps = json.loads(capabilities) if isinstance(capabilities, str) else capabilities or {}
        devices = [d["name"] for d in caps.get("devices", [])]
        seen = set()
        for s in json.loads(body).get("stages", []):
            device = s.get("device") or (devices[0] if devices else None)
            if s.get("kind") != "cache" or not s.get("owner") or device is None:
                continue
            for p in s.get("placement", []):
                key = (device, s["owner"], p["part"])
                if key not in seen:
                    seen.add(key)
                    rows.append(
                        {
                            "host_id": host_id,
                            "device": device,
                            "tenant": s["owner"],
                            "part": p["part"],
                            "handle": int(p["handle"]),
                            "generation": generation,
                        }
                    )
    if rows:
        op.bulk_insert(table, rows)


def downgrade() -> None:
    op.drop_table("placement_assignments")
