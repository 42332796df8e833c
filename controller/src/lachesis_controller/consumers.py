"""Background readers of the agent→controller streams (registrations, acks).

Each runs as an asyncio task for the life of the app. They survive anything Redis does:
connection loss (back off and retry), a Redis that lost its data (NOGROUP: recreate the
consumer group), and malformed messages (logged and dropped).

Entries are handled a batch (one XREADGROUP) at a time: all acks of a batch go through
one database transaction and one XACK, which is what lets a rollout to 100 hosts finish
in a few transactions rather than 100 (docs/benchmarks/controller.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import trace
from pydantic import BaseModel, ValidationError
from redis.exceptions import ResponseError
from sqlalchemy.orm import Session, sessionmaker

from . import metrics, rollouts
from .bus import ACKS, CONSUMER, GROUP, REDIS_DOWN, REGISTRATIONS, Bus
from .db import utcnow
from .messages import Ack, Registration
from .models import Host
from .telemetry import context_from_traceparent, current_traceparent, tracer

log = logging.getLogger(__name__)

BLOCK_MS = 1000
BATCH = 100
BACKOFF_MIN_S = 0.2
BACKOFF_MAX_S = 5.0


class StreamConsumer:
    def __init__(
        self,
        bus: Bus,
        stream: str,
        model: type[BaseModel],
        handle: Callable[[Any], Awaitable[None]],
        stop: asyncio.Event,
        *,
        batch: bool = False,
    ) -> None:
        """`handle` takes one message, or with `batch` the list of messages of one read."""
        self.bus = bus
        self.stop = stop
        self.stream = stream
        self.model = model
        self.handle = handle
        self.batch = batch

    async def run(self) -> None:
        redis = self.bus.redis
        backoff = BACKOFF_MIN_S
        group_ready = False
        down_since_logged = False
        # "0" first re-reads entries delivered to this consumer but never acked (a previous
        # controller died mid-way), then ">" takes new ones.
        next_id = "0"
        # The flag, not only cancellation, ends the loop: on Python 3.11 a cancel that lands
        # while redis-py's own read timeout fires can come out as TimeoutError, which the
        # loop would otherwise treat as "Redis down, retry" forever.
        while not self.stop.is_set():
            try:
                if not group_ready:
                    await self._ensure_group()
                    group_ready = True
                    next_id = "0"
                reply = await redis.xreadgroup(
                    GROUP, CONSUMER, {self.stream: next_id}, count=BATCH, block=BLOCK_MS
                )
                entries = reply[0][1] if reply else []
                if next_id == "0" and not entries:
                    next_id = ">"
                if entries:
                    await self._process(entries)
                    await redis.xack(self.stream, GROUP, *[entry_id for entry_id, _ in entries])
                if down_since_logged:
                    log.info("%s: Redis is back", self.stream)
                    down_since_logged = False
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    # Redis restarted empty or the stream was deleted: start over.
                    log.warning("%s: consumer group missing, recreating it", self.stream)
                    group_ready = False
                    continue
                log.error("%s: Redis refused a command: %s", self.stream, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            except REDIS_DOWN as exc:
                if not down_since_logged:
                    log.warning("%s: Redis unavailable (%s: %s); retrying", self.stream, type(exc).__name__, exc)
                    down_since_logged = True
                group_ready = False
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _ensure_group(self) -> None:
        try:
            # From id 0: registrations written before the controller first started count too.
            await self.bus.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
            log.info("%s: created consumer group %s", self.stream, GROUP)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _process(self, entries: list[tuple[str, dict[str, str] | None]]) -> None:
        messages = []
        for entry_id, fields in entries:
            raw = (fields or {}).get("msg")
            try:
                if raw is None:
                    raise ValueError("entry has no msg field")
                messages.append((entry_id, self.model.model_validate_json(raw)))
            except (ValidationError, ValueError) as exc:
                metrics.BUS_MESSAGES_DROPPED.labels(self.stream).inc()
                log.warning("%s %s: dropped invalid message: %s", self.stream, entry_id, _brief(exc))
        if not messages:
            return
        try:
            if self.batch:
                await self.handle([m for _, m in messages])
                return
        except asyncio.CancelledError:
            raise
        except REDIS_DOWN:
            raise
        except Exception:
            log.exception("%s: failed to handle a batch of %d; one by one now", self.stream, len(messages))
        for entry_id, message in messages:
            try:
                await self.handle([message] if self.batch else message)
            except asyncio.CancelledError:
                raise
            except REDIS_DOWN:
                # Leave the entries pending: they are read again (id "0") once Redis is back.
                raise
            except Exception:
                # A message that breaks the handler would break it again: drop it, keep going.
                log.exception("%s %s: failed to handle message; dropped", self.stream, entry_id)


def _brief(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'message'}: {e['msg']}" for e in exc.errors()[:3]
        )
    return str(exc)


class Handlers:
    """What the controller does with each kind of agent message."""

    def __init__(self, sessions: sessionmaker[Session], bus: Bus, rollout_timeout_s: float) -> None:
        self.sessions = sessions
        self.bus = bus
        self.rollout_timeout_s = rollout_timeout_s

    async def registration(self, reg: Registration) -> None:
        metrics.REGISTRATIONS_RECEIVED.inc()
        with tracer.start_as_current_span(
            "agent registration", attributes={"lachesis.host_id": reg.host_id}
        ):
            floor = await self._generation_floor(reg.host_id)
            now = utcnow()
            publications: list[rollouts.Publication] = []
            with self.sessions.begin() as session:
                host = session.get(Host, reg.host_id)
                capabilities = reg.capabilities.dump()
                if host is None:
                    host = Host(
                        id=reg.host_id, agent_version=reg.agent_version, capabilities=capabilities,
                        enrolled_at=now, registered_at=now, last_seen=now,
                        desired_generation=floor, acked_generation=0,
                    )
                    session.add(host)
                    session.flush()
                    _, publications = rollouts.start_rollout(
                        session, cause=f"host {reg.host_id} enrolled", trigger="host",
                        host_ids=[reg.host_id], now=now, timeout_s=self.rollout_timeout_s,
                        traceparent=current_traceparent(),
                    )
                    log.info("host %s enrolled (agent %s)", reg.host_id, reg.agent_version)
                else:
                    host.agent_version = reg.agent_version
                    host.capabilities = capabilities
                    host.registered_at = now
                    host.last_seen = max(host.last_seen, now)
                    log.info("host %s registered again (agent %s)", reg.host_id, reg.agent_version)
            await self.bus.publish(publications, source="enrollment")

    async def _generation_floor(self, host_id: str) -> int:
        """Generation a newly enrolled host's numbering continues from.

        Normally 0. But an agent that outlived the controller's database (wiped or moved)
        still holds its old generation and refuses anything older, so continue above it.
        """
        try:
            held = await self.bus.desired_generations([host_id])
        except REDIS_DOWN:
            return 0
        beats = await self.bus.heartbeats([host_id]) or {}
        beat = beats.get(host_id)
        return max(held[0] or 0, beat.generation if beat is not None else 0)

    async def ack(self, ack: Ack) -> None:
        await self.acks([ack])

    async def acks(self, batch: list[Ack]) -> None:
        """Record a batch of acks in one transaction, then publish what they set off
        (phase 2 of two-phase rollouts, rollbacks)."""
        for ack in batch:
            metrics.ACKS_RECEIVED.labels(ack.status).inc()
            # A span per ack, in the trace of the REST call that caused its generation.
            tracer.start_span(
                "agent ack",
                context=context_from_traceparent(ack.traceparent),
                kind=trace.SpanKind.CONSUMER,
                attributes={
                    "lachesis.host_id": ack.host_id,
                    "lachesis.generation": ack.generation,
                    "lachesis.ack.status": ack.status,
                    "lachesis.ack.phase": ack.phase or "install",
                },
            ).end()
            log.info(
                "ack from %s: generation %d %s%s%s", ack.host_id, ack.generation,
                f"{ack.phase} " if ack.phase else "", ack.status,
                f" ({ack.reason})" if ack.reason else "",
            )
        with self.sessions.begin() as session:
            publications = rollouts.record_acks(session, batch, utcnow())
        await self.bus.publish(publications, source="rollout")


def start(handlers: Handlers, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    consumers = [
        StreamConsumer(handlers.bus, REGISTRATIONS, Registration, handlers.registration, stop),
        StreamConsumer(handlers.bus, ACKS, Ack, handlers.acks, stop, batch=True),
    ]
    return [asyncio.create_task(c.run(), name=f"consume {c.stream}") for c in consumers]

