"""Several controllers on one PostgreSQL: two rollouts started at once by two processes
(here two sessions on two threads, as two replicas' REST calls would be) each get a
generation of their own for a host they both target, one after the other, never the same.

Under READ COMMITTED both used to compute N + 1 from the host's generation N, when their
session had read the host before the rollout (the lock on the shipped-intent baseline made
the second wait, but it went on with the copy it held); the second then died on the unique
(host, generation) of rollout_targets (a 500 to its caller, an ack batch lost). The
order is made with PostgreSQL's own view of who waits on a lock, not with timing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from conftest import PostgresServer
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from lachesis_controller.db import make_sessionmaker, utcnow
from lachesis_controller.models import Host, RolloutTarget
from lachesis_controller.rollout import engine as rollouts

HOSTS = ["h1", "h2"]


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[Engine]:
    engine = create_engine(postgres_server.fresh_database())
    now = utcnow()
    with make_sessionmaker(engine).begin() as session:
        for host_id in HOSTS:
            session.add(
                Host(
                    id=host_id,
                    agent_version="0.1.0",
                    capabilities={},
                    enrolled_at=now,
                    registered_at=now,
                    last_seen=now,
                    desired_generation=3,
                    acked_generation=3,
                )
            )
    yield engine
    engine.dispose()


def _start(session: Session, cause: str) -> None:
    # Hosts already in the session, as record_acks has them when an ack sets off a rollback
    # (the leader) while a REST call on another replica starts a rollout.
    # Held: the identity map keeps only what something references.
    session.info["hosts"] = session.scalars(select(Host).where(Host.id.in_(HOSTS))).all()
    rollouts.start_rollout(
        session, cause=cause, trigger="test", host_ids=HOSTS, now=utcnow(), timeout_s=30.0, traceparent=None
    )


def _waiting_on_a_lock(engine: Engine) -> int:
    with engine.connect() as connection:
        return connection.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        ).scalar_one()


def test_concurrent_rollouts_on_two_sessions_get_distinct_generations(pg: Engine) -> None:
    sessions = make_sessionmaker(pg)
    first = sessions()
    first.begin()
    _start(first, "first")  # flushed, not committed: it holds what it wrote

    errors: list[BaseException] = []

    def second() -> None:
        try:
            with sessions.begin() as session:
                _start(session, "second")
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    # The second blocks on the first's rows (a counted poll, not a sleep).
    for _ in range(2000):
        if _waiting_on_a_lock(pg) or not thread.is_alive():
            break
    else:
        pytest.fail("the second rollout never waited on the first")
    first.commit()
    first.close()
    thread.join(60)
    assert not thread.is_alive()
    assert errors == []

    with sessions() as session:
        for host_id in HOSTS:
            generations = session.scalars(
                select(RolloutTarget.generation)
                .where(RolloutTarget.host_id == host_id)
                .order_by(RolloutTarget.generation)
            ).all()
            assert generations == [4, 5], host_id
            assert session.get(Host, host_id).desired_generation == 5  # type: ignore[union-attr]
