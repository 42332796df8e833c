"""The rollout engine: turning a change of intent into new per-host generations, and acks
back into rollout states.

Every function here runs inside the caller's transaction, so a change to a rule or tenant,
the generation bumps it causes and the rollout recording them commit together or not at
all. Publishing to Redis happens after the commit (bus.py), and the reconciler repeats it
if Redis missed it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from . import metrics
from .messages import Ack, DesiredState
from .models import Host, Rollout, RolloutTarget, Rule, Tenant

log = logging.getLogger(__name__)

PENDING, SUCCEEDED, FAILED, TIMED_OUT = "pending", "succeeded", "failed", "timed_out"
APPLIED, REJECTED = "applied", "rejected"


@dataclass(frozen=True)
class Publication:
    """One desired-state message to write to a host's desired key and inbox."""

    host_id: str
    generation: int
    message: str


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def build_desired_state(
    session: Session,
    host_id: str,
    generation: int,
    *,
    rollout_id: str | None,
    traceparent: str | None,
    issued_at: datetime,
) -> str:
    """The whole state of one host as JSON: agents replace what they hold with it."""
    tenants = session.scalars(select(Tenant).order_by(Tenant.name)).all()
    rules = session.scalars(select(Rule).order_by(Rule.priority, Rule.name)).all()
    message = DesiredState.model_validate(
        {
            "schema": "lachesis.desired-state/v1",
            "host_id": host_id,
            "generation": generation,
            "rollout_id": rollout_id,
            "issued_at": rfc3339(issued_at),
            "traceparent": traceparent,
            "tenants": [{"name": t.name, "classifiers": t.classifiers} for t in tenants],
            "rules": [
                {"name": r.name, "priority": r.priority, "match": r.match, "detours": r.detours}
                for r in rules
                if r.applies_to(host_id)
            ],
        }
    )
    return json.dumps(message.dump(), separators=(",", ":"))


def start_rollout(
    session: Session,
    *,
    cause: str,
    trigger: str,
    host_ids: Iterable[str],
    now: datetime,
    timeout_s: float,
    traceparent: str | None,
) -> tuple[Rollout, list[Publication]]:
    """Bump the generation of each named host and record a rollout targeting them.

    Call it after the change itself is in the session: the messages are built from what
    the session sees.
    """
    rollout = Rollout(
        id=str(uuid.uuid4()),
        cause=cause,
        traceparent=traceparent,
        state=PENDING,
        reason=None,
        created_at=now,
        deadline=now + timedelta(seconds=timeout_s),
        completed_at=None,
    )
    session.add(rollout)
    wanted = sorted(set(host_ids))
    hosts = session.scalars(select(Host).where(Host.id.in_(wanted)).order_by(Host.id)).all()
    publications = []
    for host in hosts:
        host.desired_generation += 1
        message = build_desired_state(
            session, host.id, host.desired_generation,
            rollout_id=rollout.id, traceparent=traceparent, issued_at=now,
        )
        rollout.targets.append(
            RolloutTarget(
                host_id=host.id, generation=host.desired_generation, status=PENDING,
                reason=None, acked_at=None, message=message,
            )
        )
        publications.append(Publication(host.id, host.desired_generation, message))
    if not publications:
        # Nothing to wait for: the change is in force as soon as it is committed.
        rollout.state = SUCCEEDED
        rollout.completed_at = now
        metrics.ROLLOUTS_COMPLETED.labels(SUCCEEDED).inc()
    metrics.ROLLOUTS_STARTED.labels(trigger).inc()
    log.info("rollout %s (%s): %d host(s)", rollout.id, cause, len(publications))
    return rollout, publications


def all_host_ids(session: Session) -> list[str]:
    return list(session.scalars(select(Host.id).order_by(Host.id)))


def record_ack(session: Session, ack: Ack, now: datetime) -> None:
    host = session.get(Host, ack.host_id)
    if host is None:
        log.warning("ack from unknown host %s (generation %d) ignored", ack.host_id, ack.generation)
        return
    host.last_seen = max(host.last_seen, now)
    target = session.scalars(
        select(RolloutTarget).where(
            RolloutTarget.host_id == ack.host_id, RolloutTarget.generation == ack.generation
        )
    ).one_or_none()
    if target is None:
        # Not a generation this controller issued (e.g. from before its database was
        # reset): it says nothing about what the host runs of our state.
        log.warning("ack from %s for generation %d matches no rollout; ignored", ack.host_id, ack.generation)
        return
    if ack.status == APPLIED:
        host.acked_generation = max(host.acked_generation, ack.generation)

    touched: dict[str, Rollout] = {}
    if target.status != PENDING:
        log.info("repeated ack from %s for generation %d ignored", ack.host_id, ack.generation)
    else:
        if ack.rollout_id is not None and ack.rollout_id != target.rollout_id:
            log.warning(
                "ack from %s for generation %d names rollout %s, expected %s",
                ack.host_id, ack.generation, ack.rollout_id, target.rollout_id,
            )
        target.acked_at = now
        if ack.status == APPLIED:
            target.status, target.reason = APPLIED, None
        elif host.acked_generation >= ack.generation:
            # The agent already runs a newer generation, which contains this change too
            # (every generation is the whole state), so the change is in force.
            target.status = APPLIED
            target.reason = f"superseded: host applied generation {host.acked_generation}"
        else:
            target.status = REJECTED
            target.reason = ack.reason or "rejected without a reason"
        touched[target.rollout_id] = target.rollout

    if ack.status == APPLIED:
        # An agent may skip generations (it reads the latest desired key after a restart);
        # the one it applied carries every older change with it.
        older = session.scalars(
            select(RolloutTarget).where(
                RolloutTarget.host_id == ack.host_id,
                RolloutTarget.generation < ack.generation,
                RolloutTarget.status == PENDING,
            )
        ).all()
        for stale in older:
            stale.status = APPLIED
            stale.acked_at = now
            stale.reason = f"superseded: host applied generation {ack.generation}"
            touched[stale.rollout_id] = stale.rollout

    for rollout in touched.values():
        settle(rollout, now)


def settle(rollout: Rollout, now: datetime) -> None:
    """Move a pending rollout to its final state once its targets decide it."""
    if rollout.state != PENDING:
        return
    rejected = [t for t in rollout.targets if t.status == REJECTED]
    if rejected:
        rollout.state = FAILED
        rollout.reason = "; ".join(
            f"{t.host_id} rejected generation {t.generation}: {t.reason}" for t in rejected
        )
    elif all(t.status == APPLIED for t in rollout.targets):
        rollout.state = SUCCEEDED
    else:
        return
    rollout.completed_at = now
    metrics.ROLLOUTS_COMPLETED.labels(rollout.state).inc()
    log.info("rollout %s %s%s", rollout.id, rollout.state, f": {rollout.reason}" if rollout.reason else "")


def timeout_reason(rollout: Rollout) -> str:
    waiting = ", ".join(t.host_id for t in rollout.targets if t.status == PENDING)
    return f"no ack before the deadline from: {waiting}"


def expire(session: Session, now: datetime) -> int:
    """Mark pending rollouts past their deadline as timed out; returns how many."""
    overdue = session.scalars(
        select(Rollout).where(Rollout.state == PENDING, Rollout.deadline <= now)
    ).all()
    for rollout in overdue:
        rollout.state = TIMED_OUT
        rollout.reason = timeout_reason(rollout)
        rollout.completed_at = now
        metrics.ROLLOUTS_COMPLETED.labels(TIMED_OUT).inc()
        log.warning("rollout %s timed out: %s", rollout.id, rollout.reason)
    return len(overdue)
