"""Database engine, sessions and schema migrations.

The controller uses a synchronous engine and calls it from the event loop. Every
transaction is short (a few rows) and SQLite is local, so the loop blocks for well under a
millisecond, and running all DB work on one thread means the API handlers, the bus
consumers and the reconciler never interleave inside a transaction.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import ColumnElement, DateTime, Engine, Text, any_, bindparam, cast, create_engine, event
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def utcnow() -> datetime:
    return datetime.now(UTC)


def among(
    session: Session, column: ColumnElement[Any] | InstrumentedAttribute[Any], values: Iterable[Any]
) -> ColumnElement[bool]:
    """`column IN values`; on PostgreSQL `column = ANY(:values)`, one array parameter. An IN
    list is one placeholder per value, so its statement's text differs with every count:
    psycopg parses each such text anew (its cache keeps short statements only), which with
    1,000 hosts was 4% of a rollout's controller CPU (docs/benchmarks/controller.md, eleventh
    round); the array's statement is the same text whatever the count. That text is then
    prepared, and PostgreSQL may plan it without knowing the array's length: use it for
    lookups by key in small tables (hosts), not on rollout_targets, where such a plan's cost
    grew with the rollouts ever made (d7f88f9)."""
    values = list(values)
    if session.get_bind().dialect.name == "postgresql":
        array = cast(bindparam(None, pg_array(values), type_=Text()), ARRAY(column.type))
        return column == any_(array)
    return column.in_(values)


def naive_utc(value: datetime) -> datetime:
    """An aware datetime as the columns hold it: naive UTC."""
    return value.astimezone(UTC).replace(tzinfo=None)


def pg_array(values: Iterable[str | int | datetime | None]) -> str:
    """A PostgreSQL array literal (`{"a","b"}`) of `values`, for `CAST(:p AS type[])`:
    psycopg adapts a list element by element in Python (its ListDumper), which for a
    1,000-host ack batch's arrays was 8% of the controller's CPU; this is one string.
    Strings are quoted (so "NULL" stays a string), None is NULL, datetimes are naive UTC
    (as the columns hold them) in ISO format."""
    parts = []
    written: dict[datetime, str] = {}  # a batch's rows mostly share one timestamp
    for value in values:
        if isinstance(value, str):
            if '"' in value or "\\" in value:
                value = value.replace("\\", "\\\\").replace('"', '\\"')
            parts.append(f'"{value}"')
        elif value is None:
            parts.append("NULL")
        elif isinstance(value, datetime):
            text = written.get(value)
            if text is None:
                naive = naive_utc(value) if value.tzinfo is not None else value
                text = written[value] = f'"{naive.isoformat(sep=" ")}"'
            parts.append(text)
        elif isinstance(value, int) and not isinstance(value, bool):
            parts.append(str(value))
        else:
            raise TypeError(f"no array literal for {type(value).__name__}")
    return "{" + ",".join(parts) + "}"


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, whatever the backend keeps.

    SQLite stores no offset, so without this a value would come back naive and compare
    wrongly with utcnow().
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return naive_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# A pooled PostgreSQL connection idle for longer than this is pinged before use. Not at every
# checkout: the pool's pre-ping was a round trip per request, with the event loop blocked on
# it, 7% of the controller's time under 200 clients (docs/benchmarks/controller.md, sixth round).
IDLE_PING_S = 1.0


def make_engine(url: str, idle_ping_s: float = IDLE_PING_S) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            _private_file(Path(parsed.database).expanduser())
        engine = create_engine(url, connect_args={"timeout": 5})
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    engine = create_engine(url)
    event.listen(engine, "connect", _note_use)
    event.listen(engine, "checkin", _note_use)
    event.listen(engine, "checkout", functools.partial(_ping_if_idle, dialect=engine.dialect, idle_s=idle_ping_s))
    return engine


def _note_use(_dbapi_connection: Any, record: Any) -> None:
    record.info["used"] = time.monotonic()


def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any, *, dialect: Any, idle_s: float) -> None:
    """What a PostgreSQL restart leaves behind: a connection idle since is found dead here
    and replaced before a request uses it (DisconnectionError makes the pool discard it and
    check out another). One used within `idle_s` is trusted: after a restart under load the
    first statement on one fails, and SQLAlchemy then recycles every connection of the pool,
    so one request per replica fails where a ping at every checkout would have saved it.
    test_db_restart.py."""
    if time.monotonic() - record.info.get("used", 0.0) <= idle_s:
        return
    try:
        dialect.do_ping(dbapi_connection)
    except dialect.loaded_dbapi.Error as exc:
        raise DisconnectionError(f"pooled connection is dead: {exc}") from exc


def _private_file(path: Path) -> None:
    """Create the database file readable by its owner only (it holds token hashes and
    every tenant's intent), and tighten one an older version left world-readable. SQLite
    gives the -wal and -shm files it creates the database file's mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        if file.exists():
            file.chmod(0o600)


def _sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # Python's sqlite3 module commits on its own before DDL; taking transaction control
    # away from it (and issuing BEGIN in _sqlite_begin) makes a migration all-or-nothing
    # like every other transaction.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    # SQLite ignores foreign keys unless asked, per connection.
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL: readers (e.g. a backup or a test looking at the file) never block the
    # controller's writes, and a commit costs one fsync of the log only.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _sqlite_begin(connection: Any) -> None:
    connection.exec_driver_sql("BEGIN")


def read_bind(engine: Engine) -> Engine:
    """What a request that only reads runs its session on. On PostgreSQL a connection without
    a transaction: under READ COMMITTED (the server's default, which the controller keeps)
    each statement sees what was committed before it began whether in a transaction or not,
    so the BEGIN and COMMIT around a read were two round trips that bought nothing, and
    with the database calls on the event loop every round trip stalls every request of the
    process. SQLite keeps its transaction: there it is what gives a read one snapshot."""
    if engine.dialect.name == "sqlite":
        return engine
    return engine.execution_options(isolation_level="AUTOCOMMIT")


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    # expire_on_commit=False: handlers build the response from objects after commit.
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (run at every start-up; a no-op when current).
    `app.prepare_database` also records the intent baseline a first rollback needs."""
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, "heads")
