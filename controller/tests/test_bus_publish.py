"""Bus.publish: calls that wait for the lock go out together, in the order they were made."""

from __future__ import annotations

import asyncio

import redis

from lachesis_controller.bus.client import Bus, Publication, desired_key, inbox_key, make_redis


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
