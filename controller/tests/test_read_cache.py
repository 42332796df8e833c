"""The read cache (api/read_cache.py): a read of the tenants, one tenant, the rules or one rule
is answered from the bytes a replica kept while no transaction wrote the table since, and a
write through one replica (or any statement on the database) is seen by the next read
through another."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import TENANT, rule_body, secured_client
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, event, text

from lachesis_controller.api.read_cache import Answer, ReadCache, SharedLookup
from lachesis_controller.app import create_app
from lachesis_controller.config import Settings

READS = ("/api/v1/tenants", "/api/v1/tenants/web", "/api/v1/rules", "/api/v1/rules/r1")


@pytest.fixture
def replicas(settings: Settings) -> Iterator[tuple[TestClient, TestClient]]:
    """Two controllers on one database, each with its own cache."""
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        yield a, b


def statements(client: TestClient) -> list[str]:
    """The SQL the client's controller runs from now on."""
    run: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        run.append(statement)

    event.listen(client.app.state.engine, "before_cursor_execute", record)  # type: ignore[attr-defined]
    return run


def tables_read(run: list[str]) -> list[str]:
    """The tables the statements read tenants, rules or counters from, in order (the
    controller's background tasks read others)."""
    return re.findall(r"\bFROM (tenants|rules|read_generations)\b", " ".join(run))


def lookups(client: TestClient) -> int:
    """Counter lookups the client's controller sent on PostgreSQL's own connection (on SQLite
    the lookup is a statement of the read's transaction, in `statements`)."""
    counters = client.app.state.read_cache.counters  # type: ignore[attr-defined]
    return 0 if counters is None else int(counters.lookups)


def counter_reads(client: TestClient, run: list[str], since: int) -> int:
    """Counter lookups since `since` (lookups() then), whichever way they were made."""
    return tables_read(run).count("read_generations") + lookups(client) - since


def read_all(client: TestClient) -> dict[str, Any]:
    answers = {path: client.get(path) for path in READS}
    for path, answer in answers.items():
        assert answer.status_code == 200, (path, answer.text)
    return {path: answer.json() for path, answer in answers.items()}


def test_a_repeated_read_runs_only_the_counter_lookup(replicas: tuple[TestClient, TestClient]) -> None:
    a, _ = replicas
    assert a.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert a.post("/api/v1/rules", json=rule_body("r1")).status_code == 201
    first = {path: a.get(path) for path in READS}
    run, since = statements(a), lookups(a)
    for path in READS:
        again = a.get(path)
        assert again.status_code == 200
        assert again.content == first[path].content
        assert again.headers.get("etag") == first[path].headers.get("etag")
    assert set(tables_read(run)) <= {"read_generations"}
    assert counter_reads(a, run, since) == len(READS)  # one per read: they come one at a time


def test_each_write_through_one_replica_is_read_through_the_other(replicas: tuple[TestClient, TestClient]) -> None:
    a, b = replicas
    assert a.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert a.post("/api/v1/tenants", json={"name": "db", "classifiers": []}).status_code == 201
    assert a.post("/api/v1/rules", json=rule_body("r1")).status_code == 201
    before = read_all(b)
    assert before == read_all(b)  # now kept by b

    # Each kind of write, through a; b's next read answers it.
    changed = {**TENANT, "description": "changed"}
    assert a.put("/api/v1/tenants/web", json=changed).status_code == 200
    after = read_all(b)
    assert after["/api/v1/tenants/web"]["description"] == "changed"
    assert [t.get("description") for t in after["/api/v1/tenants"]] == [None, "changed"]

    assert a.put("/api/v1/rules/r1", json=rule_body("r1", priority=42)).status_code == 200
    after = read_all(b)
    assert after["/api/v1/rules/r1"]["priority"] == 42
    assert [r["priority"] for r in after["/api/v1/rules"]] == [42]

    assert a.post("/api/v1/rules", json=rule_body("r2", priority=1)).status_code == 201
    assert [r["name"] for r in read_all(b)["/api/v1/rules"]] == ["r2", "r1"]

    assert a.delete("/api/v1/rules/r2").status_code == 200
    assert [r["name"] for r in read_all(b)["/api/v1/rules"]] == ["r1"]
    assert b.get("/api/v1/rules/r2").status_code == 404

    assert a.delete("/api/v1/tenants/db").status_code == 200
    assert [t["name"] for t in read_all(b)["/api/v1/tenants"]] == ["web"]

    assert a.post("/api/v1/tenants", json={"name": "new", "classifiers": []}).status_code == 201
    assert [t["name"] for t in read_all(b)["/api/v1/tenants"]] == ["new", "web"]


def by_hand(settings: Settings, *statements: str, commit: bool) -> None:
    """Run statements on the database behind the controllers' back."""
    engine: Engine = create_engine(settings.database_url)
    try:
        with engine.connect() as connection, connection.begin() as transaction:
            for statement in statements:
                connection.execute(text(statement))
            if not commit:
                transaction.rollback()
    finally:
        engine.dispose()


def test_a_statement_outside_the_api_is_read_too(replicas: tuple[TestClient, TestClient], settings: Settings) -> None:
    # The counters are bumped by the database, whatever wrote the table.
    a, _ = replicas
    assert a.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert a.post("/api/v1/rules", json=rule_body("r1")).status_code == 201
    read_all(a)
    by_hand(settings, "UPDATE tenants SET description = 'by hand'", "UPDATE rules SET priority = 7", commit=True)
    after = read_all(a)
    assert after["/api/v1/tenants/web"]["description"] == "by hand"
    assert after["/api/v1/tenants"][0]["description"] == "by hand"
    assert after["/api/v1/rules/r1"]["priority"] == 7
    assert after["/api/v1/rules"][0]["priority"] == 7


def test_a_rolled_back_write_keeps_the_kept_answers(
    replicas: tuple[TestClient, TestClient], settings: Settings
) -> None:
    a, _ = replicas
    assert a.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert [a.get(path).status_code for path in READS[:2]] == [200, 200]  # now kept
    by_hand(settings, "UPDATE tenants SET description = 'never'", commit=False)
    run, since = statements(a), lookups(a)
    assert a.get("/api/v1/tenants/web").json()["description"] is None
    assert a.get("/api/v1/tenants").json()[0]["description"] is None
    assert set(tables_read(run)) <= {"read_generations"}
    assert counter_reads(a, run, since) == 2


def test_a_tenant_token_is_refused_a_kept_rule_of_another_tenant(tmp_path: Path, redis_url: str) -> None:
    # The kept answer is the same for every caller; who may see it is decided at each read.
    with secured_client(tmp_path, redis_url, "boot") as admin:
        admin.headers["Authorization"] = "Bearer boot"
        assert admin.post("/api/v1/tenants", json=TENANT).status_code == 201
        assert admin.post("/api/v1/tenants", json={"name": "db", "classifiers": []}).status_code == 201
        assert admin.post("/api/v1/rules", json=rule_body("r1")).status_code == 201
        assert admin.get("/api/v1/rules/r1").status_code == 200
        tenants = admin.get("/api/v1/tenants").json()
        made = admin.post("/api/v1/tokens", json={"name": "db-viewer", "role": "viewer", "tenant": "db"})
        assert made.status_code == 201, made.text
        viewer = {"Authorization": f"Bearer {made.json()['token']}"}
        assert admin.get("/api/v1/rules/r1", headers=viewer).status_code == 403
        assert admin.get("/api/v1/rules", headers=viewer).json() == []
        assert admin.get("/api/v1/tenants", headers=viewer).json() == [t for t in tenants if t["name"] == "db"]
        assert admin.get("/api/v1/tenants/web", headers=viewer).status_code == 403


class Lookups:
    """A stand-in for the counters' database: each lookup answers its own number once let go."""

    def __init__(self) -> None:
        self.sent = 0
        self.go = asyncio.Event()
        self.fail = False

    async def __call__(self) -> dict[str, int]:
        self.sent += 1
        sent = self.sent
        await self.go.wait()
        if self.fail:
            raise OSError("connection lost")
        return {"tenants": sent}


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(10):
        await asyncio.sleep(0)


def test_reads_share_a_lookup_sent_after_they_arrived() -> None:
    async def scenario() -> None:
        database = Lookups()
        shared = SharedLookup(database)
        first = [asyncio.create_task(shared.read()) for _ in range(3)]
        await settle()  # the three are waiting; the lookup is sent
        assert database.sent == 1
        # Arrived after the send: they must not take its answer, which may predate a write
        # acknowledged before they began.
        later = [asyncio.create_task(shared.read()) for _ in range(2)]
        await settle()
        assert database.sent == 1
        database.go.set()
        assert await asyncio.gather(*first) == [{"tenants": 1}] * 3
        assert await asyncio.gather(*later) == [{"tenants": 2}] * 2
        assert (database.sent, shared.lookups) == (2, 2)
        assert await shared.read() == {"tenants": 3}  # alone: a lookup of its own

    asyncio.run(scenario())


def test_a_failed_lookup_is_unknown_and_the_next_one_is_sent() -> None:
    async def scenario() -> None:
        database = Lookups()
        database.go.set()
        database.fail = True
        shared = SharedLookup(database)
        assert await shared.read() is None
        database.fail = False
        assert await shared.read() == {"tenants": 2}

    asyncio.run(scenario())


def test_a_cancelled_read_leaves_the_others_their_answer() -> None:
    async def scenario() -> None:
        database = Lookups()
        shared = SharedLookup(database)
        gone, stays = asyncio.create_task(shared.read()), asyncio.create_task(shared.read())
        await settle()
        gone.cancel()
        database.go.set()
        assert await stays == {"tenants": 1}
        assert gone.cancelled()

    asyncio.run(scenario())


def test_a_read_is_answered_from_the_database_when_the_counters_are_unknown() -> None:
    # A failed lookup keeps nothing: the next read builds again rather than trust an old copy.
    async def scenario() -> None:
        database = Lookups()
        database.go.set()
        cache = ReadCache()
        cache.counters = SharedLookup(database)
        built: list[int] = []

        def build(_session: Any) -> Answer:
            built.append(1)
            return Answer(b"[]")

        def sessions() -> Any:
            return contextlib.nullcontext(SimpleNamespace(begin=contextlib.nullcontext))

        await cache.answer(sessions, "tenants", (), build)
        await cache.answer(sessions, "tenants", (), build)  # counter 2: built again
        database.fail = True
        await cache.answer(sessions, "tenants", (), build)
        await cache.answer(sessions, "tenants", (), build)
        assert len(built) == 4
        database.fail = False
        await cache.answer(sessions, "tenants", (), build)
        assert len(built) == 5 and len(cache) == 1

    asyncio.run(scenario())
