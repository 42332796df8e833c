"""A PostgreSQL restart under a running controller (db.make_engine): a pooled connection
idle since is pinged and replaced before use, and one used just before the restart fails
one statement, after which the pool has recycled every connection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import PostgresServer, _need_postgres
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from lachesis_controller.db import make_engine


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    # A cluster of its own: restarting the shared one would cut other tests' connections.
    server = PostgresServer(_need_postgres())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def one(engine: Engine) -> int:
    with engine.connect() as connection:
        return int(connection.execute(text("SELECT 1")).scalar_one())


def pool_of_two(engine: Engine) -> None:
    """Two connections made and returned to the pool."""
    with engine.connect() as a, engine.connect() as b:
        a.execute(text("SELECT 1"))
        b.execute(text("SELECT 1"))


def test_a_connection_idle_across_a_restart_is_replaced_before_use(server: PostgresServer) -> None:
    # idle_ping_s=0: every connection counts as idle, so every checkout pings.
    engine = make_engine(server.fresh_database(), idle_ping_s=0)
    try:
        pool_of_two(engine)
        server.restart()
        assert [one(engine) for _ in range(3)] == [1, 1, 1]
    finally:
        engine.dispose()


def test_a_connection_used_just_before_a_restart_fails_once(server: PostgresServer) -> None:
    # An idle time no test reaches: no connection is pinged.
    engine = make_engine(server.fresh_database(), idle_ping_s=3600)
    try:
        pool_of_two(engine)
        server.restart()
        with pytest.raises(OperationalError) as failed:
            one(engine)
        assert failed.value.connection_invalidated
        # The other pooled connection was recycled with it: no second failure.
        assert [one(engine) for _ in range(3)] == [1, 1, 1]
    finally:
        engine.dispose()
