"""Stream notifications (bus/stream_events.py) on a real redis-server: with them a consumer
reads only the streams that were appended to; what they miss (notifications turned off
behind the controller's back, a dropped subscription) is still read; a Redis that refuses
them leaves the consumers reading every stream. Driven by counts of streams named in reads
(the lachesis_bus_streams_read_total metric) and handled entries, not by the clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
from pydantic import BaseModel

from lachesis_controller.bus.client import AGENT_STREAM_KINDS, Bus, agent_stream, make_redis
from lachesis_controller.bus.consumer import StreamConsumer
from lachesis_controller.bus.stream_events import StreamEvents, needed_flags, parse_channel
from lachesis_controller.observability import metrics

KIND = "detours"
HOSTS = [f"ev-{i:02d}" for i in range(20)]
NEVER = 10**9  # a count of reads no test reaches: no periodic full read, no pending re-read


class Note(BaseModel):
    host_id: str
    n: int


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client of the test's Redis; notifications are left off again afterwards."""
    plain = redis.Redis.from_url(redis_url, decode_responses=True)
    yield plain
    plain.config_set("notify-keyspace-events", "")
    plain.close()


def streams_read() -> float:
    return metrics.BUS_STREAMS_READ.labels(KIND)._value.get()


def test_flags_are_added_to_what_is_set() -> None:
    assert needed_flags("") == "Kt"
    assert needed_flags("Ex") == "ExKt"
    assert needed_flags("Kx") == "Kxt"
    assert needed_flags("KA") is None
    assert needed_flags("Kt") is None
    assert needed_flags("AK") is None


def test_channels_name_a_host_and_a_kind() -> None:
    prefix = "__keyspace@0__:lachesis:agent:"
    assert parse_channel(prefix + "h1:acks", prefix, AGENT_STREAM_KINDS) == ("h1", "acks")
    assert parse_channel(prefix + "rack:3:h1:telemetry", prefix, AGENT_STREAM_KINDS) == ("rack:3:h1", "telemetry")
    assert parse_channel(prefix + "h1:inbox", prefix, AGENT_STREAM_KINDS) is None
    assert parse_channel(prefix + ":acks", prefix, AGENT_STREAM_KINDS) is None
    assert parse_channel("__keyspace@0__:lachesis:inbox:h1", prefix, AGENT_STREAM_KINDS) is None


class Harness:
    """A Bus with StreamEvents and one consumer of KIND over HOSTS, in one event loop."""

    def __init__(self, url: str, *, full_read_every: int = NEVER, events_url: str | None = None) -> None:
        self.bus = Bus(make_redis(url))
        self.bus.set_enrolled(HOSTS)
        self.events_redis = make_redis(events_url) if events_url else self.bus.redis
        self.bus.events = StreamEvents(self.events_redis, AGENT_STREAM_KINDS)
        self.stop = asyncio.Event()
        self.seen: list[tuple[str, int]] = []
        self.handled = asyncio.Event()

        async def handle(note: Any) -> None:
            self.seen.append((note.host_id, note.n))
            self.handled.set()

        self.consumer = StreamConsumer(
            self.bus, KIND, Note, handle, self.stop, recheck_every=NEVER, full_read_every=full_read_every
        )

    async def run(self, body: Callable[[Harness], Awaitable[None]]) -> None:
        assert self.bus.events is not None
        tasks = [asyncio.create_task(self.bus.events.run(self.stop)), asyncio.create_task(self.consumer.run())]
        try:
            await asyncio.wait_for(body(self), 60)
        finally:
            self.stop.set()
            await asyncio.wait(tasks, timeout=10)
            for task in tasks:
                task.cancel()
            if self.events_redis is not self.bus.redis:
                await self.events_redis.aclose()
            await self.bus.redis.aclose()

    async def until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await asyncio.sleep(0.01)

    async def append(self, host: str, n: int) -> None:
        await self.bus.redis.xadd(agent_stream(host, KIND), {"msg": Note(host_id=host, n=n).model_dump_json()})

    async def live(self) -> StreamEvents:
        """Until the notifications are on; the process' StreamEvents."""
        events = self.bus.events
        assert events is not None
        await self.until(lambda: events.live)
        return events

    async def settled(self) -> None:
        """Until the consumer read every stream since the notifications went live, and handled
        an entry after that: from then on it reads what is announced."""
        events = self.bus.events
        assert events is not None
        await self.until(lambda: events.live and self.consumer._events_generation == events.generation)
        await self.append("ev-00", 0)
        await self.handled_n(0)

    async def handled_n(self, n: int) -> None:
        await self.until(lambda: any(seen == n for _, seen in self.seen))


def test_a_read_names_only_the_streams_that_were_appended_to(redis_url: str) -> None:
    async def body(h: Harness) -> None:
        await h.settled()
        named = streams_read()
        await h.append("ev-07", 1)
        await h.handled_n(1)
        assert h.seen[1:] == [("ev-07", 1)]
        # ev-07, and at most the settling entry's stream once more (its notification may
        # come after the read that took it).
        assert 1 <= streams_read() - named <= 2
        await h.append("ev-03", 2)
        await h.append("ev-11", 3)
        await h.handled_n(3)
        assert sorted(h.seen[1:]) == [("ev-03", 2), ("ev-07", 1), ("ev-11", 3)]
        assert streams_read() - named <= 2 + 3

    asyncio.run(Harness(redis_url).run(body))


def test_an_append_no_notification_announced_is_read_by_a_periodic_full_read(
    redis_url: str, admin: redis.Redis
) -> None:
    plain = admin

    async def body(h: Harness) -> None:
        await h.live()
        # Turned off behind the controller's back: the subscription stays, nothing arrives.
        await asyncio.to_thread(plain.config_set, "notify-keyspace-events", "")
        await h.append("ev-05", 1)
        await h.handled_n(1)
        assert h.seen == [("ev-05", 1)]

    asyncio.run(Harness(redis_url, full_read_every=3).run(body))


def test_a_dropped_subscription_is_made_again_and_everything_is_read_once(redis_url: str, admin: redis.Redis) -> None:
    plain = admin

    async def body(h: Harness) -> None:
        events = await h.live()
        first = events.generation
        # An append no notification announces (they are off), then the subscription drops:
        # the listener turns them on again, subscribes anew, and the consumer reads every
        # stream once.
        await asyncio.to_thread(plain.config_set, "notify-keyspace-events", "")
        await h.append("ev-09", 1)
        killed = await asyncio.to_thread(plain.client_kill_filter, _type="pubsub")
        assert killed >= 1
        await h.until(lambda: events.generation > first and events.live)
        await h.handled_n(1)
        assert h.seen == [("ev-09", 1)]
        flags = await asyncio.to_thread(plain.config_get, "notify-keyspace-events")
        assert needed_flags(flags["notify-keyspace-events"]) is None

    asyncio.run(Harness(redis_url).run(body))


def test_a_redis_that_refuses_notifications_leaves_every_read_naming_every_stream(redis_url: str) -> None:
    plain = redis.Redis.from_url(redis_url, decode_responses=True)
    plain.execute_command("ACL", "SETUSER", "no-config", "on", ">pw", "~*", "&*", "+@all", "-config")
    limited = redis_url.replace("redis://", "redis://no-config:pw@")

    async def body(h: Harness) -> None:
        events = h.bus.events
        assert events is not None
        await h.append("ev-02", 1)
        await h.handled_n(1)
        named = streams_read()
        await h.append("ev-04", 2)
        await h.handled_n(2)
        assert not events.live
        # Blocking reads over every enrolled host's stream, as without notifications.
        assert (streams_read() - named) % len(HOSTS) == 0
        assert streams_read() > named

    try:
        asyncio.run(Harness(redis_url, events_url=limited).run(body))
    finally:
        plain.execute_command("ACL", "DELUSER", "no-config")
        plain.close()


def test_an_append_marks_its_own_kind_and_host_only(redis_url: str) -> None:
    async def body(h: Harness) -> None:
        events = await h.live()
        await h.bus.redis.xadd(agent_stream("ev-01", "acks"), {"msg": "{}"})
        await h.bus.redis.set("lachesis:desired:ev-01", "x")  # not a stream: no event
        await h.until(lambda: "ev-01" in events._dirty["acks"])
        assert events.take("acks") == {"ev-01"}
        assert events.take(KIND) == set()

    asyncio.run(Harness(redis_url).run(body))


def test_what_a_host_appended_before_it_was_enrolled_is_read(redis_url: str, admin: redis.Redis) -> None:
    plain = admin

    async def body(h: Harness) -> None:
        await h.settled()
        # Appended while no notification is sent (as one sent while nobody read the host's
        # streams, which is dropped): only reading a newly enrolled host's streams finds it.
        await asyncio.to_thread(plain.config_set, "notify-keyspace-events", "")
        await h.append("ev-late", 1)
        await asyncio.to_thread(plain.config_set, "notify-keyspace-events", "Kt")
        h.bus.add_enrolled("ev-late")
        await h.handled_n(1)
        assert h.seen[1:] == [("ev-late", 1)]

    asyncio.run(Harness(redis_url).run(body))
