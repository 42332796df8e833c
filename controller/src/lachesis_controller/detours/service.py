"""The consumer of the agents' detour streams (`lachesis:agent:{host}:detours`, each
appended to by its host only): each held IO header goes to the application its
detour names; its decision goes back on `lachesis:detour-verdicts:{host_id}`. Copies
(`hold: false`) are recorded only. Every header with its verdict and latency is kept in a
bounded in-memory log (soft state) for `GET /api/v1/detours`.

Requests are decided concurrently (a `readset` switch waits for a rollout; an `approve`
must not wait behind it), each under a span in the trace the agent started.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from opentelemetry import trace
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.client import DETOURS, REDIS_DOWN, Bus
from lachesis_controller.bus.client import detour_verdicts_key as verdicts_key
from lachesis_controller.bus.consumer import StreamConsumer
from lachesis_controller.bus.messages import parse_timestamp
from lachesis_controller.detours.apps import EIO, Application, Approve, Decision, ReadSet
from lachesis_controller.detours.messages import DetourRequest, DetourVerdict
from lachesis_controller.observability.tracing import context_from_traceparent, tracer
from lachesis_controller.policy.verify import CONTROLLER_APPS
from lachesis_controller.rollout.engine import rfc3339

log = logging.getLogger(__name__)

REQUESTS = DETOURS
VERDICTS_MAXLEN = 1000
# A held request older than this is not decided: its IO failed at the agent's deadline long
# ago, and acting on it (e.g. switching a read set for a write that never happened) would be
# wrong. Happens when a new consumer group reads the stream from its start.
STALE_AFTER_S = 120.0
LOG_SIZE = 1000


class DetourLog:
    """The most recent headers, newest last."""

    def __init__(self, size: int = LOG_SIZE) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)

    def add(self, request: DetourRequest, decision: Decision | None, latency_ms: float) -> None:
        self.entries.append(
            {
                "id": request.id,
                "host_id": request.host_id,
                "rule": request.rule,
                "target": request.target,
                "hold": request.hold,
                "tenant": request.header.tenant,
                "op": request.header.op,
                "path": request.header.path,
                "offset": request.header.offset,
                "length": request.header.length,
                "sent_at": request.sent_at,
                "verdict": decision.verdict if decision else None,
                "errno": decision.errno if decision else None,
                "ttl_ms": decision.ttl_ms if decision else None,
                "reason": decision.reason if decision else None,
                "latency_ms": round(latency_ms, 3),
                "traceparent": request.traceparent,
            }
        )

    def recent(self, *, tenant: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        rows = [e for e in reversed(self.entries) if tenant is None or e["tenant"] == tenant]
        return rows[:limit]


def verdict_message(request: DetourRequest, decision: Decision) -> str:
    now = datetime.now(timezone.utc)
    verdict = DetourVerdict.model_validate(
        {
            "schema": "lachesis.detour-verdict/v1",
            "id": request.id,
            "host_id": request.host_id,
            "verdict": decision.verdict,
            "errno": decision.errno,
            "ttl_ms": decision.ttl_ms,
            "reason": (decision.reason or "")[:1024] or None,
            "decided_at": rfc3339(now),
            "traceparent": request.traceparent,
        }
    )
    return json.dumps(verdict.dump(), separators=(",", ":"))


class DetourService:
    def __init__(self, bus: Bus, apps: Mapping[str, Application], log_: DetourLog) -> None:
        assert set(apps) <= set(CONTROLLER_APPS), "register the application's name in policy.verify.CONTROLLER_APPS"
        self.bus = bus
        self.apps = apps
        self.log = log_
        self.tasks: set[asyncio.Task[None]] = set()

    async def handle(self, request: DetourRequest) -> None:
        if not request.hold:
            self.log.add(request, None, 0.0)
            return
        age = (datetime.now(timezone.utc) - parse_timestamp(request.sent_at)).total_seconds()
        if age > STALE_AFTER_S:
            log.warning("detour %s from %s is %.0f s old; not decided", request.id, request.host_id, age)
            return
        task = asyncio.create_task(self.answer(request), name=f"detour {request.id}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def answer(self, request: DetourRequest) -> None:
        started = time.monotonic()
        with tracer.start_as_current_span(
            "detour verdict",
            context=context_from_traceparent(request.traceparent),
            kind=trace.SpanKind.CONSUMER,
            attributes={
                "lachesis.host_id": request.host_id,
                "lachesis.rule": request.rule,
                "lachesis.detour.target": request.target,
                "lachesis.io.op": request.header.op,
            },
        ):
            app = self.apps.get(request.target)
            try:
                if app is None:
                    decision = Decision("deny", errno=EIO, reason=f"no controller application {request.target!r}")
                else:
                    decision = await app.decide(request)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an application bug must not leave the IO hanging
                log.exception("detour application %s failed on %s", request.target, request.id)
                decision = Decision("deny", errno=EIO, reason=f"application {request.target} failed: {exc}")
            try:
                await self.bus.redis.xadd(
                    verdicts_key(request.host_id),
                    {"msg": verdict_message(request, decision)},
                    maxlen=VERDICTS_MAXLEN,
                    approximate=True,
                )
            except REDIS_DOWN as exc:
                # The agent's IO fails at its deadline; nothing else to do without Redis.
                log.warning("cannot send the verdict for %s to %s: %s", request.id, request.host_id, exc)
        latency_ms = (time.monotonic() - started) * 1000
        self.log.add(request, decision, latency_ms)
        log.info(
            "detour %s from %s (rule %s, %s %s) -> %s in %.1f ms%s",
            request.id,
            request.host_id,
            request.rule,
            request.header.op,
            request.header.path,
            decision.verdict,
            latency_ms,
            f" ({decision.reason})" if decision.reason else "",
        )


def start(
    sessions: sessionmaker[Session],
    bus: Bus,
    stop: asyncio.Event,
    log_: DetourLog,
    *,
    rollout_timeout_s: float,
    quiet_s: float = 30.0,
) -> asyncio.Task[None]:
    async def publish(publications: Any) -> object:
        return await bus.publish(publications, source="detour")

    apps: dict[str, Application] = {
        "approve": Approve(),
        "readset": ReadSet(sessions, publish, rollout_timeout_s=rollout_timeout_s, quiet_s=quiet_s, stop=stop),
    }
    service = DetourService(bus, apps, log_)
    consumer = StreamConsumer(bus, REQUESTS, DetourRequest, service.handle, stop)
    return asyncio.create_task(consumer.run(), name=f"consume {REQUESTS} streams")
