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


def _empty_database(backend: str, name: str, tmp_path: Path, request: pytest.FixtureRequest) -> Engine:
    """A database with no revision yet, on SQLite or the test PostgreSQL server."""
    if backend == "sqlite":
        return make_engine(f"sqlite:///{tmp_path / 'l.db'}")
    server = request.getfixturevalue("postgres_server")
    server._execute(f"CREATE DATABASE {name}")
    return make_engine(server.url(name))


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
    engine = _empty_database(backend, "migration_0008", tmp_path, request)
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


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_0011_keeps_each_hosts_shipped_handles_as_its_placement_assignments(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    engine = _empty_database(backend, "migration_0011", tmp_path, request)
    _at(engine, "0010")
    t = datetime(2026, 11, 28, 21, 0, 0)
    stages = [  # one stage on the host's first device (none named), one on flash1, one in DRAM
        {
            "kind": "cache",
            "name": "cache/web",
            "owner": "web",
            "device": None,
            "placement": [{"part": "klog", "handle": 3}, {"part": "kset", "handle": 4}],
        },
        {
            "kind": "cache",
            "name": "cache/api",
            "owner": "api",
            "device": "flash1",
            "placement": [{"part": "loc", "handle": 1}],
        },
        {"kind": "cache", "name": "cache/tmp", "owner": None, "device": None, "placement": []},
    ]
    caps = json.dumps({"devices": [{"name": "flash0"}, {"name": "flash1"}]})
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO hosts (id, agent_version, capabilities, enrolled_at, registered_at, last_seen, "
                "desired_generation, acked_generation) VALUES ('host-a', '0.1.0', :c, :t, :t, :t, 2, 2)"
            ),
            {"c": caps, "t": t},
        )
        for generation in (1, 2):
            connection.execute(
                text(
                    "INSERT INTO rollouts (id, cause, state, created_at, deadline) VALUES (:id, 'c', 'succeeded', :t, :t)"
                ),
                {"id": f"r{generation}", "t": t},
            )
        for generation, body in (
            (1, {"tenants": [], "rules": []}),
            (2, {"stages": stages, "tenants": [], "rules": []}),
        ):
            connection.execute(
                text("INSERT INTO desired_states (id, body, created_at) VALUES (:id, :b, :t)"),
                {"id": f"s{generation}", "b": json.dumps(body), "t": t},
            )
            connection.execute(
                text(
                    "INSERT INTO rollout_targets (rollout_id, host_id, generation, status, state_id, phase) "
                    "VALUES (:r, 'host-a', :g, 'applied', :s, 'install')"
                ),
                {"r": f"r{generation}", "g": generation, "s": f"s{generation}"},
            )
    _at(engine, "heads")
    with engine.connect() as connection:
        rows = set(
            connection.execute(
                text("SELECT host_id, device, tenant, part, handle, generation FROM placement_assignments")
            )
        )
    assert rows == {
        ("host-a", "flash0", "web", "klog", 3, 2),
        ("host-a", "flash0", "web", "kset", 4, 2),
        ("host-a", "flash1", "api", "loc", 1, 2),
    }
    _at(engine, "0010", down=True)
    with engine.connect() as connection:
        assert "placement_assignments" not in inspect(connection).get_table_names()
    engine.dispose()
