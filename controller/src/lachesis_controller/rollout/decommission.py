"""Decommissioning a host (DELETE /api/v1/hosts/{id}): its rows go, and the rollouts that
were waiting for it are decided by the hosts that remain."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.models import AgentCredential, Host, RolloutTarget
from lachesis_controller.rollout import engine as rollouts


def delete_host(session: Session, host_id: str, now: datetime) -> tuple[dict[str, Any], list[rollouts.Publication]]:
    """Delete the host, its credential and its rollout targets in the caller's transaction.

    Returns what was deleted (for the audit log) and what must be published because of it:
    a two-phase rollout whose other targets all drained goes on to install. A rollout left
    with nothing pending settles (a rollout whose only target was this host succeeds: there
    is nobody left to apply it). Finished rollouts lose the host's target row with it: their
    state and reason keep the record.
    """
    host = session.get(Host, host_id)
    credential = session.get(AgentCredential, host_id)
    targets = session.scalars(select(RolloutTarget).where(RolloutTarget.host_id == host_id)).all()
    waiting = {t.rollout_id: t.rollout for t in targets if t.rollout.state == rollouts.PENDING}
    for target in targets:
        target.rollout.targets.remove(target)  # delete-orphan: the row goes
    # Before the host: its row's ON DELETE CASCADE would take the targets behind the ORM's back.
    session.flush()
    before: dict[str, Any] = {}
    if host is not None:
        before.update(
            agent_version=host.agent_version,
            desired_generation=host.desired_generation,
            acked_generation=host.acked_generation,
        )
        session.delete(host)
    if credential is not None:
        before["redis_user"] = credential.redis_user
        session.delete(credential)
    session.flush()
    publications: list[rollouts.Publication] = []
    for rollout in waiting.values():
        rollouts.settle(rollout, now)
        if rollout.state == rollouts.PENDING and rollout.phase == rollouts.QUIESCE:
            publications += rollouts.advance(rollout)
    before["pending_rollouts"] = sorted(waiting)
    return before, publications
