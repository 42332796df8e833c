"""The rollout engine: turning a change of intent into new per-host generations, and acks
back into rollout states.

Every function here runs inside the caller's transaction, so a change to a rule or tenant,
the generation bumps it causes and the rollout recording them commit together or not at
all. Publishing to Redis happens after the commit (bus/client.py), and the reconciler repeats it
if Redis missed it.

A change that moves flows (an existing rule whose match, priority or detours change, or
that goes away) is rolled out in two phases so no IO of a moving flow is in flight while
the hosts disagree: every target gets the new generation with phase quiesce (stop
admitting the flows' IO, drain what is in flight, ack), and only when every target has
acked that does each get phase install (install, resume, ack). A rejection, a timeout or
a target whose agent dies fails such a rollout and rolls it back. Adding rules or
changing tenants moves no flow of an existing match and stays one-phase; a rejection
rolls such a rollout back too, a timeout does not (the hosts will run it).

A rollback restores the database first: every row the rollout changed goes back to what
the rollout found (intent.py), so the API, later rollouts and what the hosts run agree,
and every target then gets a new generation built from it (`restores` names the
generation whose state it brings back).

A generation's state (tenants, rules, stages, caches) is stored once per distinct
content (DesiredStateBody), however many hosts and rollouts ship it; the message is
rendered from it and the rollout's envelope (message_of).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import delete, func, insert, inspect, select, update
from sqlalchemy.orm import Session, lazyload, object_session
from sqlalchemy.orm.attributes import set_committed_value

from lachesis_controller.auth import audit
from lachesis_controller.bus.client import Publication as Publication  # re-exported: what the engine returns
from lachesis_controller.db import among, utcnow
from lachesis_controller.models import (
    Base,
    CacheAllocation,
    DesiredStateBody,
    Host,
    Rollout,
    RolloutTarget,
    Rule,
    Tenant,
)
from lachesis_controller.observability import metrics
from lachesis_controller.rollout import intent
from lachesis_controller.rollout.render import Renderer, encode, envelope
from lachesis_controller.rollout.render import rfc3339 as rfc3339  # re-exported: detours, tests
from lachesis_controller.stages import forwarding
from lachesis_controller.stages import store as stage_store
from lachesis_controller.stages.resolve import shipped_rules, shipped_stages

log = logging.getLogger(__name__)

# Final: each its own Literal type, the columns' (models.RolloutState, TargetStatus, ...).
PENDING: Final = "pending"
SUCCEEDED: Final = "succeeded"
FAILED: Final = "failed"
TIMED_OUT: Final = "timed_out"
APPLIED: Final = "applied"
REJECTED: Final = "rejected"
# Phases of a target (RolloutTarget.phase) and of a two-phase rollout (Rollout.phase).
QUIESCE: Final = "quiesce"
DRAINED: Final = "drained"
INSTALL: Final = "install"
# A rollout made by a switch operation (api/quiesce.py): quiesced flows stay quiesced, after
# the drain, until an explicit resume.
HOLD: Final = "hold"

_TARGETS = RolloutTarget.__table__.c


@dataclass(frozen=True)
class DesiredInputs:
    """What every host's desired state is made of, read once per rollout rather than once
    per host: at 1,000 hosts the per-host reads were most of a rollout's time
    (docs/benchmarks/controller.md). Read as columns, not objects, and what only stages need
    (the allocation's levels, the forwarding in force) only when a stage is declared."""

    tenants: list[dict[str, Any]]
    # The shipped fields of each rule, and the hosts it is for (None: every host).
    rules: list[tuple[dict[str, Any], list[str] | None]]
    caches: list[dict[str, Any]] | None
    declared: dict[str, dict[str, Any]]
    allocation: dict[str, int] | None
    server: dict[str, int]
    forwarding: Any

    @classmethod
    def load(cls, session: Session) -> DesiredInputs:
        declared = stage_store.declared_stages(session)
        return cls(
            tenants=[
                {"name": name, "classifiers": classifiers}
                for name, classifiers in session.execute(select(Tenant.name, Tenant.classifiers).order_by(Tenant.name))
            ],
            rules=[
                ({"name": name, "priority": priority, "match": match, "detours": detours}, hosts)
                for name, priority, match, detours, hosts in session.execute(
                    select(Rule.name, Rule.priority, Rule.match, Rule.detours, Rule.hosts).order_by(
                        Rule.priority, Rule.name
                    )
                )
            ],
            caches=cache_sizes(session),
            declared=declared,
            allocation=stage_store.allocation_sizes(session) if declared else None,
            server=stage_store.server_sizes(session) if declared else {},
            forwarding=forwarding.current(session) if declared else {},
        )

    def body(self, session: Session, host_id: str) -> dict[str, Any]:
        """What `host_id` should run. Its own view (devices, placements, what it ran) is read
        only when a stage is declared: without stages nothing of it is shipped."""
        stages: list[dict[str, Any]] = []
        if self.declared:
            host = stage_store.host_view(session, host_id)
            stages = shipped_stages(
                self.declared.values(), host, self.allocation, self.server, forwarding=self.forwarding
            )
        rule_dicts = [dict(r) for r, hosts in self.rules if hosts is None or host_id in hosts]
        return {
            **({"caches": self.caches} if self.caches is not None else {}),
            **({"stages": stages} if stages else {}),
            "tenants": self.tenants,
            "rules": shipped_rules(rule_dicts, self.declared, (s["name"] for s in stages), host_id),
        }

    def bodies(self, session: Session, host_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Host -> what it should run, one body (the same object) for all hosts that run the
        same content. Without stages a host's body depends on it only through the rules scoped
        to hosts, so it is built once per set of such rules the hosts get, not once per host."""
        if self.declared:
            return {h: self.body(session, h) for h in host_ids}
        built: dict[tuple[int, ...], dict[str, Any]] = {}
        out = {}
        for host_id in host_ids:
            left_out = tuple(i for i, (_, hosts) in enumerate(self.rules) if hosts is not None and host_id not in hosts)
            if left_out not in built:
                built[left_out] = self.body(session, host_id)
            out[host_id] = built[left_out]
        return out


def desired_body(session: Session, host_id: str) -> dict[str, Any]:
    """What one host should run (tenants, rules, stages, caches), as the database says."""
    return DesiredInputs.load(session).body(session, host_id)


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
    return encode(
        {
            **envelope(host_id, generation, rollout_id, traceparent, issued_at),
            **desired_body(session, host_id),
        }
    )


def message_of(target: RolloutTarget, phase: str = INSTALL) -> str | None:
    """The message of `target` in `phase` (quiesce: its phase 1), byte for byte as first
    published; None once its state was pruned."""
    return Renderer().target(target, phase)


def _stored(session: Session, body: dict[str, Any]) -> DesiredStateBody:
    """The stored copy of `body`, added if no generation shipped it before. Keyed by the
    SHA-256 of its canonical (key-sorted) JSON; kept in its own key order."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    found = session.get(DesiredStateBody, digest)
    if found is None:
        found = DesiredStateBody(id=digest, body=json.dumps(body, separators=(",", ":")), created_at=utcnow())
        session.add(found)
        session.flush()
    return found


def _shipped_bodies(session: Session, host_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Host -> the body its desired generation shipped (absent: none, or pruned), in one
    query; each distinct body parsed once."""
    if not host_ids:
        return {}
    rows = session.execute(
        select(RolloutTarget.host_id, DesiredStateBody.id, DesiredStateBody.body)
        .join(DesiredStateBody, RolloutTarget.state_id == DesiredStateBody.id)
        .join(Host, (Host.id == RolloutTarget.host_id) & (Host.desired_generation == RolloutTarget.generation))
        .where(RolloutTarget.host_id.in_(host_ids))  # not an array: see record_acks
    ).all()
    parsed: dict[str, dict[str, Any]] = {}
    out = {}
    for host_id, digest, body in rows:
        if digest not in parsed:
            parsed[digest] = json.loads(body)
        out[host_id] = parsed[digest]
    return out


def prune_states(session: Session) -> None:
    """Drop the stored states nothing needs any more. Kept: each host's desired and acked
    generation (the reconciler republishes the one, the other is what runs) and every
    target of a pending rollout (phase 2 renders from them). Rollouts and their targets
    stay as history (a few hundred bytes each); a pruned target's state reads as null."""
    session.flush()
    # Only targets that still hold a state: the pruned ones are nearly all of the history, and
    # reading them at every change made a write's cost grow with every rollout ever made
    # (docs/benchmarks/controller.md). A NULL in `keep` would besides make NOT IN unknown for
    # every row and prune nothing.
    keep = (
        select(RolloutTarget.state_id)
        .join(Host, Host.id == RolloutTarget.host_id)
        .where(RolloutTarget.state_id.is_not(None))
        .where(
            (RolloutTarget.generation == Host.desired_generation)
            | (RolloutTarget.generation == Host.acked_generation)
            | RolloutTarget.rollout_id.in_(select(Rollout.id).where(Rollout.state == PENDING))
        )
    )
    session.execute(
        update(RolloutTarget)
        .where(RolloutTarget.state_id.is_not(None), RolloutTarget.state_id.not_in(keep))
        .values(state_id=None)
        .execution_options(synchronize_session="fetch")
    )
    referenced = select(RolloutTarget.state_id).where(RolloutTarget.state_id.is_not(None))
    session.execute(
        delete(DesiredStateBody)
        .where(DesiredStateBody.id.not_in(referenced))
        .execution_options(synchronize_session="fetch")
    )


def cache_sizes(session: Session) -> list[dict[str, Any]] | None:
    """The current cache allocation as per-tenant sizes (None: no allocation in force)."""
    current = session.get(CacheAllocation, "current")
    if current is None:
        return None
    return [
        {"tenant": name, "size_bytes": max(0, round(share["size_bytes"]))}
        for name, share in sorted(current.tenants.items())
    ]


def moved_flows(before: list[dict[str, Any]] | None, after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Matches whose IO goes elsewhere once `after` replaces `before` (rule lists of one
    host): rules that changed (both matches when the match changed) or went away.

    New rules are not counted: the brief of consistency is about IO already flowing
    under a rule. `before` None (the host's first generation) moves nothing.
    """
    if before is None:
        return []
    new = {r["name"]: r for r in after}
    flows: list[dict[str, Any]] = []

    def add(match: dict[str, Any]) -> None:
        if match not in flows:
            flows.append(match)

    for old in before:
        now = new.get(old["name"])
        if now is None:
            add(old["match"])
        elif (now["match"], now["priority"], now["detours"]) != (old["match"], old["priority"], old["detours"]):
            add(old["match"])
            add(now["match"])
    return flows


def start_rollout(
    session: Session,
    *,
    cause: str,
    trigger: str,
    host_ids: Iterable[str] | None,
    now: datetime,
    timeout_s: float,
    traceparent: str | None,
    hold_flows: list[dict[str, Any]] | None = None,
    restores: dict[str, int] | None = None,
) -> tuple[Rollout, list[Publication]]:
    """Bump the generation of each named host (`host_ids` None: every host, read in the same
    locked query) and record a rollout targeting them.

    Call it after the change itself is in the session: the messages are built from what
    the session sees, and what changed since the previous rollout is recorded so that a
    failure can restore it (intent.py). Two-phase when the change moves a flow at any
    target; with `hold_flows` (a switch operation) always, quiescing those flows and
    holding them quiesced until `resume`. With `restores` (host -> generation) it is a
    rollback: one phase, each message saying which generation it restores, and never
    itself restored.
    """
    rollout = Rollout(
        id=str(uuid.uuid4()),
        cause=cause,
        traceparent=traceparent,
        state=PENDING,
        reason=None,
        created_at=now,
        deadline=now + timedelta(seconds=timeout_s),
        timeout_s=timeout_s,
        completed_at=None,
    )
    session.add(rollout)
    changes = intent.ship(session)
    rollout.changes = changes if restores is None else None
    # Locked (in id order, so two rollouts never deadlock on each other) and read afresh: a
    # copy the session loaded earlier (record_acks' hosts before a rollback) may predate a
    # generation another replica committed meanwhile, and N + 1 from it would be issued twice.
    # As rows, and the generations bumped by one UPDATE: 1,000 Host objects loaded, changed
    # and flushed (one UPDATE per row) were 8% of a 1,000-host rollout's controller CPU.
    # Every host: no IN list of them all, and no query for their ids before this one.
    query = select(Host.id, Host.desired_generation, Host.capabilities).order_by(Host.id).with_for_update()
    if host_ids is not None:
        query = query.where(among(session, Host.id, sorted(set(host_ids))))
    hosts = [
        stage_store.HostGeneration(host_id, generation + 1, capabilities)
        for host_id, generation, capabilities in session.execute(query)
    ]
    shipped = _shipped_bodies(session, [h.id for h in hosts])  # before the generations move
    if hosts:
        session.execute(
            update(Host)
            .where(among(session, Host.id, [h.id for h in hosts]))
            .values(desired_generation=Host.desired_generation + 1)
            .execution_options(synchronize_session=False)
        )
        # Host objects the session holds (a registration's new host, a rollback's) say so too.
        refresh_loaded(session, Host, {(h.id,): {"desired_generation": h.desired_generation} for h in hosts})
    staged: list[tuple[stage_store.HostGeneration, dict[str, Any], list[dict[str, Any]]]] = []
    bodies = DesiredInputs.load(session).bodies(session, (h.id for h in hosts))
    # Hosts share their bodies (shipped and new) by content: what moves is found once per pair.
    moved: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for host in hosts:
        before = shipped.get(host.id)
        body = bodies[host.id]
        if hold_flows is not None:
            flows = hold_flows
        elif restores is not None:
            flows = []
        else:
            pair = (id(before), id(body))
            if pair not in moved:
                moved[pair] = moved_flows(None if before is None else before["rules"], body["rules"])
            flows = moved[pair]
        staged.append((host, body, flows))
    # Consistency is across hosts: if a flow moves anywhere, every target takes part.
    two_phase = hold_flows is not None or any(flows for _, _, flows in staged)
    if two_phase:
        rollout.phase = HOLD if hold_flows is not None else QUIESCE
    publications = []
    rows: list[dict[str, Any]] = []
    renderer = Renderer()
    phase = QUIESCE if two_phase else INSTALL
    # Hosts that run the same content share one stored body: hashed and looked up once, and
    # a body object shared by hosts (DesiredInputs.bodies) written out once.
    stored: dict[str, DesiredStateBody] = {}
    canonical_of: dict[int, str] = {}
    for host, body, flows in staged:
        canonical = canonical_of.get(id(body))
        if canonical is None:
            canonical = canonical_of[id(body)] = json.dumps(body, sort_keys=True, separators=(",", ":"))
        if canonical not in stored:
            stored[canonical] = _stored(session, body)
        quiesce = flows if two_phase else None
        restored = None if restores is None else restores.get(host.id, 0)
        rows.append(
            {
                "rollout_id": rollout.id,
                "host_id": host.id,
                "generation": host.desired_generation,
                "status": PENDING,
                "reason": None,
                "acked_at": None,
                "state_id": stored[canonical].id,
                "phase": phase,
                "quiesce": quiesce,
                "restores": restored,
                "drained_at": None,
            }
        )
        message = renderer.message(
            rollout,
            stored[canonical],
            host.id,
            host.desired_generation,
            phase,
            quiesce=quiesce,
            restores=restored,
        )
        publications.append(Publication(host.id, host.desired_generation, message))
    stage_store.record_assignments(session, ((host, body.get("stages", [])) for host, body, _ in staged))
    if rows:
        # One executemany instead of 1,000 ORM objects and their unit of work
        # (docs/benchmarks/controller.md): the rollout row goes first, the targets name it, and
        # `rollout.targets` is read back from the database when next used.
        session.flush()
        # Core, not the ORM's bulk insert: the same INSERT, without its per-row bookkeeping
        # (2% of a 1,000-host rollout's controller CPU).
        session.connection().execute(insert(Base.metadata.tables[RolloutTarget.__tablename__]), rows)
        session.expire(rollout, ["targets"])
    if not publications:
        # Nothing to wait for: the change is in force as soon as it is committed.
        rollout.state = SUCCEEDED
        rollout.completed_at = now
        rollout.changes = None
        metrics.ROLLOUTS_COMPLETED.labels(SUCCEEDED).inc()
    prune_states(session)
    metrics.ROLLOUTS_STARTED.labels(trigger).inc()
    log.info(
        "rollout %s (%s): %d host(s)%s",
        rollout.id,
        cause,
        len(publications),
        f", two-phase ({rollout.phase})" if two_phase else "",
    )
    return rollout, publications


def all_host_ids(session: Session) -> list[str]:
    return list(session.scalars(select(Host.id).order_by(Host.id)))


def refresh_loaded(session: Session, cls: type[Any], values: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    """Give the objects of `cls` in the session's identity map (by primary key) the values a
    Core UPDATE wrote; objects not loaded stay unloaded."""
    if not values:
        return
    for obj in list(session.identity_map.values()):
        if isinstance(obj, cls):
            new = values.get(inspect(obj).identity or ())
            for key, value in (new or {}).items():
                set_committed_value(obj, key, value)


def _tallies(session: Session, rollout_ids: Sequence[str]) -> dict[str, Counter[tuple[str, str]]]:
    """Rollout -> how many of its targets are in each (status, phase), in one query."""
    out: dict[str, Counter[tuple[str, str]]] = {r: Counter() for r in rollout_ids}
    for rollout_id, status, phase, n in session.execute(
        select(_TARGETS.rollout_id, _TARGETS.status, _TARGETS.phase, func.count())
        .where(_TARGETS.rollout_id.in_(rollout_ids))
        .group_by(_TARGETS.rollout_id, _TARGETS.status, _TARGETS.phase)
    ):
        out[rollout_id][status, phase] = n
    return out


def settle_all(session: Session, rollout_ids: list[str], now: datetime) -> list[Publication]:
    """Settle the rollouts an ack batch decided targets of, roll back the failed ones and
    start phase 2 of those whose targets all drained. Their targets are counted, not
    loaded (a rollback still loads them)."""
    if not rollout_ids:
        return []
    tallies = _tallies(session, rollout_ids)
    found = {
        r.id: r
        for r in session.scalars(select(Rollout).where(Rollout.id.in_(rollout_ids)).options(lazyload(Rollout.targets)))
    }
    publications: list[Publication] = []
    for rollout_id in rollout_ids:
        rollout = found[rollout_id]
        _settle(session, rollout, now, tallies[rollout_id])
        publications += _roll_back_if_failed(session, rollout, now)
        if rollout.phase == QUIESCE:
            publications += _advance(session, rollout, tallies[rollout_id])
    return publications


def _session_of(rollout: Rollout) -> Session:
    session = object_session(rollout)
    if session is None:
        raise RuntimeError(f"rollout {rollout.id} is in no session")
    return session


def advance(rollout: Rollout) -> list[Publication]:
    """Phase 2 once every target still pending has drained: install and resume."""
    session = _session_of(rollout)
    return _advance(session, rollout, _tallies(session, [rollout.id])[rollout.id])


def _advance(session: Session, rollout: Rollout, tally: Counter[tuple[str, str]]) -> list[Publication]:
    if rollout.state != PENDING or any(status == PENDING and phase != DRAINED for status, phase in tally):
        return []
    log.info("rollout %s: every target drained, installing", rollout.id)
    return _install_waiting(session, rollout)


def resume(rollout: Rollout) -> list[Publication]:
    """End a held (switch) quiesce: install (the state is unchanged) and resume."""
    if rollout.phase != HOLD or rollout.state != PENDING:
        return []
    return _install_waiting(_session_of(rollout), rollout)


def _install_waiting(session: Session, rollout: Rollout) -> list[Publication]:
    """Every target of `rollout` still pending goes to phase install (one UPDATE, which
    returns them) and gets its install message, rendered once per distinct state."""
    rollout.phase = INSTALL
    waiting = sorted(
        session.connection()
        .execute(
            update(RolloutTarget)
            .where(_TARGETS.rollout_id == rollout.id, _TARGETS.status == PENDING)
            .values(phase=INSTALL)
            .returning(_TARGETS.host_id, _TARGETS.generation, _TARGETS.state_id, _TARGETS.restores)
        )
        .all()
    )
    refresh_loaded(session, RolloutTarget, {(rollout.id, host_id): {"phase": INSTALL} for host_id, *_ in waiting})
    wanted = {state_id for _, _, state_id, _ in waiting if state_id is not None}
    states = (
        {s.id: s for s in session.scalars(select(DesiredStateBody).where(DesiredStateBody.id.in_(wanted)))}
        if wanted
        else {}
    )
    renderer = Renderer()  # one validation per distinct state, not per host
    publications = []
    for host_id, generation, state_id, restores in waiting:
        state = None if state_id is None else states.get(state_id)
        if state is None:
            raise RuntimeError(f"state of pending {host_id}@{generation} was pruned")
        message = renderer.message(rollout, state, host_id, generation, INSTALL, quiesce=None, restores=restores)
        publications.append(Publication(host_id, generation, message))
    return publications


def current_message(target: RolloutTarget) -> str | None:
    """What the host's desired key should hold for this target now (None: pruned)."""
    return message_of(target, INSTALL if target.phase == INSTALL or target.quiesce is None else QUIESCE)


def _roll_back_if_failed(session: Session | None, rollout: Rollout, now: datetime) -> list[Publication]:
    """Roll back a two-phase rollout that failed or timed out (its hosts hold flows
    quiesced), and a one-phase one that an agent refused (what it ships will never be
    installed there). A one-phase rollout that timed out stays: its change is still
    what the hosts will run, each once its agent reads its desired key again."""
    if session is None or rollout.state not in (FAILED, TIMED_OUT) or rollout.rolled_back_by is not None:
        return []
    if rollout.phase is None and not (rollout.state == FAILED and rollout.changes):
        rollout.changes = None
        return []
    return roll_back(session, rollout, now)


def roll_back(session: Session, rollout: Rollout, now: datetime) -> list[Publication]:
    """Put the database back to what the failed rollout found, then ship that to its hosts.

    Every row the rollout changed and nobody changed since gets its earlier value back
    (intent.restore), with an audit event each; the database then says again what the
    hosts run. Each target host gets a new generation built from it (generations only
    grow, so a late copy of the failed one is refused as stale), saying which generation
    it restores: the newest one the host applied before the failed one. A host a later
    change already moved on is left to that change unless rows were restored (that
    change shipped them too).
    """
    restored = intent.restore(session, rollout.changes or [])
    rollout.changes = None
    rollout.restored = [{"kind": c["kind"], "name": intent.name_of(c)} for c in restored]
    hosts: dict[str, int] = {}
    for target in rollout.targets:
        host = session.get(Host, target.host_id)
        if host is None or (host.desired_generation != target.generation and not restored):
            continue
        previous = session.scalars(
            select(RolloutTarget.generation)
            .where(
                RolloutTarget.host_id == target.host_id,
                RolloutTarget.generation < target.generation,
                RolloutTarget.status == APPLIED,
            )
            .order_by(RolloutTarget.generation.desc())
            .limit(1)
        ).one_or_none()
        hosts[host.id] = previous or 0
    back, publications = start_rollout(
        session,
        cause=f"rollback of rollout {rollout.id}",
        trigger="rollback",
        host_ids=hosts,
        now=now,
        timeout_s=_timeout_of(rollout),
        traceparent=rollout.traceparent,
        restores=hosts,
    )
    for change in restored:
        audit.record(
            session,
            audit.CONTROLLER,
            f"{change['kind']}.rollback",
            kind=change["kind"],
            name=intent.name_of(change),
            tenant=intent.tenant_of(change),
            before=change["after"],
            after=change["before"],
            rollout_id=back.id,
        )
    rollout.rolled_back_by = back.id
    what = ", ".join(f"{r['kind']} {r['name']}" for r in rollout.restored) or "no change"
    rollout.reason = f"{rollout.reason}; rolled back by rollout {back.id} (restored: {what})"
    log.warning(
        "rollout %s rolled back by rollout %s (%d host(s); restored: %s)", rollout.id, back.id, len(publications), what
    )
    return publications


def _timeout_of(rollout: Rollout) -> float:
    # Not deadline - created_at: the deadline may have been moved since (tests pass it).
    if rollout.timeout_s is not None:
        return rollout.timeout_s
    return (rollout.deadline - rollout.created_at).total_seconds()  # made before migration 0008


def settle(rollout: Rollout, now: datetime) -> None:
    """Move a pending rollout to its final state once its targets decide it."""
    session = _session_of(rollout)
    _settle(session, rollout, now, _tallies(session, [rollout.id])[rollout.id])


def _settle(session: Session, rollout: Rollout, now: datetime, tally: Counter[tuple[str, str]]) -> None:
    if rollout.state != PENDING:
        return
    if any(status == REJECTED for status, _ in tally):
        rejected = session.execute(
            select(_TARGETS.host_id, _TARGETS.generation, _TARGETS.reason)
            .where(_TARGETS.rollout_id == rollout.id, _TARGETS.status == REJECTED)
            .order_by(_TARGETS.host_id)
        )
        rollout.state = FAILED
        rollout.reason = "; ".join(f"{host_id} rejected generation {g}: {why}" for host_id, g, why in rejected)
    elif all(status == APPLIED for status, _ in tally):
        rollout.state = SUCCEEDED
        rollout.changes = None  # installed: nothing to restore any more
    else:
        return
    rollout.completed_at = now
    metrics.ROLLOUTS_COMPLETED.labels(rollout.state).inc()
    log.info("rollout %s %s%s", rollout.id, rollout.state, f": {rollout.reason}" if rollout.reason else "")


def timeout_reason(rollout: Rollout) -> str:
    # Drained targets acked their phase: they wait on the others, not the reverse.
    waiting = ", ".join(
        f"{t.host_id}{f' ({t.phase})' if t.phase == QUIESCE else ''}"
        for t in rollout.targets
        if t.status == PENDING and t.phase != DRAINED
    )
    return f"no ack before the deadline from: {waiting}"


def held_and_drained(rollout: Rollout) -> bool:
    return rollout.phase == HOLD and all(t.phase == DRAINED for t in rollout.targets if t.status == PENDING)


def expire(session: Session, now: datetime) -> list[Publication]:
    """Mark pending rollouts past their deadline as timed out (rolling back the two-phase
    ones); returns the rollback messages to publish. A held switch quiesce whose targets
    all drained waits for its resume instead."""
    overdue = session.scalars(select(Rollout).where(Rollout.state == PENDING, Rollout.deadline <= now)).all()
    publications: list[Publication] = []
    for rollout in overdue:
        if held_and_drained(rollout):
            continue
        rollout.state = TIMED_OUT
        rollout.reason = timeout_reason(rollout)
        rollout.completed_at = now
        metrics.ROLLOUTS_COMPLETED.labels(TIMED_OUT).inc()
        log.warning("rollout %s timed out: %s", rollout.id, rollout.reason)
        publications += _roll_back_if_failed(session, rollout, now)
    return publications


def fail_dead(session: Session, dead: set[str], now: datetime) -> list[Publication]:
    """Fail (and roll back) pending two-phase rollouts waiting on a host whose agent died:
    waiting for the deadline would keep the other hosts' flows quiesced for nothing."""
    if not dead:
        return []
    candidates = session.scalars(select(Rollout).where(Rollout.state == PENDING, Rollout.phase.is_not(None))).all()
    publications: list[Publication] = []
    for rollout in candidates:
        if held_and_drained(rollout):
            continue
        gone = sorted(t.host_id for t in rollout.targets if t.status == PENDING and t.host_id in dead)
        if not gone:
            continue
        rollout.state, rollout.completed_at = FAILED, now
        rollout.reason = f"agent of {', '.join(gone)} stopped heartbeating in phase {rollout.phase}"
        metrics.ROLLOUTS_COMPLETED.labels(FAILED).inc()
        log.warning("rollout %s failed: %s", rollout.id, rollout.reason)
        publications += roll_back(session, rollout, now)
    return publications
