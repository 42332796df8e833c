"""Rollouts: read-only; created by changes to tenants and rules and by host enrollment."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Unpack

from fastapi import APIRouter, Query, Response
from pydantic_core import to_json
from sqlalchemy import ColumnElement, Row, select
from sqlalchemy.orm import Session

from lachesis_controller.api.deps import PrincipalDep, ReadSessionDep
from lachesis_controller.auth.authz import Principal
from lachesis_controller.db import utcnow
from lachesis_controller.models import AuditEvent, Rollout, RolloutState, RolloutTarget
from lachesis_controller.rollout import engine
from lachesis_controller.schemas.rollouts import RestoredResource, RolloutOut, RolloutTargetOut
from lachesis_controller.validation.problems import not_found, problem_responses

router = APIRouter(prefix="/rollouts", tags=["rollouts"])

AnyRow = Row[Unpack[tuple[Any, ...]]]


def rollout_out(rollout: Rollout, now: datetime) -> RolloutOut:
    state, reason, completed_at = rollout.state, rollout.reason, rollout.completed_at
    if state == engine.PENDING and rollout.deadline <= now and not engine.held_and_drained(rollout):
        # The reconciler marks it within a second or so; answer as it will.
        state, reason, completed_at = engine.TIMED_OUT, engine.timeout_reason(rollout), rollout.deadline
    return _out(
        rollout, [_target_out(t) for t in rollout.targets], state=state, reason=reason, completed_at=completed_at
    )


def _target_out(target: RolloutTarget | AnyRow) -> RolloutTargetOut:
    return RolloutTargetOut(
        host_id=target.host_id,
        generation=target.generation,
        status=target.status,
        phase=target.phase,
        drained_at=target.drained_at,
        acked_at=target.acked_at,
        reason=target.reason,
    )


def _out(
    rollout: Rollout | AnyRow,
    targets: list[RolloutTargetOut],
    *,
    state: RolloutState,
    reason: str | None,
    completed_at: datetime | None,
) -> RolloutOut:
    return RolloutOut(
        id=rollout.id,
        state=state,
        reason=reason,
        cause=rollout.cause,
        phase=rollout.phase,
        rolled_back_by=rollout.rolled_back_by,
        restored=[RestoredResource.model_validate(r) for r in rollout.restored]
        if rollout.restored is not None
        else None,
        traceparent=rollout.traceparent,
        created_at=rollout.created_at,
        deadline=rollout.deadline,
        completed_at=completed_at,
        targets=targets,
    )


# What a listed rollout shows, read as rows: as ORM objects a list of 50 rollouts of 10 hosts
# each (500 targets) was a fifth of the controller's time under 200 concurrent clients, most
# of it building and tracking objects nothing changes (docs/benchmarks/controller.md).
_ROLLOUT_COLUMNS = (
    Rollout.id,
    Rollout.state,
    Rollout.reason,
    Rollout.cause,
    Rollout.phase,
    Rollout.rolled_back_by,
    Rollout.restored,
    Rollout.traceparent,
    Rollout.created_at,
    Rollout.deadline,
    Rollout.completed_at,
)
_TARGET_COLUMNS = (
    RolloutTarget.rollout_id,
    RolloutTarget.host_id,
    RolloutTarget.generation,
    RolloutTarget.status,
    RolloutTarget.phase,
    RolloutTarget.drained_at,
    RolloutTarget.acked_at,
    RolloutTarget.reason,
)


def recent_rollouts(session: Session, where: ColumnElement[bool] | None, limit: int, now: datetime) -> bytes:
    """The newest `limit` rollouts (matching `where`), newest first, each with its targets, as
    the JSON of a list of RolloutOut.

    Built as plain dicts and written by pydantic's serializer (the one FastAPI would use, so
    the same JSON) without a model per rollout and target: validating 50 rollouts x 10
    targets, and FastAPI validating them again as the response, was most of this read's CPU
    under 200 clients (docs/benchmarks/controller.md, sixth round). The columns are the
    models' fields, in their order; test_rollouts.py compares the two answers."""
    query = select(*_ROLLOUT_COLUMNS).order_by(Rollout.created_at.desc(), Rollout.id).limit(limit)
    if where is not None:
        query = query.where(where)
    rows = session.execute(query).all()
    targets: dict[str, list[dict[str, Any]]] = {r.id: [] for r in rows}
    if targets:
        found = session.execute(
            select(*_TARGET_COLUMNS)
            .where(RolloutTarget.rollout_id.in_(list(targets)))
            .order_by(RolloutTarget.rollout_id, RolloutTarget.host_id)
        )
        for rollout_id, *target in found:
            targets[rollout_id].append(dict(zip(_TARGET_KEYS, target, strict=True)))
    out: list[dict[str, Any] | RolloutOut] = []
    for r in rows:
        if r.state == engine.PENDING and r.deadline <= now:
            # Overdue and not yet marked: whether it timed out depends on its targets'
            # phases, decided by the same code as for one rollout (rare: the reconciler
            # marks it within a pass).
            overdue = session.get(Rollout, r.id)
            if overdue is not None:
                out.append(rollout_out(overdue, now))
                continue
        listed = r._asdict()
        if r.restored is not None:
            # As RestoredResource keeps them: its two fields, whatever else the row holds.
            listed["restored"] = [{"kind": x["kind"], "name": x["name"]} for x in r.restored]
        listed["targets"] = targets[r.id]
        out.append(listed)
    return to_json(out)


# RolloutTargetOut's fields, which _TARGET_COLUMNS reads after the rollout id.
_TARGET_KEYS = tuple(column.key for column in _TARGET_COLUMNS[1:])


def _of_tenant(principal: Principal) -> ColumnElement[bool]:
    # A rollout is a tenant's when one of its audited causes is: enrollment and changes to
    # rules of all tenants ship other tenants' state too and stay out of its view.
    return Rollout.id.in_(select(AuditEvent.rollout_id).where(AuditEvent.tenant == principal.tenant))


@router.get("", response_model=list[RolloutOut], summary="Recent rollouts, newest first")
async def list_rollouts(
    session: ReadSessionDep, principal: PrincipalDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> Response:
    with session.begin():
        body = recent_rollouts(session, None if principal.tenant is None else _of_tenant(principal), limit, utcnow())
    return Response(body, media_type="application/json")


@router.get("/{rollout_id}", response_model=RolloutOut, responses=problem_responses(404))
async def get_rollout(rollout_id: str, session: ReadSessionDep, principal: PrincipalDep) -> RolloutOut:
    query = select(Rollout).where(Rollout.id == rollout_id)
    if principal.tenant is not None:
        # Not-found rather than forbidden: a tenant learns nothing about others' rollout ids.
        query = query.where(_of_tenant(principal))
    with session.begin():
        rollout = session.scalars(query).first()
        if rollout is None:
            raise not_found("rollout", rollout_id)
        return rollout_out(rollout, utcnow())
