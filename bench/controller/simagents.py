"""Simulated agents: asyncio tasks that speak the bus as the real agent does
(agents/agent/src/runner.rs, api-schemas/README.md), without a data path.

Each agent, as its own Redis user (the URL its enrolment returned), registers, notes where its
inbox ends, applies and acks the desired key, then follows the inbox with `XREAD BLOCK`: a
quiesce phase is acked with `phase: quiesce` and nothing drained, an install (or a one-phase
message) with `applied`, a generation older than the one held with `rejected`, as the agent
does. A second connection heartbeats every 5 s (TTL 15 s) and as soon as a generation is
applied, as the agent's heartbeat task does.

As a program it runs the agents given on stdin (a JSON list of [host_id, redis_url]), prints
`ready` on stdout once every one has registered and read its desired key, and runs until
killed, so a benchmark can spread a thousand agents over a few processes:

  .lachesis/venv/bin/python bench/controller/simagents.py < hosts.json
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import redis.asyncio as aredis

HEARTBEAT_S, HEARTBEAT_TTL_S, BLOCK_MS, STARTING = 5.0, 15, 2000, 32


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# Told (kind, message) of each message an agent appends to its streams: the controller
# deletes the registrations and acks it handled, so a test sees them here, not in Redis.
Recorder = Callable[[str, dict], None]


class SimAgent:
    def __init__(self, host_id: str, url: str, record: Recorder | None = None) -> None:
        self.host_id = host_id
        self.record = record
        self.url = url
        self.generation = 0
        self.started = time.monotonic()
        self.applied = asyncio.Event()

    def key(self, kind: str) -> str:
        return f"lachesis:agent:{self.host_id}:{kind}"

    async def send(self, ctl: aredis.Redis, kind: str, message: dict) -> None:
        if self.record is not None:
            self.record(kind, message)
        await ctl.xadd(self.key(kind), {"msg": json.dumps(message)})

    async def run(self, stop: asyncio.Event, starting: asyncio.Semaphore, ready: asyncio.Event | None = None) -> None:
        ctl = aredis.Redis.from_url(self.url, decode_responses=True, single_connection_client=True)
        beat = aredis.Redis.from_url(self.url, decode_responses=True, single_connection_client=True)
        heartbeats: asyncio.Task | None = None
        try:
            async with starting:
                await beat.ping()
                heartbeats = asyncio.create_task(self.heartbeat(beat, stop))
                await self.send(ctl, "registrations", self.registration())
                inbox = self.key("inbox")
                tail = await ctl.xrevrange(inbox, count=1)
                last = tail[0][0] if tail else "0-0"
                desired = await ctl.get(self.key("desired"))
                if desired is not None:
                    await self.handle(ctl, beat, json.loads(desired))
            if ready is not None:
                ready.set()
            while not stop.is_set():
                for _, messages in await ctl.xread({inbox: last}, count=64, block=BLOCK_MS) or []:
                    for entry_id, fields in messages:
                        last = entry_id
                        await self.handle(ctl, beat, json.loads(fields["msg"]))
        finally:
            if heartbeats is not None:
                heartbeats.cancel()
                await asyncio.gather(heartbeats, return_exceptions=True)
            await ctl.aclose()
            await beat.aclose()

    def registration(self) -> dict:
        return {
            "schema": "lachesis.registration/v1",
            "host_id": self.host_id,
            "agent_version": "sim",
            "started_at": now(),
            "capabilities": {
                "cpus": 1,
                "devices": [],
                "kernel": {"release": "6.1", "btf": True, "io_uring": True, "fuse": True},
            },
        }

    async def handle(self, ctl: aredis.Redis, beat: aredis.Redis, state: dict) -> None:
        generation, phase = state["generation"], state.get("phase")
        ack = {
            "schema": "lachesis.ack/v1",
            "host_id": self.host_id,
            "generation": generation,
            "rollout_id": state["rollout_id"],
            "status": "applied",
            "reason": None,
            "rules_installed": len(state["rules"]),
            "acked_at": now(),
            "traceparent": state["traceparent"],
        }
        if phase is not None:
            ack["phase"] = phase
        applied = False
        if generation < self.generation:
            ack.update(
                status="rejected", reason=f"generation {generation} is older than {self.generation}", rules_installed=0
            )
        elif phase == "quiesce":
            ack["drained"] = 0  # no data path: nothing in flight
        else:
            applied, self.generation = generation > self.generation, generation
        await self.send(ctl, "acks", ack)
        if applied:
            await self.beat(beat)

    async def beat(self, beat: aredis.Redis) -> None:
        await beat.set(
            self.key("heartbeat"),
            json.dumps(
                {
                    "schema": "lachesis.heartbeat/v1",
                    "host_id": self.host_id,
                    "sent_at": now(),
                    "generation": self.generation,
                    "uptime_s": round(time.monotonic() - self.started, 3),
                }
            ),
            ex=HEARTBEAT_TTL_S,
        )

    async def heartbeat(self, beat: aredis.Redis, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.beat(beat)
            await asyncio.sleep(HEARTBEAT_S)


async def run_agents(  # type: ignore[no-untyped-def]
    hosts: list[tuple[str, str]], stop: asyncio.Event, on_ready=None, record: Recorder | None = None
) -> None:
    """Run an agent per (host_id, url) until `stop`; `on_ready()` once all have resynced.
    Agents start STARTING at a time rather than all in the same instant: in a run of 1,000
    without that limit, 439 of one process's 500 agents had not registered minutes later
    (cause not found; the listen queue did not overflow)."""
    agents = [SimAgent(h, u, record) for h, u in hosts]
    readies = [asyncio.Event() for _ in agents]
    starting = asyncio.Semaphore(STARTING)
    tasks = [asyncio.create_task(a.run(stop, starting, r)) for a, r in zip(agents, readies, strict=True)]
    waiting = asyncio.gather(*(r.wait() for r in readies))
    done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
    if waiting not in done:  # an agent ended before all were ready: its error is the answer
        waiting.cancel()
        for task in done:
            task.result()
    if on_ready is not None:
        on_ready()
    await asyncio.gather(*tasks)


def main() -> None:
    hosts = [(h, u) for h, u in json.load(sys.stdin)]
    asyncio.run(run_agents(hosts, asyncio.Event(), lambda: print("ready", flush=True)))


if __name__ == "__main__":
    main()
