"""What the controller does with each agent's registrations and acks: enrol a new host
(and roll the current state out to it), record acks and publish what they set off. The
streams are read by `bus.consumer.StreamConsumer`.
"""

from __future__ import annotations

import asyncio
import logging

from opentelemetry import trace
from opentelemetry.context import Context
from sqlalchemy import select
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

# How long after a read of acks that found some the next one waits (bus.consumer): a
# 1,000-host rollout's acks then come in about 20 batches per phase instead of one read per
# few acks. At most this much is added to a phase.
ACK_COALESCE_S = 0.02


class Handlers:
    """What the controller does with each kind of agent message."""

    def __init__(
        self, sessions: sessionmaker[Session], bus: Bus, rollout_timeout_s: float, *, span_acks: bool = True
    ) -> None:
        """`span_acks`: a span per ack. Without an exporter such a span goes nowhere (no
        other span or message takes its id), and 1,000 of them were 3.7% of a 1,000-host
        rollout's controller CPU (docs/benchmarks/controller.md, eleventh round)."""
        self.sessions = sessions
        self.bus = bus
        self.rollout_timeout_s = rollout_timeout_s
        self.span_acks = span_acks

    async def registrations(self, batch: list[Registration]) -> None:
        """Enrol the new hosts of a batch and record the others' registrations in one
        transaction; the new hosts' state goes out as one rollout. A rollout (and a
        transaction) per host made 5,000 agents take over ten minutes to enrol: each one's
        fixed work (the intent snapshot, pruning stored states) grows with the hosts
        (docs/benchmarks/controller.md)."""
        metrics.REGISTRATIONS_RECEIVED.inc(len(batch))
        latest = {reg.host_id: reg for reg in batch}  # a host that registered twice: its last
        span_attributes = {"lachesis.host_id": batch[0].host_id} if len(latest) == 1 else {}
        with tracer.start_as_current_span(
            "agent registration", attributes={**span_attributes, "lachesis.hosts": len(latest)}
        ):
            floors = await self._generation_floors(list(latest))
            now = utcnow()
            publications: list[rollouts.Publication] = []
            with self.sessions.begin() as session:
                enrolled = set(
                    session.scalars(select(AgentCredential.host_id).where(AgentCredential.host_id.in_(latest)))
                )
                known = {host.id: host for host in session.scalars(select(Host).where(Host.id.in_(latest)))}
                new: list[str] = []
                for host_id, reg in latest.items():
                    if host_id not in enrolled:
                        # Its streams are read only while it is enrolled; this one was deleted
                        # (DELETE /hosts) after its registration was read.
                        reject(REGISTRATIONS, host_id, "not enrolled", "comes from a host that is not enrolled")
                        continue
                    capabilities = reg.capabilities.dump()
                    host = known.get(host_id)
                    if host is None:
                        session.add(
                            Host(
                                id=host_id,
                                agent_version=reg.agent_version,
                                capabilities=capabilities,
                                enrolled_at=now,
                                registered_at=now,
                                last_seen=now,
                                desired_generation=floors[host_id],
                                acked_generation=0,
                            )
                        )
                        new.append(host_id)
                        log.info("host %s enrolled (agent %s)", host_id, reg.agent_version)
                    else:
                        host.agent_version = reg.agent_version
                        host.capabilities = capabilities
                        host.registered_at = now
                        host.last_seen = max(host.last_seen, now)
                        log.info("host %s registered again (agent %s)", host_id, reg.agent_version)
                if new:
                    session.flush()
                    _, publications = rollouts.start_rollout(
                        session,
                        cause=enrolment_cause(new),
                        trigger="host",
                        host_ids=new,
                        now=now,
                        timeout_s=self.rollout_timeout_s,
                        traceparent=current_traceparent(),
                    )
            await self.bus.publish(publications, source="enrollment")

    async def _generation_floors(self, host_ids: list[str]) -> dict[str, int]:
        """Generation each newly enrolled host's numbering continues from.

        Normally 0. But an agent that outlived the controller's database (wiped or moved)
        still holds its old generation and refuses anything older, so continue above it.
        """
        try:
            held = await self.bus.desired_generations(host_ids)
        except REDIS_DOWN:
            return dict.fromkeys(host_ids, 0)
        beats = await self.bus.heartbeats(host_ids) or {}
        floors = {}
        for host_id, generation in zip(host_ids, held, strict=True):
            beat = beats.get(host_id)
            floors[host_id] = max(generation or 0, beat.generation if beat is not None else 0)
        return floors

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
            if self.span_acks:
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


def enrolment_cause(hosts: list[str]) -> str:
    if len(hosts) == 1:
        return f"host {hosts[0]} enrolled"
    named = ", ".join(hosts[:5]) + (", ..." if len(hosts) > 5 else "")
    return f"{len(hosts)} hosts enrolled: {named}"


def start(handlers: Handlers, stop: asyncio.Event) -> list[asyncio.Task[None]]:
    consumers = [
        # Only the leader's shared group reads these, and agents append without a MAXLEN:
        # the consumer deletes what it handled (consumer.StreamTrim).
        StreamConsumer(
            handlers.bus, REGISTRATIONS, Registration, handlers.registrations, stop, batch=True, delete_handled=True
        ),
        StreamConsumer(
            handlers.bus, ACKS, Ack, handlers.acks, stop, batch=True, delete_handled=True, coalesce_s=ACK_COALESCE_S
        ),
    ]
    return [asyncio.create_task(c.run(), name=f"consume {c.kind}") for c in consumers]
