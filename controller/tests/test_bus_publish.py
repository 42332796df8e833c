"""Bus.publish: calls that wait for the lock go out together, in the order they were made;
send_commands, which carries them, answers in order and raises an error reply once all are read."""

from __future__ import annotations

import asyncio

import pytest
import redis
from redis.exceptions import ResponseError

from lachesis_controller.bus.client import Bus, Publication, desired_key, inbox_key, make_redis, send_commands


def message(host_id: str, generation: int) -> str:
    return f'{{"host_id": "{host_id}", "generation": {generation}}}'


async def _publish_while_locked(url: str) -> list[bool]:
    client = make_redis(url, 8)
    bus = Bus(client)
    try:
        async with bus.lock:  # as the reconciler holds it during a pass
            waiting = [
                asyncio.create_task(bus.publish([Publication("host-a", g, message("host-a", g))], source="api"))
                for g in (2, 3, 4)
            ]
            cancelled = asyncio.create_task(bus.publish([Publication("host-b", 9, message("host-b", 9))], source="api"))
            for _ in range(3):  # every task runs up to its wait for the lock
                await asyncio.sleep(0)
            cancelled.cancel()
        return list(await asyncio.gather(*waiting))
    finally:
        await client.aclose()


def test_waiting_publishes_go_out_in_one_transaction_in_call_order(redis_url: str) -> None:
    sync = redis.Redis.from_url(redis_url, decode_responses=True)
    sync.config_resetstat()
    assert asyncio.run(_publish_while_locked(redis_url)) == [True, True, True]
    # One MULTI/EXEC for the three calls that waited, not one each.
    assert sync.info("commandstats")["cmdstat_exec"]["calls"] == 1
    assert sync.get(desired_key("host-a")) == message("host-a", 4)
    assert [fields["msg"] for _, fields in sync.xrange(inbox_key("host-a"))] == [
        message("host-a", g) for g in (2, 3, 4)
    ]
    # A call cancelled while it waited is published by nobody: a later batch must not write
    # its generation after a newer one.
    assert sync.get(desired_key("host-b")) is None
    assert sync.xlen(inbox_key("host-b")) == 0
    sync.close()


async def _send(url: str) -> None:
    client = make_redis(url, 1)  # one connection: the second call reuses the first's
    try:
        assert await send_commands(client, [("SET", "sc-a", "1"), ("INCR", "sc-a"), ("GET", "sc-a")]) == ["OK", 2, "2"]
        with pytest.raises(ResponseError):
            # The error reply in the middle is raised once every reply was read ...
            await send_commands(client, [("SET", "sc-b", "x"), ("INCR", "sc-b"), ("SET", "sc-c", "y")])
        # ... so the commands after it ran, and the connection is clean for the next call.
        assert await send_commands(client, [("MGET", "sc-b", "sc-c")]) == [["x", "y"]]
        # A transaction whose command fails when EXEC runs it raises too.
        with pytest.raises(ResponseError):
            await send_commands(client, [("MULTI",), ("INCR", "sc-b"), ("SET", "sc-d", "z"), ("EXEC",)])
        assert await send_commands(client, [("GET", "sc-d")]) == ["z"]
    finally:
        await client.aclose()


def test_send_commands_answers_in_order_and_raises_an_error_reply_after_reading_all(redis_url: str) -> None:
    asyncio.run(_send(redis_url))
