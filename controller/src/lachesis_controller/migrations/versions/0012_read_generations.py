"""A counter per cached table (read_generations), bumped by the database itself whenever a
transaction writes tenants or rules: the REST API's read cache (api/read_cache.py) answers
from its copy only while the counter it reads is the one the copy was made at.

Triggers rather than application code: a tenant or rule is written by its routes, by
rollbacks, policies and applications, in ORM and Core statements alike, and a write the
counter missed would serve a stale answer forever.

On PostgreSQL the trigger is a deferred constraint trigger, so it runs at the commit: the
counter rows are locked only while the transaction commits, never while it waits on
anything else, and always in the same order (by name), so two transactions that write both
tables cannot deadlock on them. SQLite locks the whole database for a write anyway. A
counter row that is missing (a table emptied by hand) is made again by the next write;
until then the cache keeps nothing for that table.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 07:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written out here rather than imported: a migration must not change with the code.
CACHED = ("rules", "tenants")
OPERATIONS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    table = op.create_table(
        "read_generations",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.bulk_insert(table, [{"name": name, "value": 0} for name in CACHED])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            """
            CREATE FUNCTION bump_read_generation() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                -- Every counter row in one order first: no two committing transactions
                -- wait on each other's rows in opposite orders.
                PERFORM 1 FROM read_generations ORDER BY name FOR UPDATE;
                INSERT INTO read_generations (name, value) VALUES (TG_TABLE_NAME, 1)
                    ON CONFLICT (name) DO UPDATE SET value = read_generations.value + 1;
                RETURN NULL;
            END
            $$
            """
        )
        for name in CACHED:
            op.execute(
                f"CREATE CONSTRAINT TRIGGER {name}_read_generation AFTER INSERT OR UPDATE OR DELETE ON {name}"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bump_read_generation()"
            )
    else:
        for name in CACHED:
            for operation in OPERATIONS:
                op.execute(
                    f"CREATE TRIGGER {name}_read_generation_{operation.lower()} AFTER {operation} ON {name}"
                    f" BEGIN INSERT INTO read_generations (name, value) VALUES ('{name}', 1)"
                    " ON CONFLICT (name) DO UPDATE SET value = value + 1; END"
                )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in CACHED:
            op.execute(f"DROP TRIGGER {name}_read_generation ON {name}")
        op.execute("DROP FUNCTION bump_read_generation()")
    else:
        for name in CACHED:
            for operation in OPERATIONS:
                op.execute(f"DROP TRIGGER {name}_read_generation_{operation.lower()}")
    op.drop_table("read_generations")
