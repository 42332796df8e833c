"""Background loop that makes Redis match the database again after Redis missed a write
(it was down during a change, or restarted empty), times out overdue rollouts, and fails
the two-phase rollouts waiting on an agent that died (its heartbeat key expired).

It republishes the message recorded for the host's current generation, byte for byte:
no new generation, same rollout_id and traceparent, so the eventual ack still lands on
the rollout that caused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.client import REDIS_DOWN, Bus
from lachesis_controller.bus.presence import heartbeat_times, record_seen
from lachesis_controller.db import utcnow
from lachesis_controller.models import AgentCredential, Host, RolloutTarget
from lachesis_controller.rollout import engine as rollouts

log = logging.getLogger(__name__)


class Reconciler:
    def __init__(self, sessions: sessionmaker[Session], bus: Bus, interval_s: float, stop: asyncio.Event) -> None:
        self.sessions = sessions
        self.stop = stop
        self.bus = bus
        self.interval_s = interval_s
        self._redis_down = False
        # Hosts whose heartbeat this process has seen: one of them without a heartbeat key
        # has died. Kept in memory: after a restart a dead host is caught by the deadline.
        self._seen_alive: set[str] = set()
        # Host -> the heartbeat time this process last wrote as its last_seen: a heartbeat
        # read again unchanged (an agent beats every few seconds, the pass runs every second)
        # is not written again. last_seen never goes back, so the row still holds at least it.
        self._recorded_seen: dict[str, datetime] = {}

    async def run(self) -> None:
        # See bus.consumer.StreamConsumer.run for why a flag ends the loop.
        while not self.stop.is_set():
            try:
                await self.once()
                if self._redis_down:
                    log.info("reconciler: Redis is back")
                    self._redis_down = False
            except asyncio.CancelledError:
                raise
            except REDIS_DOWN as exc:
                if not self._redis_down:
                    log.warning("reconciler: Redis unavailable (%s: %s)", type(exc).__name__, exc)
                    self._redis_down = True
            except Exception:
                log.exception("reconciler pass failed")
            await asyncio.sleep(self.interval_s)

    async def once(self) -> int:
        """One pass; returns how many hosts it republished to."""
        with self.sessions() as session:
            credentials = session.execute(select(AgentCredential.host_id, AgentCredential.secret_sha256)).all()
        await self.bus.restore_agent_users([(h, digest) for h, digest in credentials])
        with self.sessions.begin() as session:
            rollbacks = rollouts.expire(session, utcnow())
        await self.bus.publish(rollbacks, source="rollback")
        async with self.bus.lock:
            with self.sessions() as session:
                wanted = session.execute(
                    select(Host.id, Host.desired_generation, RolloutTarget.phase)
                    .outerjoin(
                        RolloutTarget,
                        (RolloutTarget.host_id == Host.id) & (RolloutTarget.generation == Host.desired_generation),
                    )
                    .where(Host.desired_generation > 0)
                    .order_by(Host.id)
                ).all()
            if not wanted:
                return 0
            ids = [host_id for host_id, _, _ in wanted]
            held = await self.bus.desired_versions(ids)
            stale = [
                (host_id, generation)
                for (host_id, generation, phase), have in zip(wanted, held, strict=True)
                if have != (generation, rollouts.INSTALL if phase in (None, rollouts.INSTALL) else rollouts.QUIESCE)
            ]
            publications = self._recorded(stale) if stale else []
            if publications:
                log.info(
                    "reconciler: republishing %s",
                    ", ".join(f"{p.host_id}@{p.generation}" for p in publications),
                )
                await self.bus.publish_locked(publications, source="reconciler")
        beats = await self.bus.heartbeats(ids)
        if beats:
            alive = {h for h, beat in beats.items() if beat is not None}
            self._seen_alive = (self._seen_alive | alive) & set(beats)
            dead = self._seen_alive - alive
            seen = heartbeat_times(beats, utcnow())
            moved = {h: at for h, at in seen.items() if self._recorded_seen.get(h) != at}
            with self.sessions.begin() as session:
                record_seen(session, moved)
                rollbacks = rollouts.fail_dead(session, dead, utcnow())
            # Once committed; hosts without a heartbeat now are forgotten (a host deleted and
            # enrolled again starts with a row of its own).
            self._recorded_seen = {h: at for h, at in {**self._recorded_seen, **moved}.items() if h in seen}
            await self.bus.publish(rollbacks, source="rollback")
        return len(publications)

    def _recorded(self, stale: list[tuple[str, int]]) -> list[rollouts.Publication]:
        publications = []
        with self.sessions() as session:
            for host_id, generation in stale:
                target = session.scalars(
                    select(RolloutTarget).where(
                        RolloutTarget.host_id == host_id, RolloutTarget.generation == generation
                    )
                ).one_or_none()
                message = None if target is None else rollouts.current_message(target)
                if message is None:
                    # Every generation is created with a rollout target, so this means the
                    # rollout history was pruned: rebuild the state as it is now.
                    message = rollouts.build_desired_state(
                        session,
                        host_id,
                        generation,
                        rollout_id=None,
                        traceparent=None,
                        issued_at=utcnow(),
                    )
                publications.append(rollouts.Publication(host_id, generation, message))
        return publications


async def track_enrolment(sessions: sessionmaker[Session], bus: Bus, interval_s: float, stop: asyncio.Event) -> None:
    """Keep `bus.enrolled` (whose streams the consumers read) in step with the database on
    every replica: the leader's reconciler does it too, but a follower reads the telemetry
    of hosts another replica enrolled."""
    while not stop.is_set():
        try:
            with sessions() as session:
                bus.set_enrolled(session.scalars(select(AgentCredential.host_id)).all())
        except Exception as exc:  # the database is down: keep the hosts known so far
            log.warning("cannot read the enrolled hosts (%s: %s)", type(exc).__name__, exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
