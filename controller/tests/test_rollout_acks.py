"""Ack batches recorded with SQLAlchemy Core (rollout/engine.py, `record_acks`): the targets
and hosts a batch concerns are read as rows, decided in Python and written with one UPDATE
executemany per kind of change, and the rollouts settled from counts. So the number of SQL
statements a batch issues does not grow with it, and a batch of every kind of ack (applied,
rejected, stale, repeated, drained, unknown) records what the same acks recorded one at a
time record. On SQLite and PostgreSQL, each world in a database of its own."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import PostgresServer
from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.messages import Ack
from lachesis_controller.db import make_engine, make_sessionmaker
from lachesis_controller.models import Host, Rollout, RolloutTarget, Rule, Tenant
from lachesis_controller.rollout import acks as rollout_acks
from lachesis_controller.rollout import engine

# One moment for everything, so that two worlds given the same acks hold the same rows.
NOW = datetime(2026, 11, 28, 22, 0, 0, 123000, tzinfo=UTC)
MATCH = {"tenant": "web", "ops": ["read"]}
DETOURS = [{"what": "io", "to": {"kind": "stage", "target": "cache/web"}}]


@dataclass
class World:
    db: Engine
    sessions: sessionmaker[Session]


NewWorld = Callable[[list[str]], World]


@pytest.fixture(params=["sqlite", "postgresql"])
def new_world(request: pytest.FixtureRequest, tmp_path: Path, migrated_database: Path) -> Iterator[NewWorld]:
    """Makes a database of its own with tenant web, rule r1 on every host and the hosts named."""
    made: list[World] = []

    def make(hosts: list[str]) -> World:
        if request.param == "postgresql":
            server: PostgresServer = request.getfixturevalue("postgres_server")
            url = server.fresh_database()
        else:
            path = tmp_path / f"world-{len(made)}" / "lachesis.db"
            path.parent.mkdir()
            shutil.copyfile(migrated_database, path)
            url = f"sqlite:///{path}"
        db = make_engine(url)
        world = World(db, make_sessionmaker(db))
        made.append(world)
        with world.sessions.begin() as session:
            session.add(Tenant(name="web", description=None, classifiers=[{"kind": "path_prefix", "value": "/srv/web/"}], created_at=NOW, updated_at=NOW))  # fmt: skip
            session.flush()
            session.add(Rule(name="r1", priority=10, tenant="web", hosts=None, match=MATCH, detours=DETOURS, created_at=NOW, updated_at=NOW))  # fmt: skip
            for h in hosts:
                session.add(Host(id=h, agent_version="0.1.0", capabilities={}, enrolled_at=NOW, registered_at=NOW, last_seen=NOW, desired_generation=0, acked_generation=0))  # fmt: skip
        return world

    yield make
    for world in made:
        world.db.dispose()


def ack(
    host_id: str,
    generation: int,
    status: str = "applied",
    *,
    rollout_id: str | None = None,
    quiesce: bool = False,
    reason: str | None = None,
) -> Ack:
    return Ack.model_validate(
        {
            "schema": "lachesis.ack/v1",
            "host_id": host_id,
            "generation": generation,
            "rollout_id": rollout_id,
            **({"phase": "quiesce", "drained": 0} if quiesce else {}),
            "status": status,
            "reason": reason,
            "rules_installed": 1,
            "acked_at": "2026-11-28T22:00:00.000Z",
            "traceparent": None,
        }
    )


def acks_of(publications: list[engine.Publication], *, quiesce: bool = False) -> list[Ack]:
    return [
        ack(p.host_id, p.generation, rollout_id=json.loads(p.message)["rollout_id"], quiesce=quiesce)
        for p in publications
    ]


def start(world: World, cause: str, hosts: list[str], change: Callable[[Session], None]) -> list[engine.Publication]:
    with world.sessions.begin() as session:
        change(session)
        _, publications = engine.start_rollout(
            session, cause=cause, trigger="test", host_ids=hosts, now=NOW, timeout_s=30, traceparent=None
        )
        return publications


def priority(value: int) -> Callable[[Session], None]:
    def change(session: Session) -> None:
        rule = session.get(Rule, "r1")
        assert rule is not None
        rule.priority = value

    return change


@contextmanager
def statements(db: Engine) -> Iterator[list[str]]:
    """The SQL statements sent to the database meanwhile (an executemany counts once)."""
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        sent.append(statement)

    event.listen(db, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        event.remove(db, "before_cursor_execute", seen)


@contextmanager
def loaded(*classes: type[Any]) -> Iterator[list[Any]]:
    """The ORM objects of `classes` loaded from the database meanwhile."""
    objects: list[Any] = []

    def load(target: Any, _context: Any) -> None:
        objects.append(target)

    for cls in classes:
        event.listen(cls, "load", load)
    try:
        yield objects
    finally:
        for cls in classes:
            event.remove(cls, "load", load)


@dataclass
class Recorded:
    statements: list[str]  # issued by the batch, its flush included
    loaded: list[Any]  # hosts and targets it loaded as ORM objects
    publications: list[engine.Publication]


def recorded(world: World, acks: list[Ack]) -> Recorded:
    """Record one batch in one transaction."""
    with world.sessions.begin() as session:
        session.connection()  # the transaction's BEGIN is not the batch's
        with statements(world.db) as sent, loaded(Host, RolloutTarget) as objects:
            publications = rollout_acks.record_acks(session, acks, NOW)
            session.flush()
    return Recorded(sent, objects, publications)


def rollouts_by_cause(world: World) -> dict[str, Rollout]:
    with world.sessions() as session:
        return {r.cause: r for r in session.scalars(select(Rollout))}


def test_a_batch_of_1000_acks_issues_as_many_statements_as_a_batch_of_10(new_world: NewWorld) -> None:
    small = [f"s-{i:04d}" for i in range(10)]
    large = [f"l-{i:04d}" for i in range(1000)]
    world = new_world(small + large)
    counts: dict[str, list[list[str]]] = {}
    for name, hosts, first in (("small", small, 11), ("large", large, 13)):
        # The hosts' first generation (one phase), then a move of r1 (two phases).
        applied = recorded(world, acks_of(start(world, f"{name} 1", hosts, priority(first))))
        drains = acks_of(start(world, f"{name} 2", hosts, priority(first + 1)), quiesce=True)
        drained = recorded(world, drains)
        assert sorted((p.host_id, p.generation) for p in drained.publications) == [(h, 2) for h in hosts]
        installed = recorded(world, acks_of(drained.publications))
        batches = (applied, drained, installed)
        assert applied.publications == installed.publications == []
        # Rows, not ORM objects and their unit of work.
        assert [len(b.loaded) for b in batches] == [0, 0, 0]
        counts[name] = [b.statements for b in batches]
    # Reads of the hosts and targets, one UPDATE per kind of change, the rollouts counted,
    # read and written (phase 2: its targets moved and returned, its state read).
    assert [len(s) for s in counts["large"]] == [len(s) for s in counts["small"]]
    assert all(len(s) <= 10 for s in counts["large"]), counts["large"]
    assert sum(s.lstrip().upper().startswith("UPDATE HOSTS") for s in counts["large"][0]) == 1
    assert sum(s.lstrip().upper().startswith("UPDATE ROLLOUT_TARGETS") for s in counts["large"][0]) == 1
    by_cause = rollouts_by_cause(world)
    assert {c: r.state for c, r in by_cause.items()} == dict.fromkeys(
        ("small 1", "small 2", "large 1", "large 2"), "succeeded"
    )
    with world.sessions() as session:
        assert {(h.desired_generation, h.acked_generation) for h in session.scalars(select(Host))} == {(2, 2)}
        assert {(t.status, t.phase) for t in session.scalars(select(RolloutTarget))} == {("applied", "install")}


HOSTS = [f"h{i}" for i in range(6)]


def mixed_world(new_world: NewWorld) -> tuple[World, list[Ack]]:
    """Rollout A: every host's first generation (one phase). B: rule r2 added, generation 2 of
    h0-h2 (one phase). C: r1 moved, generation 2 of h3-h5 (two phases). And a batch of acks
    of every kind, the one that fails B (and rolls it back) last: recorded one at a time, a
    rollback taken earlier would restore other generations."""
    world = new_world(HOSTS)
    start(world, "A", HOSTS, priority(11))

    def add_r2(session: Session) -> None:
        session.add(Rule(name="r2", priority=20, tenant="web", hosts=None, match={"tenant": "web"}, detours=DETOURS, created_at=NOW, updated_at=NOW))  # fmt: skip

    start(world, "B", HOSTS[:3], add_r2)
    start(world, "C", HOSTS[3:], priority(12))
    batch = [
        ack("h0", 2),  # applied, and supersedes h0's generation 1
        ack("h0", 1),  # stale: h0 runs generation 2
        ack("h1", 1),
        ack("h1", 1),  # repeated
        ack("h2", 1),
        ack("h2", 2),
        ack("h3", 1),
        ack("h3", 2, quiesce=True),  # drained
        ack("h4", 1),
        ack("h4", 2, quiesce=True),
        ack("h4", 2, quiesce=True),  # repeated drain
        ack("h5", 2, quiesce=True),  # the last drain of C: phase 2
        ack("h5", 1, rollout_id="not-the-rollout"),
        ack("nobody", 1),  # unknown host
        ack("h5", 9),  # no such generation
        ack("h1", 2, "rejected", reason="no room"),  # B fails: rolled back
    ]
    return world, batch


def rows(world: World, publications: list[engine.Publication]) -> dict[str, Any]:
    """Every rollout, target and host row, and the publications, with rollout ids named by
    their causes (uuids differ between worlds)."""
    with world.sessions() as session:
        rollouts = session.scalars(select(Rollout)).all()
        names = {r.id: r.cause for r in rollouts if not r.cause.startswith("rollback")}

        def named(value: Any) -> Any:
            if isinstance(value, str):
                for rollout_id, cause in names.items():
                    value = value.replace(rollout_id, cause)
            return value

        names.update({r.id: named(r.cause) for r in rollouts if r.cause.startswith("rollback")})
        return {
            "rollouts": sorted(
                (
                    names[r.id],
                    r.state,
                    named(r.reason),
                    r.phase,
                    r.completed_at,
                    named(r.rolled_back_by),
                    json.dumps(r.changes, sort_keys=True),
                    json.dumps(r.restored, sort_keys=True),
                )
                for r in rollouts
            ),  # fmt: skip
            "targets": sorted(
                (
                    names[t.rollout_id],
                    t.host_id,
                    t.generation,
                    t.status,
                    t.reason,
                    t.acked_at,
                    t.phase,
                    t.drained_at,
                    json.dumps(t.quiesce, sort_keys=True),
                    t.restores,
                    t.state_id,
                )
                for t in session.scalars(select(RolloutTarget))
            ),  # fmt: skip
            "hosts": sorted(
                (h.id, h.last_seen, h.desired_generation, h.acked_generation) for h in session.scalars(select(Host))
            ),
            "publications": sorted((p.host_id, p.generation, named(p.message)) for p in publications),
        }


def test_a_mixed_batch_records_what_its_acks_record_one_at_a_time(new_world: NewWorld) -> None:
    batched, batch = mixed_world(new_world)
    together = rows(batched, recorded(batched, batch).publications)

    one_by_one, batch = mixed_world(new_world)
    publications = []
    for a in batch:
        with one_by_one.sessions.begin() as session:
            publications += rollout_acks.record_ack(session, a, NOW)
    assert rows(one_by_one, publications) == together

    # And what that is.
    rollouts = {r[0]: r for r in together["rollouts"]}
    assert rollouts["A"][1] == "succeeded"
    assert rollouts["B"][1:3] == (
        "failed",
        "h1 rejected generation 2: no room; rolled back by rollout rollback of rollout B (restored: rule r2)",
    )
    assert rollouts["C"][1] == "pending" and rollouts["C"][3] == "install"
    assert rollouts["rollback of rollout B"][1] == "pending"
    targets = {(t[0], t[1]): t for t in together["targets"]}
    assert targets["A", "h0"][3:5] == ("applied", "superseded: host applied generation 2")
    assert {targets["A", h][3] for h in HOSTS} == {"applied"}
    assert [targets["B", h][3] for h in HOSTS[:3]] == ["applied", "rejected", "applied"]
    assert {targets["C", h][3:7] for h in HOSTS[3:]} == {("pending", None, None, "install")}
    assert all(targets["C", h][7] == NOW for h in HOSTS[3:])  # drained_at
    assert [targets["rollback of rollout B", h][2::7] for h in HOSTS[:3]] == [(3, 1)] * 3  # generation, restores
    assert [(h[0], h[2], h[3]) for h in together["hosts"]] == [
        ("h0", 3, 2), ("h1", 3, 1), ("h2", 3, 2), ("h3", 2, 1), ("h4", 2, 1), ("h5", 2, 1)
    ]  # fmt: skip
    assert [(p[0], p[1]) for p in together["publications"]] == [
        ("h0", 3), ("h1", 3), ("h2", 3), ("h3", 2), ("h4", 2), ("h5", 2)
    ]  # fmt: skip
    messages = [json.loads(p[2]) for p in together["publications"]]
    assert [m.get("phase", "install") for m in messages] == ["install"] * 6  # phase 2 of C, the rollback
    assert [m.get("restores") for m in messages] == [1, 1, 1, None, None, None]
