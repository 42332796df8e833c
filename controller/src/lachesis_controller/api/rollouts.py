"""Rollouts: read-only; created by changes to tenants and rules and by host enrollment."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import ColumnElement, select

from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.auth.authz import Principal
from lachesis_controller.db import utcnow
from lachesis_controller.models import AuditEvent, Rollout
from lachesis_controller.rollout import engine
from lachesis_controller.schemas.rollouts import RestoredResource, RolloutOut, RolloutTargetOut
from lachesis_controller.validation.problems import not_found, problem_responses

router = APIRouter(prefix="/rollouts", tags=["rollouts"])


def rollout_out(rollout: Rollout, now: datetime) -> RolloutOut:
    state, reason, completed_at = rollout.state, rollout.reason, rollout.completed_at
    if state == engine.PENDING and rollout.deadline <= now and not engine.held_and_drained(rollout):
        # The reconciler marks it within a second or so; answer as it will.
        state, reason, completed_at = engine.TIMED_OUT, engine.timeout_reason(rollout), rollout.deadline
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
        targets=[
            RolloutTargetOut(
                host_id=t.host_id,
                generation=t.generation,
                status=t.status,
                phase=t.phase,
                drained_at=t.drained_at,
                acked_at=t.acked_at,
                reason=t.reason,
            )
            for t in rollout.targets
        ],
    )


def _of_tenant(principal: Principal) -> ColumnElement[bool]:
    # A rollout is a tenant's when one of its audited causes is: enrollment and changes to
    # rules of all tenants ship other tenants' state too and stay out of its view.
    return Rollout.id.in_(select(AuditEvent.rollout_id).where(AuditEvent.tenant == principal.tenant))


@router.get("", response_model=list[RolloutOut], summary="Recent rollouts, newest first")
async def list_rollouts(
    session: SessionDep, principal: PrincipalDep, limit: Annotated[int, Query(ge=1, le=500)] = 50
) -> list[RolloutOut]:
    now = utcnow()
    query = select(Rollout).order_by(Rollout.created_at.desc(), Rollout.id).limit(limit)
    if principal.tenant is not None:
        query = query.where(_of_tenant(principal))
    with session.begin():
        rows = session.scalars(query).all()
        return [rollout_out(r, now) for r in rows]


@router.get("/{rollout_id}", response_model=RolloutOut, responses=problem_responses(404))
async def get_rollout(rollout_id: str, session: SessionDep, principal: PrincipalDep) -> RolloutOut:
    query = select(Rollout).where(Rollout.id == rollout_id)
    if principal.tenant is not None:
        # Not-found rather than forbidden: a tenant learns nothing about others' rollout ids.
        query = query.where(_of_tenant(principal))
    with session.begin():
        rollout = session.scalars(query).first()
        if rollout is None:
            raise not_found("rollout", rollout_id)
        return rollout_out(rollout, utcnow())
