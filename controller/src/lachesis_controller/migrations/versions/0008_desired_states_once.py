"""Desired state stored once per distinct content, not once per rollout target; what each
rollout changed (for rollbacks), what a rollback restored and the time a rollout was
given; the shipped-intent baseline.

Existing targets' messages move into desired_states (deduplicated by the SHA-256 of their
body, as rollouts._stored computes it); the phase-1 message becomes its quiesce list and a
rollback's `restores` its own column. The controller renders the same bytes from them.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24 22:00:00
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BODY = ("caches", "stages", "tenants", "rules")
# DesiredState's field order (messages.py), for the messages the downgrade rebuilds.
ENVELOPE = ("schema", "host_id", "generation", "rollout_id", "issued_at", "traceparent", "phase", "quiesce", "restores")

targets = sa.table(
    "rollout_targets",
    sa.column("rollout_id", sa.String),
    sa.column("host_id", sa.String),
    sa.column("generation", sa.Integer),
    sa.column("message", sa.Text),
    sa.column("quiesce_message", sa.Text),
    sa.column("state_id", sa.String),
    sa.column("quiesce", sa.JSON),
    sa.column("restores", sa.Integer),
)
states = sa.table(
    "desired_states",
    sa.column("id", sa.String),
    sa.column("body", sa.Text),
    sa.column("created_at", sa.DateTime),
)
rollouts = sa.table(
    "rollouts",
    sa.column("id", sa.String),
    sa.column("created_at", sa.DateTime),
    sa.column("traceparent", sa.String),
)
BATCH = 500


def upgrade() -> None:
    op.create_table(
        "desired_states",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "shipped_intent",
        sa.Column("id", sa.String(length=16), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("timeout_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("changes", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("restored", sa.JSON(), nullable=True))
    with op.batch_alter_table("rollout_targets") as batch:
        batch.add_column(sa.Column("state_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("quiesce", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("restores", sa.Integer(), nullable=True))
        batch.create_index("ix_rollout_targets_state_id", ["state_id"], unique=False)
        batch.create_foreign_key(
            "fk_rollout_targets_state_id_desired_states",
            "desired_states",
            ["state_id"],
            ["id"],
            ondelete="SET NULL",
        )
    _move_messages()
    with op.batch_alter_table("rollout_targets") as batch:
        batch.drop_column("quiesce_message")
        batch.drop_column("message")


def _move_messages() -> None:
    connection = op.get_bind()
    known: set[str] = set()
    now = datetime.now(UTC).replace(tzinfo=None)
    last: tuple[str, str] = ("", "")
    while True:
        rows = connection.execute(
            sa.select(targets.c.rollout_id, targets.c.host_id, targets.c.message, targets.c.quiesce_message)
            .where(sa.tuple_(targets.c.rollout_id, targets.c.host_id) > last)
            .order_by(targets.c.rollout_id, targets.c.host_id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        for rollout_id, host_id, message, quiesce_message in rows:
            fields = json.loads(message)
            body = {k: fields[k] for k in BODY if k in fields}
            text = json.dumps(body, separators=(",", ":"))
            digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
            if digest not in known:
                exists = connection.execute(sa.select(states.c.id).where(states.c.id == digest)).first()
                if exists is None:
                    connection.execute(states.insert().values(id=digest, body=text, created_at=now))
                known.add(digest)
            quiesce = json.loads(quiesce_message).get("quiesce") if quiesce_message else None
            connection.execute(
                targets.update()
                .where(targets.c.rollout_id == rollout_id, targets.c.host_id == host_id)
                .values(state_id=digest, quiesce=quiesce, restores=fields.get("restores"))
            )
        last = (rows[-1][0], rows[-1][1])


def downgrade() -> None:
    with op.batch_alter_table("rollout_targets") as batch:
        batch.add_column(sa.Column("message", sa.Text(), nullable=True))
        batch.add_column(sa.Column("quiesce_message", sa.Text(), nullable=True))
    _render_messages()
    with op.batch_alter_table("rollout_targets") as batch:
        batch.alter_column("message", existing_type=sa.Text(), nullable=False)
        batch.drop_constraint("fk_rollout_targets_state_id_desired_states", type_="foreignkey")
        batch.drop_index("ix_rollout_targets_state_id")
        batch.drop_column("restores")
        batch.drop_column("quiesce")
        batch.drop_column("state_id")
    # In place: copying rollouts into a new table (batch mode's way) would drop the old one,
    # and with it every target (ON DELETE CASCADE). SQLite >= 3.35 drops columns itself.
    with op.batch_alter_table("rollouts", recreate="never") as batch:
        batch.drop_column("restored")
        batch.drop_column("changes")
        batch.drop_column("timeout_s")
    op.drop_table("shipped_intent")
    op.drop_table("desired_states")


def _render_messages() -> None:
    connection = op.get_bind()
    rows = connection.execute(
        sa.select(
            targets.c.rollout_id,
            targets.c.host_id,
            targets.c.generation,
            targets.c.quiesce,
            targets.c.restores,
            states.c.body,
            rollouts.c.created_at,
            rollouts.c.traceparent,
        ).select_from(
            targets.join(rollouts, rollouts.c.id == targets.c.rollout_id).outerjoin(
                states, states.c.id == targets.c.state_id
            )
        )
    ).all()
    for rollout_id, host_id, generation, quiesce, restores, body, created_at, traceparent in rows:
        fields: dict[str, Any] = {
            "schema": "lachesis.desired-state/v1",
            "host_id": host_id,
            "generation": generation,
            "rollout_id": rollout_id,
            "issued_at": _rfc3339(created_at),
            "traceparent": traceparent,
        }
        # A pruned state comes back empty: only the newest generations were kept.
        content = json.loads(body) if body is not None else {"tenants": [], "rules": []}
        install = _ordered(
            {**fields, **({"phase": "install", "restores": restores} if restores is not None else {}), **content}
        )
        phase1 = None
        if quiesce is not None:
            phase1 = _ordered({**fields, "phase": "quiesce", "quiesce": quiesce, **content})
        connection.execute(
            targets.update()
            .where(targets.c.rollout_id == rollout_id, targets.c.host_id == host_id)
            .values(message=install, quiesce_message=phase1)
        )


def _ordered(fields: dict[str, Any]) -> str:
    order = ENVELOPE + ("caches", "tenants", "rules", "stages")
    return json.dumps({k: fields[k] for k in order if k in fields}, separators=(",", ":"))


def _rfc3339(moment: datetime | str) -> str:
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
