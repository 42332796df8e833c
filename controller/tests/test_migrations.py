from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from lachesis_controller.db import make_engine, migrate
from lachesis_controller.models import Base


def test_migrations_build_exactly_the_models(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'nested' / 'dir' / 'l.db'}")
    migrate(engine)
    migrate(engine)  # a second start-up is a no-op
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        tables = set(inspect(connection).get_table_names())
    engine.dispose()
    assert diff == [], f"models and migrations differ; add a migration: {diff}"
    assert {"hosts", "tenants", "rules", "rollouts", "rollout_targets", "alembic_version"} <= tables


def test_migrations_build_exactly_the_models_on_postgresql(postgres_server) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(postgres_server.fresh_database())
    migrate(engine)  # already at head (the template is migrated): a no-op
    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
        tables = set(inspect(connection).get_table_names())
    engine.dispose()
    assert diff == [], f"models and migrations differ on PostgreSQL: {diff}"
    assert {"api_tokens", "audit_events", "policy_versions", "alembic_version"} <= tables
