"""A PostgreSQL restart under a running controller (db.make_engine): a pooled connection
idle since is pinged and replaced before use, and one used just before the restart fails
one statement, after which the pool has recycled every connection. The read cache's counter
lookup, on a connection of its own, is unknown at worst once and then connects again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from conftest import PostgresServer, _need_postgres
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from lachesis_controller.api.read_cache import PostgresCounters, SharedLookup
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


def test_the_read_caches_counter_lookup_connects_again_after_a_restart(server: PostgresServer) -> None:
    url = server.fresh_database()
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            # A fresh database is migrated: the counters are there, at 0.
            connection.execute(text("UPDATE read_generations SET value = 5 WHERE name = 'tenants'"))
            expected = {
                name: value for name, value in connection.execute(text("SELECT name, value FROM read_generations"))
            }
    finally:
        engine.dispose()
    assert expected["tenants"] == 5

    async def scenario() -> None:
        counters = PostgresCounters(url)
        shared = SharedLookup(counters)
        try:
            assert await shared.read() == expected
            server.restart()
            # The connection used before the restart is dead: that lookup is unknown (its reads
            # are answered from the database), never wrong, and the next one connects again.
            assert await shared.read() in (None, expected)
            assert await shared.read() == expected
        finally:
            await shared.close()
            await counters.close()

    asyncio.run(scenario())
