"""Switch operations an orchestrator needs directly: quiesce, drain and resume IO, scoped to
hosts and/or a flow (an IO header match).

Each quiesce is a held two-phase rollout (rollouts.HOLD): the hosts get a new generation
of the state they already run with phase quiesce for the flow, ack once its in-flight IO
has drained, and stay quiesced until a resume installs that generation (nothing changes
but the flow flows again). Drain is a quiesce that answers once every host has drained.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.rollouts import rollout_out
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import Principal, require_tenant
from lachesis_controller.db import utcnow
from lachesis_controller.models import Host, Rollout
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas.rollouts import RolloutOut
from lachesis_controller.schemas.switch import ResumeOut, Scope
from lachesis_controller.validation.problems import ProblemError, invalid, not_found, problem_responses

router = APIRouter(prefix="/switch", tags=["switch"])

POLL_S = 0.05


def _flow(scope: Scope) -> dict[str, Any]:
    return scope.flow.dump() if scope.flow is not None else {}


def _hosts(session: Session, scope: Scope) -> list[str]:
    if scope.hosts is None:
        hosts = rollouts.all_host_ids(session)
        if not hosts:
            raise invalid([("hosts", "no host has registered yet")])
        return hosts
    errors = [
        (f"hosts[{i}]", f"no host named {h!r} has registered")
        for i, h in enumerate(scope.hosts)
        if session.get(Host, h) is None
    ]
    if errors:
        raise invalid(errors)
    if not scope.hosts:
        raise invalid([("hosts", "empty: name at least one host, or null for every host")])
    return sorted(set(scope.hosts))


def _authorise(principal: Principal, scope: Scope, what: str) -> None:
    # A tenant's token may act only on its own tenant's flow, on any host.
    require_tenant(principal, scope.flow.tenant if scope.flow is not None else None, what)


async def _quiesce(
    scope: Scope,
    response: Response,
    session: Session,
    bus: Any,
    settings: Any,
    principal: Principal,
    action: str,
) -> str:
    _authorise(principal, scope, f"{action} IO")
    flow = _flow(scope)
    with session.begin():
        hosts = _hosts(session, scope)
        rollout, publications = rollouts.start_rollout(
            session,
            cause=f"switch {action} of {json.dumps(flow, separators=(',', ':'))}",
            trigger="switch",
            host_ids=hosts,
            now=utcnow(),
            timeout_s=settings.rollout_timeout_s,
            traceparent=current_traceparent(),
            hold_flows=[flow],
        )
        audit.record(
            session,
            principal,
            f"switch.{action}",
            kind="switch",
            name=rollout.id,
            tenant=scope.flow.tenant if scope.flow is not None else None,
            before=None,
            after={"hosts": hosts, "flow": flow},
            rollout_id=rollout.id,
        )
        rollout_id = rollout.id
    await ship(bus, publications, response, rollout_id)
    return rollout_id


def _read(session: Session, rollout_id: str) -> RolloutOut:
    session.expire_all()  # acks land through other sessions
    with session.begin():
        rollout = session.get(Rollout, rollout_id)
        if rollout is None:  # pragma: no cover - created above, never deleted
            raise not_found("rollout", rollout_id)
        return rollout_out(rollout, utcnow())


@router.post(
    "/quiesce",
    status_code=202,
    response_model=RolloutOut,
    responses=problem_responses(400, 401, 403, 415, 422),
    summary="Stop admitting new IO of a flow at hosts until resumed (answers at once)",
)
async def quiesce(
    scope: Scope,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> RolloutOut:
    rollout_id = await _quiesce(scope, response, session, bus, settings, principal, "quiesce")
    return _read(session, rollout_id)


@router.post(
    "/drain",
    response_model=RolloutOut,
    responses=problem_responses(400, 401, 403, 415, 422, 502, 504),
    summary="Quiesce a flow and answer once its in-flight IO has finished at every host",
)
async def drain(
    scope: Scope,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> RolloutOut:
    rollout_id = await _quiesce(scope, response, session, bus, settings, principal, "drain")
    deadline = asyncio.get_running_loop().time() + settings.rollout_timeout_s
    while True:
        out = _read(session, rollout_id)
        if out.state != rollouts.PENDING:
            raise ProblemError(
                502, f"drain failed: {out.reason}", kind="drain-failed", extra={"rollout_id": rollout_id}
            )
        if all(t.phase == rollouts.DRAINED for t in out.targets if t.status == rollouts.PENDING):
            return out
        if asyncio.get_running_loop().time() >= deadline:
            waiting = ", ".join(t.host_id for t in out.targets if t.phase == rollouts.QUIESCE)
            raise ProblemError(
                504,
                f"not drained within {settings.rollout_timeout_s} s at: {waiting}",
                kind="drain-timeout",
                extra={"rollout_id": rollout_id},
            )
        await asyncio.sleep(POLL_S)


@router.post(
    "/resume",
    response_model=ResumeOut,
    responses=problem_responses(400, 401, 403, 409, 415, 422),
    summary="Resume IO quiesced by switch quiesce/drain at hosts (and of a flow, if given)",
)
async def resume(
    scope: Scope, response: Response, session: SessionDep, bus: BusDep, principal: PrincipalDep
) -> ResumeOut:
    _authorise(principal, scope, "resume IO")
    flow = None if scope.flow is None else _flow(scope)
    wanted = None if scope.hosts is None else set(scope.hosts)
    publications: list[rollouts.Publication] = []
    resumed: list[str] = []
    with session.begin():
        held = session.scalars(
            select(Rollout)
            .where(Rollout.state == rollouts.PENDING, Rollout.phase == rollouts.HOLD)
            .order_by(Rollout.created_at)
        ).all()
        for rollout in held:
            targets = {t.host_id for t in rollout.targets}
            if wanted is not None and not targets & wanted:
                continue
            if flow is not None and not any(t.quiesce == [flow] for t in rollout.targets):
                continue
            publications += rollouts.resume(rollout)
            resumed.append(rollout.id)
            audit.record(
                session,
                principal,
                "switch.resume",
                kind="switch",
                name=rollout.id,
                tenant=scope.flow.tenant if scope.flow is not None else None,
                before=None,
                after={"hosts": sorted(targets)},
                rollout_id=rollout.id,
            )
        if not resumed:
            raise ProblemError(409, "nothing is quiesced in that scope", kind="conflict")
    await bus.publish(publications, source="api")
    return ResumeOut(resumed=resumed)
