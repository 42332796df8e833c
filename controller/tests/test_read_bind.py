"""db.read_bind: a request that only reads runs on PostgreSQL without a server transaction
(no BEGIN and COMMIT round trips), and on SQLite in one (its snapshot)."""

from __future__ import annotations

from pathlib import Path

import psycopg
from conftest import PostgresServer
from sqlalchemy import select

from lachesis_controller.db import make_engine, make_sessionmaker, read_bind
from lachesis_controller.models import Tenant


def test_a_read_on_postgresql_opens_no_transaction(postgres_server: PostgresServer) -> None:
    engine = make_engine(postgres_server.fresh_database())
    try:
        sessions = make_sessionmaker(engine)
        for bind, status in ((read_bind(engine), "IDLE"), (engine, "INTRANS")):
            with sessions(bind=bind) as session, session.begin():
                session.scalars(select(Tenant)).all()
                dbapi = session.connection().connection.dbapi_connection
                assert isinstance(dbapi, psycopg.Connection)
                assert dbapi.info.transaction_status.name == status
    finally:
        engine.dispose()


def test_a_read_on_sqlite_keeps_its_transaction(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert read_bind(engine) is engine
    engine.dispose()
