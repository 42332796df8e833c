"""Acks back into rollout states: a batch of agents' acks recorded in the caller's
transaction, in a fixed number of statements however many hosts it concerns.

Moved out of engine.py, which decides rollouts; this module only records what agents said
and hands the rollouts it touched to the engine to settle (engine.settle_all).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, ColumnElement, bindparam, case, select, text, update
from sqlalchemy.orm import Session

from lachesis_controller.bus.messages import Ack
from lachesis_controller.db import among, pg_array
from lachesis_controller.models import Host, RolloutTarget
from lachesis_controller.rollout.engine import (
    APPLIED,
    DRAINED,
    PENDING,
    QUIESCE,
    REJECTED,
    Publication,
    refresh_loaded,
    settle_all,
)

log = logging.getLogger(__name__)


def record_ack(session: Session, ack: Ack, now: datetime) -> list[Publication]:
    """Apply one ack; returns what must be published because of it (phase 2, rollbacks)."""
    return record_acks(session, [ack], now)


@dataclass(slots=True)
class _HostRow:
    """A host as an ack batch reads it: the two columns acks move, as read and as decided."""

    read_seen: datetime
    read_acked: int
    last_seen: datetime
    acked_generation: int


@dataclass(slots=True)
class _TargetRow:
    """A target as an ack batch reads it; what the batch decides is written back in bulk."""

    rollout_id: str
    host_id: str
    generation: int
    status: str
    phase: str
    reason: str | None = None
    acked_at: datetime | None = None  # set: decided (applied, rejected) by this batch
    drained_at: datetime | None = None  # set: drained by this batch

    def decide(self, status: str, reason: str | None, now: datetime) -> None:
        self.status, self.reason, self.acked_at = status, reason, now


_TARGETS = RolloutTarget.__table__.c
_HOSTS = Host.__table__.c


def _param(name: str, column: ColumnElement[Any]) -> BindParameter[Any]:
    return bindparam(name, type_=column.type)


# Each run once per ack batch for all the rows it concerns (executemany). The WHERE clauses
# keep what another writer did meanwhile: only a pending target is decided or drained, and a
# host's last_seen and acked_generation never go back.
_HOSTS_ACKED = (
    update(Host)
    .where(_HOSTS.id == bindparam("h"))
    .values(
        last_seen=case(
            (_HOSTS.last_seen < _param("seen", _HOSTS.last_seen), _param("seen", _HOSTS.last_seen)),
            else_=_HOSTS.last_seen,
        ),
        acked_generation=case(
            (
                _HOSTS.acked_generation < _param("acked", _HOSTS.acked_generation),
                _param("acked", _HOSTS.acked_generation),
            ),
            else_=_HOSTS.acked_generation,
        ),
    )
)
_TARGET_KEY = (_TARGETS.rollout_id == bindparam("r"), _TARGETS.host_id == bindparam("h"), _TARGETS.status == PENDING)
_TARGETS_DRAINED = (
    update(RolloutTarget)
    .where(*_TARGET_KEY, _TARGETS.phase == QUIESCE)
    .values(phase=DRAINED, drained_at=_param("at", _TARGETS.drained_at))
)
_TARGETS_DECIDED = (
    update(RolloutTarget)
    .where(*_TARGET_KEY)
    .values(status=bindparam("s"), reason=bindparam("why"), acked_at=_param("at", _TARGETS.acked_at))
)


# The same three writes on PostgreSQL: one statement each joining the batch's values as
# arrays (unnest; each array one string, db.pg_array), instead of an executemany. psycopg sends an executemany as one statement
# per row in pipeline mode, and its per-row work (and binding each row's datetimes) was 12%
# of a 1,000-host rollout's controller CPU. GREATEST is the CASE above for non-null columns.
# The rows were locked, in key order, when record_acks read them.
_PG_HOSTS_ACKED = text(
    "UPDATE hosts SET last_seen = GREATEST(hosts.last_seen, v.seen),"
    " acked_generation = GREATEST(hosts.acked_generation, v.acked)"
    " FROM unnest(CAST(:h AS text[]), CAST(:seen AS timestamp[]), CAST(:acked AS integer[])) AS v(h, seen, acked)"
    " WHERE hosts.id = v.h"
)
_PG_TARGETS_DRAINED = text(
    "UPDATE rollout_targets AS t SET phase = :drained, drained_at = v.at"
    " FROM unnest(CAST(:r AS text[]), CAST(:h AS text[]), CAST(:at AS timestamp[])) AS v(r, h, at)"
    " WHERE t.rollout_id = v.r AND t.host_id = v.h AND t.status = :pending AND t.phase = :quiesce"
)
_PG_TARGETS_DECIDED = text(
    "UPDATE rollout_targets AS t SET status = v.s, reason = v.why, acked_at = v.at"
    " FROM unnest(CAST(:r AS text[]), CAST(:h AS text[]), CAST(:s AS text[]), CAST(:why AS text[]),"
    " CAST(:at AS timestamp[])) AS v(r, h, s, why, at)"
    " WHERE t.rollout_id = v.r AND t.host_id = v.h AND t.status = :pending"
)


def record_acks(session: Session, acks: Sequence[Ack], now: datetime) -> list[Publication]:
    """Apply a batch of acks in the caller's transaction; returns what must be published
    because of them (phase 2 installs, rollbacks).

    With SQLAlchemy Core: the hosts and targets the batch concerns are read as rows in two
    queries, decided in Python, and written with one UPDATE for the hosts and one each for
    the targets drained and decided (an executemany on SQLite, arrays on PostgreSQL); the rollouts they concern are settled
    from their targets' counts, read in one query. No host or target becomes an ORM object:
    loading 1,000 of each, tracking their changes and flushing them through the unit of
    work (and `settle` loading the rollout's targets again) took 207 ms per 1,000 acks on
    SQLite, as rows 44 ms (bench/controller/ack_batch.py, docs/benchmarks/controller.md).
    The statements do not grow with the batch (test_rollout_acks.py counts them and the
    objects loaded).
    """
    host_ids = sorted({a.host_id for a in acks})
    if not host_ids:
        return []
    session.flush()  # the reads below see what the session holds
    # Locked as read (PostgreSQL; SQLite has no row locks), hosts first and each kind in key
    # order: the writes below join arrays (_write_acks) and take no row in an order of their
    # own, so two transactions still never lock the same rows in opposite orders. FOR NO KEY
    # UPDATE is the lock an UPDATE of these columns takes: a target inserted meanwhile
    # (start_rollout, its foreign key's KEY SHARE on the host) is not blocked.
    hosts = {
        host_id: _HostRow(seen, acked, seen, acked)
        for host_id, seen, acked in session.execute(
            select(_HOSTS.id, _HOSTS.last_seen, _HOSTS.acked_generation)
            .where(among(session, _HOSTS.id, host_ids))
            .order_by(_HOSTS.id)
            .with_for_update(key_share=True)
        )
    }
    generations = {a.generation for a in acks}
    targets = [
        _TargetRow(rollout_id, host_id, generation, status, phase)
        for rollout_id, host_id, generation, status, phase in session.execute(
            select(_TARGETS.rollout_id, _TARGETS.host_id, _TARGETS.generation, _TARGETS.status, _TARGETS.phase)
            .where(
                # An IN list, not db.among's array: a statement of constant text is prepared
                # (psycopg, after 5 runs), and with arrays here and in _shipped_bodies
                # PostgreSQL's CPU per rollout grew with the rollouts ever made (a generic
                # plan that does not know how many hosts the array holds; d7f88f9's message).
                _TARGETS.host_id.in_(host_ids),
                (_TARGETS.status == PENDING) | _TARGETS.generation.in_(generations),
            )
            .order_by(_TARGETS.rollout_id, _TARGETS.host_id)
            .with_for_update(key_share=True)
        )
    ]
    by_key = {(t.host_id, t.generation): t for t in targets}
    # Per host, for the superseded ones: scanning every target of the batch per ack was
    # quadratic in a 1,000-host rollout's batch of 1,000 acks.
    by_host: dict[str, list[_TargetRow]] = {}
    for t in targets:
        by_host.setdefault(t.host_id, []).append(t)
    touched: dict[str, None] = {}  # rollout ids, in the order the batch first decided one of theirs
    for ack in acks:
        host = hosts.get(ack.host_id)
        if host is None:
            log.warning("ack from unknown host %s (generation %d) ignored", ack.host_id, ack.generation)
            continue
        _apply(host, by_key, by_host.get(ack.host_id, []), ack, now, touched)
    _write_acks(session, hosts, targets)
    return settle_all(session, list(touched), now)


def _apply(
    host: _HostRow,
    by_key: dict[tuple[str, int], _TargetRow],
    of_host: list[_TargetRow],
    ack: Ack,
    now: datetime,
    touched: dict[str, None],
) -> None:
    host.last_seen = max(host.last_seen, now)
    target = by_key.get((ack.host_id, ack.generation))
    if target is None:
        # Not a generation this controller issued (e.g. from before its database was
        # reset): it says nothing about what the host runs of our state.
        log.warning("ack from %s for generation %d matches no rollout; ignored", ack.host_id, ack.generation)
        return
    if ack.phase == QUIESCE:
        _record_drained(target, ack, now, touched)
        return
    if ack.status == APPLIED:
        host.acked_generation = max(host.acked_generation, ack.generation)

    if target.status != PENDING:
        log.info("repeated ack from %s for generation %d ignored", ack.host_id, ack.generation)
    else:
        if ack.rollout_id is not None and ack.rollout_id != target.rollout_id:
            log.warning(
                "ack from %s for generation %d names rollout %s, expected %s",
                ack.host_id,
                ack.generation,
                ack.rollout_id,
                target.rollout_id,
            )
        if ack.status == APPLIED:
            target.decide(APPLIED, None, now)
        elif host.acked_generation >= ack.generation:
            # The agent already runs a newer generation, which contains this change too
            # (every generation is the whole state), so the change is in force.
            target.decide(APPLIED, f"superseded: host applied generation {host.acked_generation}", now)
        else:
            target.decide(REJECTED, ack.reason or "rejected without a reason", now)
        touched[target.rollout_id] = None

    if ack.status == APPLIED:
        # An agent may skip generations (it reads the latest desired key after a restart);
        # the one it applied carries every older change with it.
        for stale in of_host:
            if stale.generation < ack.generation and stale.status == PENDING:
                stale.decide(APPLIED, f"superseded: host applied generation {ack.generation}", now)
                touched[stale.rollout_id] = None


def _record_drained(target: _TargetRow, ack: Ack, now: datetime, touched: dict[str, None]) -> None:
    """Phase 1 ack: the host quiesced and drained the flows (or could not)."""
    if target.status != PENDING or target.phase != QUIESCE:
        log.info("repeated quiesce ack from %s for generation %d ignored", ack.host_id, ack.generation)
        return
    if ack.status == REJECTED:
        target.decide(REJECTED, f"quiesce refused: {ack.reason or 'no reason given'}", now)
    else:
        target.phase, target.drained_at = DRAINED, now
    touched[target.rollout_id] = None


def _write_acks(session: Session, hosts: dict[str, _HostRow], targets: list[_TargetRow]) -> None:
    """What `_apply` decided, in one statement per kind of change. Hosts first and in id
    order, as the unit of work wrote them and as start_rollout locks them (PostgreSQL):
    two transactions never take the same rows in opposite orders."""
    connection = session.connection()
    moved = sorted(
        (host_id, h) for host_id, h in hosts.items() if (h.last_seen, h.acked_generation) != (h.read_seen, h.read_acked)
    )
    arrays = connection.dialect.name == "postgresql"
    if moved and arrays:
        connection.execute(
            _PG_HOSTS_ACKED,
            {
                "h": pg_array(i for i, _ in moved),
                "seen": pg_array(h.last_seen for _, h in moved),
                "acked": pg_array(h.acked_generation for _, h in moved),
            },
        )
    elif moved:
        connection.execute(_HOSTS_ACKED, [{"h": i, "seen": h.last_seen, "acked": h.acked_generation} for i, h in moved])
    drained = sorted((t.rollout_id, t.host_id, t.drained_at) for t in targets if t.drained_at is not None)
    if drained and arrays:
        connection.execute(
            _PG_TARGETS_DRAINED,
            {
                "r": pg_array(r for r, _, _ in drained),
                "h": pg_array(h for _, h, _ in drained),
                "at": pg_array(at for _, _, at in drained),
                "drained": DRAINED,
                "pending": PENDING,
                "quiesce": QUIESCE,
            },
        )
    elif drained:
        connection.execute(_TARGETS_DRAINED, [{"r": r, "h": h, "at": at} for r, h, at in drained])
    decided = sorted(
        ((t.rollout_id, t.host_id), t.status, t.reason, t.acked_at) for t in targets if t.acked_at is not None
    )
    if decided and arrays:
        connection.execute(
            _PG_TARGETS_DECIDED,
            {
                "r": pg_array(r for (r, _), _, _, _ in decided),
                "h": pg_array(h for (_, h), _, _, _ in decided),
                "s": pg_array(s for _, s, _, _ in decided),
                "why": pg_array(why for _, _, why, _ in decided),
                "at": pg_array(at for _, _, _, at in decided),
                "pending": PENDING,
            },
        )
    elif decided:
        connection.execute(
            _TARGETS_DECIDED, [{"r": r, "h": h, "s": s, "why": why, "at": at} for (r, h), s, why, at in decided]
        )
    # The ORM objects the session already holds (a caller's, or a rollout read before) say
    # what was written, without a query each.
    refresh_loaded(
        session,
        Host,
        {(i,): {"last_seen": h.last_seen, "acked_generation": h.acked_generation} for i, h in moved},
    )
    changed: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r, h, at in drained:
        changed[(r, h)] = {"phase": DRAINED, "drained_at": at}
    for key, s, why, at in decided:
        changed.setdefault(key, {}).update(status=s, reason=why, acked_at=at)
    refresh_loaded(session, RolloutTarget, changed)
