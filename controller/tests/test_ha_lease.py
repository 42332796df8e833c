"""Several controllers at once (ha/lease.py) on a real PostgreSQL and a real redis-server:
one leads, the other follows; a leader that loses its database session stops its singletons
before the follower takes over; a new leader handles what the dead one was delivered but did
not ack; every replica reads the telemetry in a group of its own; /livez and /readyz.

Leadership is driven step by step (`Leadership.step`), so the order of events is the test's,
not the clock's."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import PostgresServer, make_settings
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import create_engine, text

from lachesis_controller.app import create_app
from lachesis_controller.bus.agent_telemetry import replica_group
from lachesis_controller.bus.client import CONSUMER, GROUP, Bus, agent_stream, make_redis
from lachesis_controller.bus.consumer import StreamConsumer
from lachesis_controller.config import ConfigError, Settings
from lachesis_controller.ha.lease import AdvisoryLease, Leadership, LocalLease


class Started:
    """Singletons that record their runs: the stop event each run got."""

    def __init__(self) -> None:
        self.runs: list[asyncio.Event] = []

    def __call__(self, stop: asyncio.Event) -> list[asyncio.Task[None]]:
        self.runs.append(stop)
        return [asyncio.create_task(stop.wait())]  # type: ignore[list-item]


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:
    return postgres_server.fresh_database()


def _terminate_lease_sessions(url: str, lease: AdvisoryLease) -> int:
    """End the session holding the lock as a lost connection would (server side)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        ended = connection.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' "
                "AND granted AND ((classid::bigint << 32) | objid::bigint) = :key"
            ),
            {"key": lease.key},
        ).scalar_one()
    engine.dispose()
    return int(ended)


def test_one_of_two_leads_and_the_other_takes_over_when_its_session_ends(pg_url: str) -> None:
    async def scenario() -> None:
        stop = asyncio.Event()
        first, second = Started(), Started()
        a, b = AdvisoryLease(pg_url), AdvisoryLease(pg_url)
        leader = Leadership(a, first, stop)
        follower = Leadership(b, second, stop)
        try:
            await leader.step()
            await follower.step()
            assert (leader.leading, follower.leading) == (True, False)
            assert len(first.runs) == 1 and second.runs == []
            await leader.step()  # checks and keeps it
            await follower.step()
            assert (leader.leading, follower.leading) == (True, False)

            assert _terminate_lease_sessions(pg_url, a) == 1
            await leader.step()
            # Stopped before anyone else could take over...
            assert not leader.leading and first.runs[0].is_set()
            assert leader.tasks == []
            await follower.step()
            # ...and then the follower leads, with singletons of its own.
            assert follower.leading and len(second.runs) == 1 and not second.runs[0].is_set()
            await leader.step()  # the old leader is a follower now
            assert not leader.leading and len(first.runs) == 1
        finally:
            stop.set()
            for lease in (a, b):
                lease.dispose()

    asyncio.run(scenario())


def test_the_lease_is_released_when_leadership_stops(pg_url: str) -> None:
    async def scenario() -> None:
        stop = asyncio.Event()
        started = Started()
        a, b = AdvisoryLease(pg_url), AdvisoryLease(pg_url)
        leadership = Leadership(a, started, stop)
        await leadership.step()
        runner = asyncio.create_task(leadership.run())
        stop.set()
        await runner
        assert started.runs[0].is_set() and not leadership.leading
        assert b.acquire()  # free at once: a clean stop hands over without waiting
        for lease in (a, b):
            lease.dispose()

    asyncio.run(scenario())


def test_an_abandoned_lease_is_free_for_the_next_leader_at_once(pg_url: str) -> None:
    # A check that got no answer abandons the connection while another thread may still be
    # blocked on it (held here, as that thread would hold it): the lock must not outlive it.
    a, b = AdvisoryLease(pg_url), AdvisoryLease(pg_url)
    assert a.acquire() and not b.acquire()
    blocked_on = a._connection
    a.abandon()
    assert not a.holds()
    tries = 0
    while not b.acquire():
        tries += 1
        assert tries < 50, "the abandoned session still holds the lock"
        threading.Event().wait(0.1)
    del blocked_on
    for lease in (a, b):
        lease.dispose()


class Note(BaseModel):
    host_id: str
    n: int


async def _consume(redis_url: str, kind: str, count: int, group: str | None = None) -> list[int]:
    """Run a StreamConsumer over ha-host's stream of `kind` until it handled `count` notes;
    with a `group` of its own (a replica's), drop that group afterwards."""
    bus = Bus(make_redis(redis_url))
    bus.set_enrolled(["ha-host"])
    stop = asyncio.Event()
    seen: list[int] = []

    async def handle(note: Any) -> None:
        seen.append(note.n)
        if len(seen) == count:
            stop.set()

    consumer = StreamConsumer(bus, kind, Note, handle, stop, group=group or GROUP)
    await asyncio.wait_for(consumer.run(), 30)
    if group is not None:
        await consumer.forget_group()
    await bus.redis.aclose()
    return seen


def test_a_new_leader_handles_what_the_dead_one_was_delivered_but_did_not_ack(redis_url: str) -> None:
    stream = agent_stream("ha-host", "acks")
    plain = redis.Redis.from_url(redis_url, decode_responses=True)
    plain.delete(stream)
    plain.xgroup_create(stream, GROUP, id="0", mkstream=True)
    for n in (1, 2):
        plain.xadd(stream, {"msg": Note(host_id="ha-host", n=n).model_dump_json()})
    # The dead leader: delivered both (XREADGROUP), killed before its XACK.
    delivered = plain.xreadgroup(GROUP, CONSUMER, {stream: ">"}, count=10)
    assert len(delivered[0][1]) == 2
    assert plain.xpending(stream, GROUP)["pending"] == 2

    assert asyncio.run(_consume(redis_url, "acks", 2)) == [1, 2]
    assert plain.xpending(stream, GROUP)["pending"] == 0
    plain.delete(stream)
    plain.close()


def test_entries_a_stale_leader_was_delivered_after_the_new_one_started_are_handled(redis_url: str) -> None:
    """The old leader, not yet aware it lost the lease, is delivered an entry under the shared
    consumer name after the new leader's first read of its pending entries, and stops
    before acking it: the new leader handles it at its next re-read of them."""
    stream = agent_stream("ha-host", "acks")
    plain = redis.Redis.from_url(redis_url, decode_responses=True)
    plain.delete(stream)

    async def new_leader() -> list[int]:
        bus = Bus(make_redis(redis_url))
        bus.set_enrolled(["ha-host"])
        stop, holding, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        seen: list[int] = []

        async def handle(note: Any) -> None:
            seen.append(note.n)
            if note.n == 1:  # the new leader is busy: meanwhile the old one reads
                holding.set()
                await release.wait()
            if len(seen) == 2:
                stop.set()

        consumer = StreamConsumer(bus, "acks", Note, handle, stop, recheck_every=1)
        task = asyncio.create_task(consumer.run())
        await asyncio.to_thread(plain.xadd, stream, {"msg": Note(host_id="ha-host", n=1).model_dump_json()})
        await asyncio.wait_for(holding.wait(), 30)
        await asyncio.to_thread(plain.xadd, stream, {"msg": Note(host_id="ha-host", n=2).model_dump_json()})
        stale = await asyncio.to_thread(plain.xreadgroup, GROUP, CONSUMER, {stream: ">"}, 10)
        assert [fields["msg"] for _, fields in stale[0][1]] == [Note(host_id="ha-host", n=2).model_dump_json()]
        release.set()
        await asyncio.wait_for(task, 30)
        await bus.redis.aclose()
        return seen

    assert asyncio.run(new_leader()) == [1, 2]
    assert plain.xpending(stream, GROUP)["pending"] == 0
    plain.delete(stream)
    plain.close()


def test_each_replica_reads_every_telemetry_report_in_its_own_group(redis_url: str) -> None:
    stream = agent_stream("ha-host", "telemetry")
    plain = redis.Redis.from_url(redis_url, decode_responses=True)
    plain.delete(stream)
    for n in (1, 2, 3):
        plain.xadd(stream, {"msg": Note(host_id="ha-host", n=n).model_dump_json()})

    assert asyncio.run(_consume(redis_url, "telemetry", 3, replica_group("r1"))) == [1, 2, 3]
    assert asyncio.run(_consume(redis_url, "telemetry", 3, replica_group("r2"))) == [1, 2, 3]
    assert plain.xinfo_groups(stream) == []  # each forgot its group at the end
    plain.delete(stream)
    plain.close()


def _leader_gauge(client: TestClient) -> float:
    found = re.search(r"^lachesis_controller_leader (\S+)$", client.get("/metrics").text, re.MULTILINE)
    assert found, "no lachesis_controller_leader gauge"
    return float(found.group(1))


def test_alone_on_sqlite_the_controller_leads(client: TestClient) -> None:
    assert client.app.state.leadership.lease.__class__ is LocalLease  # type: ignore[attr-defined]
    assert client.get("/readyz").json()["leader"] is True
    assert _leader_gauge(client) == 1.0
    live = client.get("/livez")
    assert live.status_code == 200 and live.json() == {"status": "ok"}
    assert client.get("/healthz").json() == {"status": "ok"}


def test_two_controllers_on_postgresql_one_leads_both_serve(
    tmp_path: Path, redis_url: str, postgres_server: PostgresServer
) -> None:
    url = postgres_server.fresh_database()
    first_settings = make_settings(tmp_path / "a", redis_url, database_url=url, replica_id="a")
    second_settings = make_settings(tmp_path / "b", redis_url, database_url=url, replica_id="b")
    with TestClient(create_app(first_settings)) as first, TestClient(create_app(second_settings)) as second:
        assert first.get("/readyz").json()["leader"] is True
        ready = second.get("/readyz")
        assert ready.status_code == 200 and ready.json()["leader"] is False  # ready all the same
        # Both serve the API from the one database.
        assert first.post("/api/v1/tenants", json={"name": "t", "classifiers": []}).status_code == 201
        assert second.get("/api/v1/tenants/t").status_code == 200
        assert second.get("/livez").status_code == 200
    # The first stopped cleanly: its lease went with it, so a new controller leads at once.
    with TestClient(create_app(second_settings)) as third:
        assert third.get("/readyz").json()["leader"] is True


class HangingLease(LocalLease):
    """Taken at once; then its check never answers (a database that went silent)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.abandoned = 0

    def holds(self) -> bool:
        self.gate.wait()
        return True

    def abandon(self) -> None:
        self.abandoned += 1


def test_a_leader_whose_check_gets_no_answer_stops_its_singletons() -> None:
    async def scenario() -> None:
        stop = asyncio.Event()
        started = Started()
        lease = HangingLease()
        leadership = Leadership(lease, started, stop, probe_timeout_s=0.2)
        await leadership.step()
        assert leadership.leading
        await leadership.step()  # the check hangs: not shown held, so not held
        assert not leadership.leading and started.runs[0].is_set() and lease.abandoned == 1
        lease.gate.set()

    asyncio.run(scenario())


@pytest.mark.parametrize(("name", "value"), [("LACHESIS_REPLICA_ID", "a b"), ("LACHESIS_LEASE_INTERVAL_S", "0")])
def test_bad_ha_settings_are_refused_by_name(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1", name: value})
    assert (
        Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1", "LACHESIS_REPLICA_ID": "pod-1.a_b"}).replica_id
        == "pod-1.a_b"
    )
