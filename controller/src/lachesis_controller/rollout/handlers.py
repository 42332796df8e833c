"""What the controller does with each agent's registrations and acks: enrol a new host
(and roll the current state out to it), record acks and publish what they set off. The
streams are read by `bus.consumer.StreamConsumer`.
"""

from __future__ import annotations

import asyncio
import logging

from opentelemetry import trace
from opentelemetry.context import Context
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.client import ACKS, REDIS_DOWN, REGISTRATIONS, Bus
from lachesis_controller.bus.consumer import StreamConsumer, reject
from lachesis_controller.bus.messages import Ack, Registration
from lachesis_controller.db import utcnow
from lachesis_controller.models import AgentCredential, Host
from lachesis_controller.observability import metrics
from lachesis_controller.observability.tracing import context_from_traceparent, current_traceparent, tracer
from lachesis_controller.rollout import acks as rollout_acks
from lachesis_controller.rollout import engine as rollouts

log = logging.getLogger(__name__)


class Handlers:
    """What the controller does with each kind of agent message."""

    def __init__(self, sessions: sessionmaker[Session], bus: Bus, rollout_timeout_s: float) -> None:
        self.sessions = sessions
        self.bus = bus
        self.rollout_timeout_s = rollout_timeout_s

    async def registration(self, reg: Registration) -> None:
        metrics.REGISTRATIONS_RECEIVED.inc()
        with tracer.start_as_current_span("agent registration", attributes={"lachesis.host_id": reg.host_id}):
            floor = await self._generation_floor(reg.host_id)
            now = utcnow()
            publications: list[rollouts.Publication] = []
            with self.sessions.begin() as session:
                if session.get(AgentCredential, reg.host_id) is None:
                    # Its streams are read only while it is enrolled; this one was deleted
                    # (DELETE /hosts) after its registration was read.
                    reject(REGISTRATIONS, reg.host_id, "not enrolled", "comes from a host that is not enrolled")
                    return
                host = session.get(Host, reg.host_id)
                capabilities = reg.capabilities.dump()
                if host is None:
                    host = Host(
                        id=reg.host_id,
                        agent_version=reg.agent_version,
                        capabilities=capabilities,
                        enrolled_at=now,
                        registered_at=now,
                        last_seen=now,
                        desired_generation=floor,
                        acked_generation=0,
                    )
                    session.add(host)
                    session.flush()
                    _, publications = rollouts.start_rollout(
                        session,
                        cause=f"host {reg.host_id} enrolled",
                        trigger="host",
                        host_ids=[reg.host_id],
                        now=now,
                        timeout_s=self.rollout_timeout_s,
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
        # The acks of one rollout carry the same traceparent: parsed once per batch, not
        # once per ack (1,000 parses were 1.6% of a 1,000-host rollout's controller CPU).
        contexts: dict[str | None, Context | None] = {}
        for ack in batch:
            metrics.ACKS_RECEIVED.labels(ack.status).inc()
            if ack.traceparent not in contexts:
                contexts[ack.traceparent] = context_from_traceparent(ack.traceparent)
            # A span per ack, in the trace of the REST call that caused its generation.
            tracer.start_span(
                "agent ack",
                context=contexts[ack.traceparent],
                kind=trace.SpanKind.CONSUMER,
                attributes={
                    "lachesis.host_id": ack.host_id,
                    "lachesis.generation": ack.generation,
                    "lachesis.ack.status": ack.status,
                    "lachesis.ack.phase": ack.phase or "install",
                },
            ).end()
            log.info(
                "ack from %s: generation %d %s%s%s",
                ack.host_id,
                ack.generation,
                f"{ack.phase} " if ack.phase else "",
                ack.status,
                f" ({ack.reason})" if ack.reason else "",
            )
        with self.sessions.begin() as session:
            publications = rollout_acks.record_acks(session, batch, utcnow())
        await self.bus.publish(publications, source="rollout")


def start(handlers: Handlers, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    consumers = [
        # Only the leader's shared group reads these, and agents append without a MAXLEN:
        # the consumer deletes what it handled (consumer.StreamTrim).
        StreamConsumer(handlers.bus, REGISTRATIONS, Registration, handlers.registration, stop, delete_handled=True),
        StreamConsumer(handlers.bus, ACKS, Ack, handlers.acks, stop, batch=True, delete_handled=True),
    ]
    return [asyncio.create_task(c.run(), name=f"consume {c.kind}") for c in consumers]
