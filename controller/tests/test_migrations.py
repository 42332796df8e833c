from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, func, inspect, select, text
from sqlalchemy.orm import Session

from lachesis_controller.db import alembic_config, make_engine, migrate
from lachesis_controller.models import Base, DesiredStateBody, RolloutTarget
from lachesis_controller.rollout.engine import QUIESCE, encode, message_of, rfc3339


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


def _at(engine: Engine, revision: str, *, down: bool = False) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        (command.downgrade if down else command.upgrade)(cfg, revision)


def _old_message(host: str, generation: int, rollout: str, issued: datetime, **extra: Any) -> str:
    return encode(
        {
            "schema": "lachesis.desired-state/v1",
            "host_id": host,
            "generation": generation,
            "rollout_id": rollout,
            "issued_at": rfc3339(issued),
            "traceparent": None,
            **extra,
            "tenants": [{"name": "web", "classifiers": []}],
            "rules": [],
        }
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_0008_moves_each_message_into_one_stored_state(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'l.db'}"
    else:
        server = request.getfixturevalue("postgres_server")
        server._execute("CREATE DATABASE migration_0008")  # empty: no revision yet
        url = server.url("migration_0008")
    engine = make_engine(url)
    _at(engine, "0007")
    issued = datetime(2026, 11, 24, 21, 0, 0, 123000, tzinfo=UTC)
    # Three hosts got the same state from one two-phase rollout; host-a then a rollback.
    messages, quiesce = {}, {}
    with engine.begin() as connection:
        for host in ("host-a", "host-b", "host-c"):
            connection.execute(
                text(
                    "INSERT INTO hosts (id, agent_version, capabilities, enrolled_at, registered_at, last_seen, "
                    "desired_generation, acked_generation) VALUES (:id, '0.1.0', '{}', :t, :t, :t, 3, 2)"
                ),
                {"id": host, "t": issued.replace(tzinfo=None)},
            )
        for rollout, generation in (("r-move", 2), ("r-back", 3)):
            connection.execute(
                text(
                    "INSERT INTO rollouts (id, cause, state, created_at, deadline) VALUES (:id, 'c', 'failed', :t, :t)"
                ),
                {"id": rollout, "t": issued.replace(tzinfo=None)},
            )
        for host in ("host-a", "host-b", "host-c"):
            messages[("r-move", host)] = _old_message(host, 2, "r-move", issued)
            quiesce[("r-move", host)] = _old_message(
                host, 2, "r-move", issued, phase="quiesce", quiesce=[{"tenant": "web"}]
            )
        messages[("r-back", "host-a")] = _old_message("host-a", 3, "r-back", issued, phase="install", restores=1)
        for (rollout, host), message in messages.items():
            connection.execute(
                text(
                    "INSERT INTO rollout_targets (rollout_id, host_id, generation, status, message, phase, quiesce_message) "
                    "VALUES (:r, :h, :g, 'rejected', :m, 'install', :q)"
                ),
                {
                    "r": rollout,
                    "h": host,
                    "g": json.loads(message)["generation"],
                    "m": message,
                    "q": quiesce.get((rollout, host)),
                },
            )
    _at(engine, "heads")

    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(DesiredStateBody)) == 1
        for target in session.scalars(select(RolloutTarget)):
            key = (target.rollout_id, target.host_id)
            assert message_of(target) == messages[key]  # the same bytes as first published
            if key in quiesce:
                assert message_of(target, QUIESCE) == quiesce[key]

    _at(engine, "0007", down=True)
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT rollout_id, host_id, message, quiesce_message FROM rollout_targets"))
        assert {(r, h): (m, q) for r, h, m, q in rows} == {k: (m, quiesce.get(k)) for k, m in messages.items()}
    engine.dispose()
