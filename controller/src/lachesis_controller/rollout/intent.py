"""The shipped intent: what the rollouts have sent the hosts, as database rows, so that a
failed rollout can put the database back to what is installed.

Every API writes its change into the session and then starts a rollout; `ship` (called
by rollouts.start_rollout) compares every shipped table with the snapshot the previous
rollout left (ShippedIntent) and returns the difference, row by row, with both sides.
That difference is the rollout's `changes`: one mechanism for rules, tenants, stages,
policies, allocations and placements, whichever API or loop changed them. `restore`
puts the `before` side back for each row still as the rollout left it (a later change
to the same row wins: it is newer intent, not the failed one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import inspect, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from lachesis_controller.db import UTCDateTime
from lachesis_controller.models import (
    Base,
    CacheAllocation,
    DevicePlacement,
    PolicyVersion,
    Rule,
    ShippedIntent,
    Stage,
    Tenant,
)

log = logging.getLogger(__name__)

Row = dict[str, Any]
Change = dict[str, Any]  # {kind, key: [primary key values], before: Row | None, after: Row | None}


@dataclass(frozen=True)
class Kind:
    name: str
    model: type[Base]
    tenant_of: Callable[[Row], str | None]
    # Policy versions are only ever added: their presence is what a rollout changes.
    presence_only: bool = False
    where: Any = None


# Parents before children: restoring writes in this order and deletes in the reverse one
# (rules and stages name tenants with ON DELETE RESTRICT).
KINDS = (
    Kind("tenant", Tenant, lambda row: row["name"]),
    Kind("stage", Stage, lambda row: row["owner"]),
    Kind("rule", Rule, lambda row: row["tenant"]),
    Kind("policy", PolicyVersion, lambda row: None, presence_only=True),
    Kind("allocation", CacheAllocation, lambda row: None, where=CacheAllocation.__table__.c.state == "current"),
    Kind("placement", DevicePlacement, lambda row: None),
)
_BY_NAME = {k.name: k for k in KINDS}
BASELINE = "current"


def _columns(model: type[Base]) -> list[Any]:
    return list(inspect(model).column_attrs)


def _row(kind: Kind, obj: Base) -> Row:
    if kind.presence_only:
        return {}
    row = {}
    for attr in _columns(kind.model):
        value = getattr(obj, attr.key)
        row[attr.key] = value.isoformat() if isinstance(value, datetime) else value
    return row


def name_of(change: Change) -> str:
    return "/".join(str(part) for part in change["key"])


def _shipped_columns(kind: Kind) -> tuple[list[str], list[Any], list[int]]:
    """The attribute names a snapshot reads of `kind` (only the primary key of a presence-only
    kind), their table columns, and the positions of the primary key among them."""
    mapper = inspect(kind.model)
    keys = [mapper.get_property_by_column(c).key for c in mapper.primary_key]
    names = keys if kind.presence_only else [a.key for a in _columns(kind.model)]
    columns = [mapper.attrs[n].columns[0] for n in names]
    return names, columns, [names.index(k) for k in keys]


def snapshot(session: Session) -> dict[str, dict[str, Any]]:
    """kind -> name -> {key, row} for every shipped row the session sees.

    Read as rows of Core statements after a flush, not as objects: loading every tenant and
    rule into the session at each rollout was a sixth of a tenant PUT's controller time
    (docs/benchmarks/controller.md, seventh round)."""
    session.flush()
    connection = session.connection()
    out: dict[str, dict[str, Any]] = {}
    for kind in KINDS:
        names, columns, key_at = _shipped_columns(kind)
        query = select(*columns)
        if kind.where is not None:
            query = query.where(kind.where)
        rows = {}
        for values in connection.execute(query):
            key = [values[i] for i in key_at]
            row = (
                {}
                if kind.presence_only
                else {n: v.isoformat() if isinstance(v, datetime) else v for n, v in zip(names, values, strict=True)}
            )
            rows["/".join(str(k) for k in key)] = {"key": key, "row": row}
        out[kind.name] = rows
    return out


def diff(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[Change]:
    changes = []
    for kind in KINDS:
        old, new = before.get(kind.name, {}), after.get(kind.name, {})
        for name in sorted(old.keys() | new.keys()):
            was, now = old.get(name), new.get(name)
            if was is not None and now is not None and was["row"] == now["row"]:
                continue
            changes.append(
                {
                    "kind": kind.name,
                    "key": (new[name] if name in new else old[name])["key"],
                    "before": None if was is None else was["row"],
                    "after": None if now is None else now["row"],
                }
            )
    return changes


def ship(session: Session) -> list[Change] | None:
    """Record the session's intent as shipped; returns what changed since the previous
    rollout (None: no baseline yet, so nothing is known to restore)."""
    # Locked before the snapshot: a concurrent rollout's transaction then commits first and
    # this one sees its rows (PostgreSQL; SQLite has one writer anyway), so no diff is lost.
    baseline = session.get(ShippedIntent, BASELINE, with_for_update=True)
    now = snapshot(session)
    if baseline is None:
        session.add(ShippedIntent(id=BASELINE, snapshot=now))
        return None
    changes = diff(baseline.snapshot, now)
    if changes:
        baseline.snapshot = now
    return changes


def ensure_baseline(session: Session) -> None:
    """A database without a baseline (new, or from before migration 0008) takes what it
    holds as installed: the first rollout then has a known "before"."""
    if session.get(ShippedIntent, BASELINE) is None:
        session.add(ShippedIntent(id=BASELINE, snapshot=snapshot(session)))


def tenant_of(change: Change) -> str | None:
    return _BY_NAME[change["kind"]].tenant_of(change["after"] or change["before"])


def restore(session: Session, changes: list[Change]) -> list[Change]:
    """Put back the `before` of every change whose row is still its `after`; returns the
    changes restored. A row that cannot come back (e.g. its host was deleted since) is
    left as it is and logged."""
    order = {k.name: i for i, k in enumerate(KINDS)}
    writes = sorted((c for c in changes if c["before"] is not None), key=lambda c: order[c["kind"]])
    deletes = sorted((c for c in changes if c["before"] is None), key=lambda c: -order[c["kind"]])
    restored = []
    for change in writes + deletes:
        kind = _BY_NAME[change["kind"]]
        obj = session.get(kind.model, tuple(change["key"]))
        current = None if obj is None else _row(kind, obj)
        if current != change["after"]:
            log.info("%s %s changed again since; not restored", kind.name, name_of(change))
            continue
        try:
            with session.begin_nested():
                _put(session, kind, obj, change)
        except IntegrityError as exc:
            log.warning("%s %s could not be restored: %s", kind.name, name_of(change), exc.orig)
            continue
        restored.append(change)
    return restored


def _put(session: Session, kind: Kind, obj: Base | None, change: Change) -> None:
    before = change["before"]
    if before is None:
        session.delete(obj)
    elif kind.presence_only:
        return  # versions are never removed, so "before" present means present now
    else:
        if obj is None:
            obj = kind.model()
            session.add(obj)
        for attr in _columns(kind.model):
            value = before[attr.key]
            if value is not None and isinstance(attr.columns[0].type, UTCDateTime):
                value = datetime.fromisoformat(value)
            setattr(obj, attr.key, value)
    session.flush()
