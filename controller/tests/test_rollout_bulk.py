"""A rollout's targets inserted in one statement and its messages rendered once per distinct
state (rollout/render.py) give the same rows, the same bytes and the same rollout states as
one ORM object and one validated message per host did. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.messages import Ack
from lachesis_controller.config import Settings
from lachesis_controller.db import make_engine, make_sessionmaker, utcnow
from lachesis_controller.models import Host, Rollout, RolloutTarget, Rule, Tenant
from lachesis_controller.rollout import acks as rollout_acks
from lachesis_controller.rollout import engine
from lachesis_controller.rollout.render import Renderer, encode, envelope

HOSTS = [f"host-{i:02d}" for i in range(12)]


@pytest.fixture
def sessions(settings: Settings) -> Iterator[sessionmaker[Session]]:
    db = make_engine(settings.database_url)
    made = make_sessionmaker(db)
    now = utcnow()
    with made.begin() as session:
        session.add(Tenant(name="web", description=None, classifiers=[{"kind": "path_prefix", "value": "/srv/web/"}], created_at=now, updated_at=now))  # fmt: skip
        session.flush()
        match = {"tenant": "web", "ops": ["read"]}
        detours = [{"what": "io", "to": {"kind": "stage", "target": "cache/web"}}]
        session.add(Rule(name="r1", priority=10, tenant="web", hosts=None, match=match, detours=detours, created_at=now, updated_at=now))  # fmt: skip
        # A rule on some hosts only: two distinct states among the targets.
        session.add(Rule(name="r2", priority=20, tenant="web", hosts=HOSTS[:4], match={"tenant": "web"}, detours=detours, created_at=now, updated_at=now))  # fmt: skip
        for host_id in HOSTS:
            session.add(Host(id=host_id, agent_version="0.1.0", capabilities={}, enrolled_at=now, registered_at=now, last_seen=now, desired_generation=0, acked_generation=0))  # fmt: skip
    yield made
    db.dispose()


def one_by_one(target: RolloutTarget, phase: str) -> str:
    """A target's message rendered and validated on its own, as before the Renderer."""
    assert target.state is not None
    rollout = target.rollout
    fields = {
        **envelope(target.host_id, target.generation, rollout.id, rollout.traceparent, rollout.created_at),
        **json.loads(target.state.body),
    }
    if phase == engine.QUIESCE:
        fields.update(phase=engine.QUIESCE, quiesce=target.quiesce)
    elif target.restores is not None:
        fields.update(phase=engine.INSTALL, restores=target.restores)
    return encode(fields)


def acks_of(publications: list[engine.Publication], phase: str | None) -> list[Ack]:
    out = []
    for p in publications:
        message = json.loads(p.message)
        quiesce: dict[str, Any] = {"phase": "quiesce", "drained": 0} if phase else {}
        out.append(
            Ack.model_validate(
                {
                    "schema": "lachesis.ack/v1",
                    "host_id": p.host_id,
                    "generation": p.generation,
                    "rollout_id": message["rollout_id"],
                    **quiesce,
                    "status": "applied",
                    "reason": None,
                    "rules_installed": 1,
                    "acked_at": "2026-11-28T00:00:00.000Z",
                    "traceparent": None,
                }
            )
        )
    return out


def start(sessions: sessionmaker[Session], priority: int) -> tuple[str, list[engine.Publication]]:
    with sessions.begin() as session:
        rule = session.get(Rule, "r1")
        assert rule is not None
        rule.priority = priority
        rollout, publications = engine.start_rollout(
            session,
            cause="test",
            trigger="rule",
            host_ids=engine.all_host_ids(session),
            now=utcnow(),
            timeout_s=30,
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        )
        # Read back in the same transaction: the bulk insert is what the ORM sees.
        assert [t.host_id for t in rollout.targets] == HOSTS
        return rollout.id, publications


def test_bulk_targets_and_shared_renders_match_the_per_host_way(sessions: sessionmaker[Session]) -> None:
    first, publications = start(sessions, 11)  # the hosts' first generation: one phase
    with sessions.begin() as session:
        targets = session.scalars(select(RolloutTarget).where(RolloutTarget.rollout_id == first)).all()
        assert sorted((t.host_id, t.generation, t.status, t.phase, t.quiesce, t.restores) for t in targets) == [
            (h, 1, "pending", "install", None, None) for h in HOSTS
        ]
        assert len({t.state_id for t in targets}) == 2  # r2's hosts and the others
        by_host = {t.host_id: t for t in targets}
        assert {p.host_id: p.message for p in publications} == {
            h: one_by_one(by_host[h], engine.INSTALL) for h in HOSTS
        }
        assert rollout_acks.record_acks(session, acks_of(publications, None), utcnow()) == []
    with sessions.begin() as session:
        rollout = session.get(Rollout, first)
        assert rollout is not None and rollout.state == "succeeded"

    second, publications = start(sessions, 12)  # r1 moves: two phases
    with sessions.begin() as session:
        by_host = {
            t.host_id: t for t in session.scalars(select(RolloutTarget).where(RolloutTarget.rollout_id == second))
        }
        assert all(t.phase == "quiesce" and t.quiesce and t.generation == 2 for t in by_host.values())
        assert {p.host_id: p.message for p in publications} == {
            h: one_by_one(by_host[h], engine.QUIESCE) for h in HOSTS
        }
        # In batches, as the consumer reads them: only the last one's drain starts phase 2.
        drains = acks_of(publications, "quiesce")
        assert rollout_acks.record_acks(session, drains[:5], utcnow()) == []
        assert rollout_acks.record_acks(session, drains[5:-1], utcnow()) == []
        installs = rollout_acks.record_acks(session, drains[-1:], utcnow())
        assert {p.host_id: p.message for p in installs} == {h: one_by_one(by_host[h], engine.INSTALL) for h in HOSTS}
        assert all(engine.message_of(by_host[h]) == one_by_one(by_host[h], engine.INSTALL) for h in HOSTS)
    for batch in (installs[:3], installs[3:]):
        with sessions.begin() as session:
            rollout = session.get(Rollout, second)
            assert rollout is not None and rollout.state == "pending"
            assert rollout_acks.record_acks(session, acks_of(batch, None), utcnow()) == []
    with sessions.begin() as session:
        rollout = session.get(Rollout, second)
        assert rollout is not None and rollout.state == "succeeded" and rollout.phase == "install"
        assert {(t.status, t.phase) for t in rollout.targets} == {("applied", "install")}
        assert all(h.acked_generation == 2 for h in session.scalars(select(Host)))


def test_a_refusal_in_a_later_batch_fails_and_rolls_back(sessions: sessionmaker[Session]) -> None:
    first, publications = start(sessions, 11)
    with sessions.begin() as session:
        rollout_acks.record_acks(session, acks_of(publications, None), utcnow())
    second, publications = start(sessions, 12)
    drains = acks_of(publications, "quiesce")
    refused = drains[-1].model_copy(update={"status": "rejected", "reason": "no"})
    with sessions.begin() as session:
        assert rollout_acks.record_acks(session, drains[:-1], utcnow()) == []
        rollbacks = rollout_acks.record_acks(session, [refused], utcnow())
    assert sorted(p.host_id for p in rollbacks) == HOSTS
    with sessions.begin() as session:
        rollout = session.get(Rollout, second)
        assert rollout is not None and rollout.state == "failed" and rollout.rolled_back_by is not None


def test_a_shared_render_still_checks_each_host_id(sessions: sessionmaker[Session]) -> None:
    rollout_id, _ = start(sessions, 11)
    with sessions.begin() as session:
        target = session.scalars(select(RolloutTarget).where(RolloutTarget.rollout_id == rollout_id)).first()
        assert target is not None and target.state is not None
        renderer = Renderer()
        assert renderer.target(target, engine.INSTALL) is not None
        with pytest.raises(ValidationError):
            renderer.message(target.rollout, target.state, "not a host id!", 1, engine.INSTALL, quiesce=None, restores=None)  # fmt: skip
        with pytest.raises(ValueError):
            renderer.message(target.rollout, target.state, target.host_id, 0, engine.INSTALL, quiesce=None, restores=None)  # fmt: skip


def test_no_host_ids_targets_every_host(sessions: sessionmaker[Session]) -> None:
    with sessions.begin() as session:
        rollout, publications = engine.start_rollout(
            session, cause="test", trigger="tenant", host_ids=None, now=utcnow(), timeout_s=30, traceparent=None
        )
        by_host = {t.host_id: t for t in rollout.targets}
        assert sorted(by_host) == HOSTS and all(t.generation == 1 for t in by_host.values())
        assert {p.host_id: p.message for p in publications} == {
            h: one_by_one(by_host[h], engine.INSTALL) for h in HOSTS
        }
        assert all(h.desired_generation == 1 for h in session.scalars(select(Host)))
