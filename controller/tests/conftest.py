"""Shared fixtures: a real redis-server, a controller app on a fresh SQLite database, and a
fake agent that speaks the bus protocol (api-schemas/README.md) through Redis."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, inspect, select
from sqlalchemy.engine import Engine

from lachesis_controller.app import create_app, prepare_database
from lachesis_controller.config import Settings
from lachesis_controller.db import make_engine, utcnow
from lachesis_controller.models import Base, Rollout
from lachesis_controller.placement import devsim

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = REPO_ROOT / "api-schemas"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """Poll until predicate() is truthy; the timeout only bounds a hung test (keep it
    generous: no test asserts a duration)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class RedisServer:
    """A redis-server process of its own, on a free port, without persistence."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            wait_until(lambda: _pings(client), timeout=10, what="redis-server to answer")
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.exceptions.ConnectionError:
        return False


def missing_prerequisite(message: str) -> NoReturn:
    """Skips a test whose prerequisite this machine lacks; under CI (`CI=true`) fails it."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _need_redis_server() -> None:
    if shutil.which("redis-server") or Path("/usr/bin/redis-server").exists():
        return
    missing_prerequisite("redis-server is not installed (apt-get install redis-server)")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    _need_redis_server()
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


def make_settings(tmp_path: Path, redis_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'state' / 'lachesis.db'}",
        "redis_url": redis_url,
        "bind_host": "127.0.0.1",
        "bind_port": 0,
        "api_token": None,
        # Without a token the controller refuses to start unless auth is off on purpose: these
        # tests run it so (pass api_token=... for a secured controller).
        "insecure_no_auth": True,
        "rollout_timeout_s": 30.0,
        "reconcile_interval_s": 0.1,
    }
    values.update(overrides)
    return Settings(**values)


@contextlib.contextmanager
def secured_client(tmp_path: Path, redis_url: str, token: str, **overrides: Any) -> Iterator[TestClient]:
    """A controller with auth on, `token` its bootstrap admin; app.state.test_db_url names
    its database for tests that look behind the API."""
    settings = make_settings(tmp_path, redis_url, api_token=token, insecure_no_auth=False, **overrides)
    with TestClient(create_app(settings)) as client:
        client.app.state.test_db_url = settings.database_url  # type: ignore[attr-defined]
        yield client


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database migrated once; tests start from a copy (test_migrations.py covers the
    migration itself)."""
    path = tmp_path_factory.mktemp("template") / "lachesis.db"
    engine = make_engine(f"sqlite:///{path}")
    prepare_database(engine)
    engine.dispose()
    return path


# Modules whose tests also run against PostgreSQL (the production database): the ones about
# what the API stores. The rest exercise the bus and the CLI, which do not depend on it, and
# running them twice would double the suite's time for nothing.
BOTH_DATABASES = {
    "test_tenants",
    "test_rules",
    "test_policies",
    "test_concurrency",
    "test_rollouts",
    "test_stages_api",
    "test_rollouts_rollback",
    "test_rollout_bulk",
    "test_presence",
    "test_desired_states",
    "test_read_cache",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "db_backend" in metafunc.fixturenames:
        both = metafunc.module.__name__.rsplit(".", 1)[-1] in BOTH_DATABASES
        metafunc.parametrize("db_backend", ["sqlite", "postgresql"] if both else ["sqlite"], indirect=True)


@pytest.fixture
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, migrated_database: Path, db_backend: str
) -> Settings:
    if db_backend == "postgresql":
        server = request.getfixturevalue("postgres_server")
        return make_settings(tmp_path, redis_url, database_url=server.emptied_database())
    settings = make_settings(tmp_path, redis_url)
    target = tmp_path / "state" / "lachesis.db"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_database, target)
    return settings


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer(_need_postgres())
    server.start()
    yield server
    server.stop()


def _need_postgres() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1].parent
    missing_prerequisite("PostgreSQL is not installed (apt-get install postgresql)")


class PostgresServer:
    """A throw-away PostgreSQL cluster on a free port. initdb refuses to run as root, so
    as root the cluster belongs to the `postgres` user of Debian's package; its directory
    is made with mkdtemp directly under /tmp because pytest's own temp root is root-only."""

    TEMPLATE = "lachesis_template"

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="lachesis-pg-"))
        self.data = self.directory / "data"
        self.as_postgres = os.geteuid() == 0
        self.count = 0
        self.shared: str | None = None

    def _run(self, *args: str) -> None:
        command = list(args)
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        if self.as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C",
        )
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.directory / "log"),
            "-w",
            "start",
        )
        self._execute(f"CREATE DATABASE {self.TEMPLATE}")
        engine = make_engine(self.url(self.TEMPLATE))
        prepare_database(engine)
        engine.dispose()

    def restart(self) -> None:
        """Stop the server (its connections closed) and start it again as it was."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "restart")

    def _execute(self, statement: str) -> None:
        engine = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        with engine.connect() as connection:
            connection.exec_driver_sql(statement)
        engine.dispose()

    def fresh_database(self) -> str:
        """A new database at the current migration head, copied from the template."""
        self.count += 1
        name = f"lachesis_{self.count}"
        self._execute(f"CREATE DATABASE {name} TEMPLATE {self.TEMPLATE}")
        return self.url(name)

    def emptied_database(self) -> str:
        """The shared test database with every row gone (migrations kept): much cheaper
        than a new database per test. A lock timeout turns a connection a previous test
        leaked into a failure instead of a hang."""
        if self.shared is None:
            self.shared = self.fresh_database()
            return self.shared
        tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
        engine = create_engine(self.shared)
        with engine.begin() as connection:
            connection.exec_driver_sql("SET LOCAL lock_timeout = '5s'")
            connection.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        engine.dispose()
        return self.shared

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def db(settings: Settings) -> Iterator[Engine]:
    """A second connection to the controller's database, for looking behind the API."""
    engine = create_engine(settings.database_url)
    yield engine
    engine.dispose()


def snapshot(engine: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table: equal before and after means nothing changed."""
    tables = {}
    with engine.connect() as connection:
        for table in Base.metadata.sorted_tables:
            rows = connection.execute(select(table)).all()
            tables[table.name] = sorted((tuple(r) for r in rows), key=repr)
    return tables


def table_names(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class FakeAgent:
    """Plays an agent on the bus: registers, heartbeats, reads desired state, acks. The
    controller hears it only once it is enrolled (`enroll_host`)."""

    def __init__(self, url: str, host_id: str) -> None:
        self.url = url
        self.redis = redis.Redis.from_url(url, decode_responses=True)
        self.host_id = host_id

    def close(self) -> None:
        self.redis.close()

    def send(self, kind: str, message: dict[str, Any] | str, host_id: str | None = None) -> None:
        """XADD to this agent's own stream of `kind` (registrations, acks, telemetry, detours),
        or to `host_id`'s as a forger would."""
        raw = message if isinstance(message, str) else json.dumps(message)
        self.redis.xadd(f"lachesis:agent:{host_id or self.host_id}:{kind}", {"msg": raw})

    def register(self, agent_version: str = "0.1.0", data_paths: dict[str, Any] | None = None) -> None:
        self.send("registrations", self.registration(agent_version, data_paths))

    def registration(self, agent_version: str = "0.1.0", data_paths: dict[str, Any] | None = None) -> dict[str, Any]:
        """As an agent registers; `data_paths` (the data paths it runs and the classifier
        kinds each decides) left out unless given, as an agent from before them sends it."""
        return {
            "schema": "lachesis.registration/v1",
            "host_id": self.host_id,
            "agent_version": agent_version,
            "started_at": now_rfc3339(),
            "capabilities": {
                "cpus": 2,
                "devices": [],
                "kernel": {"release": "6.1.0", "btf": True, "io_uring": True, "fuse": True},
                **({"data_paths": data_paths} if data_paths is not None else {}),
            },
        }

    def heartbeat(self, generation: int = 0, ttl_s: int = 15) -> None:
        message = {
            "schema": "lachesis.heartbeat/v1",
            "host_id": self.host_id,
            "sent_at": now_rfc3339(),
            "generation": generation,
            "uptime_s": 1.5,
        }
        self.redis.set(f"lachesis:agent:{self.host_id}:heartbeat", json.dumps(message), ex=ttl_s)

    def desired(self) -> dict[str, Any] | None:
        raw = self.redis.get(f"lachesis:agent:{self.host_id}:desired")
        return None if raw is None else json.loads(raw)

    def wait_desired(self, generation: int, timeout: float = 30.0) -> dict[str, Any]:
        return wait_until(
            lambda: (d := self.desired()) is not None and d["generation"] == generation and d,
            timeout=timeout,
            what=f"{self.host_id} desired generation {generation}",
        )

    def inbox(self) -> list[dict[str, Any]]:
        entries = self.redis.xrange(f"lachesis:agent:{self.host_id}:inbox")
        return [json.loads(fields["msg"]) for _, fields in entries]

    def ack(self, state: dict[str, Any], status: str = "applied", reason: str | None = None) -> None:
        self.send("acks", self.ack_message(state, status, reason))

    def ack_message(self, state: dict[str, Any], status: str = "applied", reason: str | None = None) -> dict[str, Any]:
        return {
            "schema": "lachesis.ack/v1",
            "host_id": self.host_id,
            "generation": state["generation"],
            "rollout_id": state["rollout_id"],
            "status": status,
            "reason": reason,
            "rules_installed": len(state["rules"]) if status == "applied" else 0,
            "acked_at": now_rfc3339(),
            "traceparent": state["traceparent"],
        }


@pytest.fixture
def agents(redis_url: str) -> Iterator[Callable[[str], FakeAgent]]:
    made: list[FakeAgent] = []

    def make(host_id: str) -> FakeAgent:
        agent = FakeAgent(redis_url, host_id)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


def enroll_host(client: TestClient, host_id: str) -> str:
    """POST the host's enrolment (the controller reads the streams of enrolled hosts only);
    returns the agent's own Redis URL. A FakeAgent keeps the admin URL it was made with."""
    response = client.post(f"/api/v1/hosts/{host_id}/enrollment")
    assert response.status_code == 201, response.text
    return str(response.json()["redis_url"])


def enroll(client: TestClient, agent: FakeAgent, data_paths: dict[str, Any] | None = None) -> dict[str, Any]:
    """Enrol and register the agent (with `data_paths` if given), wait for the controller to
    record it, ack generation 1."""
    enroll_host(client, agent.host_id)
    agent.register(data_paths=data_paths)
    state = agent.wait_desired(1)
    agent.ack(state)
    wait_until(
        lambda: client.get(f"/api/v1/hosts/{agent.host_id}").json().get("acked_generation") == 1,
        what=f"{agent.host_id} enrolled",
    )
    return state


def pass_deadline(client: TestClient, *rollout_ids: str) -> None:
    """Moves the rollouts' deadlines into the past, so the reconciler's next pass finds them
    overdue: a test orders "after the deadline" by this event instead of waiting for a clock."""
    with client.app.state.sessions.begin() as session:  # type: ignore[attr-defined]
        for rollout_id in rollout_ids:
            rollout = session.get(Rollout, rollout_id)
            assert rollout is not None, rollout_id
            rollout.deadline = utcnow() - timedelta(seconds=1)


def wait_rollout(client: TestClient, rollout_id: str, timeout: float = 30.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = client.get(f"/api/v1/rollouts/{rollout_id}").json()
        return body if body["state"] != "pending" else None

    return wait_until(done, timeout=timeout, what=f"rollout {rollout_id} to finish")


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["status"] == status
    assert isinstance(body["type"], str) and body["type"]
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    return body


TENANT = {"name": "web", "classifiers": [{"kind": "path_prefix", "value": "/srv/web/"}]}


def rule_body(name: str = "r1", **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "priority": 10,
        "match": {"tenant": "web", "ops": ["read"]},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/web"}}],
    }
    body.update(overrides)
    return body


@pytest.fixture(scope="session")
def simulator() -> Path:
    """The `lachesis-devsim` binary the placement broker runs (built from agents/device)."""
    try:
        return devsim.find_devsim()
    except devsim.DevsimUnavailable as e:
        missing_prerequisite(str(e))
