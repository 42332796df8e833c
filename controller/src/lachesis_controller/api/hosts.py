"""Hosts: their enrolment, which gives an agent its own Redis user and streams
(bus.agent_acl_rules) before it first registers; the records their registrations create; and
their decommissioning (DELETE), which takes all of that away again."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from sqlalchemy import select

from lachesis_controller.api.deps import BusDep, PrincipalDep, ReadSessionDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import ADMIN, forbidden
from lachesis_controller.bus.client import REDIS_DOWN, agent_url, agent_user, heartbeat_time
from lachesis_controller.bus.messages import HOST_ID_PATTERN, Capabilities, Heartbeat
from lachesis_controller.db import utcnow
from lachesis_controller.models import AgentCredential, Host
from lachesis_controller.rollout import decommission
from lachesis_controller.schemas.hosts import EnrollmentOut, HostOut
from lachesis_controller.validation.problems import ProblemError, not_found, problem_responses

router = APIRouter(prefix="/hosts", tags=["hosts"])


def host_out(host: Host, beats: dict[str, Heartbeat | None] | None, now: datetime) -> HostOut:
    beat = None if beats is None else beats.get(host.id)
    return HostOut(
        id=host.id,
        agent_version=host.agent_version,
        capabilities=Capabilities.model_validate(host.capabilities),
        enrolled_at=host.enrolled_at,
        registered_at=host.registered_at,
        # The heartbeat just read, if newer than what the reconciler recorded: a read answers
        # with it but does not write it (a write per GET serialised concurrent readers on the
        # database's commits; the reconciler records heartbeats every pass).
        last_seen=host.last_seen if beat is None else max(host.last_seen, heartbeat_time(beat, now)),
        alive=None if beats is None else beat is not None,
        desired_generation=host.desired_generation,
        acked_generation=host.acked_generation,
    )


@router.get("", response_model=list[HostOut], summary="Hosts whose agents registered")
async def list_hosts(
    request: Request, response: Response, session: ReadSessionDep, bus: BusDep, page: PageDep
) -> list[HostOut]:
    with session.begin():
        hosts = session.scalars(select(Host).order_by(Host.id)).all()
    beats = await bus.heartbeats([h.id for h in hosts])
    now = utcnow()
    return page.cut([host_out(h, beats, now) for h in hosts], request, response)


@router.get("/{host_id}", response_model=HostOut, responses=problem_responses(404))
async def get_host(host_id: str, session: ReadSessionDep, bus: BusDep) -> HostOut:
    with session.begin():
        host = session.get(Host, host_id)
    if host is None:
        raise not_found("host", host_id)
    beats = await bus.heartbeats([host_id])
    return host_out(host, beats, utcnow())


HostIdPath = Annotated[str, Path(pattern=HOST_ID_PATTERN, description="Host id the agent will run as.")]


@router.post(
    "/{host_id}/enrollment",
    status_code=201,
    response_model=EnrollmentOut,
    responses=problem_responses(401, 403, 422, 503),
    summary="Enrol an agent: create (or replace) its Redis user and return its bus URL",
)
async def enroll_host(
    host_id: HostIdPath, session: SessionDep, bus: BusDep, settings: SettingsDep, principal: PrincipalDep
) -> EnrollmentOut:
    if principal.role != ADMIN:
        raise forbidden(principal, f"enrol host {host_id!r} (admin only: it hands out bus credentials)")
    secret = secrets.token_urlsafe(32)
    digest = hashlib.sha256(secret.encode()).hexdigest()
    # Redis first: if it refuses, nothing is recorded and the old secret (if any) stays valid.
    try:
        await bus.set_agent_user(host_id, digest)
    except REDIS_DOWN as exc:
        raise ProblemError(503, f"Redis did not take the user of {host_id}: {exc}", kind="unavailable") from None
    now = utcnow()
    with session.begin():
        credential = session.get(AgentCredential, host_id)
        before = (
            None
            if credential is None
            else {"redis_user": credential.redis_user, "created_at": credential.created_at.isoformat()}
        )
        if credential is None:
            credential = AgentCredential(host_id=host_id, redis_user=agent_user(host_id))
            session.add(credential)
        credential.secret_sha256, credential.created_at, credential.created_by = digest, now, principal.actor
        audit.record(
            session,
            principal,
            "host.enroll",
            kind="host",
            name=host_id,
            tenant=None,
            before=before,
            after={"redis_user": credential.redis_user, "created_at": now.isoformat()},
            rollout_id=None,
        )
    bus.add_enrolled(host_id)
    return EnrollmentOut(
        host_id=host_id,
        redis_user=agent_user(host_id),
        redis_url=agent_url(settings.redis_url, host_id, secret),
        created_at=now,
    )


@router.delete(
    "/{host_id}",
    status_code=204,
    responses=problem_responses(401, 403, 404, 422, 503),
    summary="Decommission a host: its record, credential, Redis user, keys and streams",
    description="Pending rollouts stop waiting for the host: each is decided by the hosts "
    "that remain (a two-phase rollout whose other hosts drained goes on to install).",
)
async def delete_host(
    host_id: Annotated[str, Path(pattern=HOST_ID_PATTERN)],
    request: Request,
    session: SessionDep,
    bus: BusDep,
    principal: PrincipalDep,
) -> Response:
    if principal.role != ADMIN:
        raise forbidden(principal, f"delete host {host_id!r} (admin only)")
    with session.begin():
        if session.get(Host, host_id) is None and session.get(AgentCredential, host_id) is None:
            raise not_found("host", host_id)
    # Under the bus lock, so the reconciler cannot publish the host's desired state again
    # between the keys going and the rows going. Its streams stop being read first; Redis
    # before the database: if Redis fails nothing is deleted, and if the database then
    # failed, the reconciler would recreate the user from the credential still there.
    async with bus.lock:
        bus.remove_enrolled(host_id)
        try:
            await bus.forget_host(host_id)
        except REDIS_DOWN as exc:
            bus.add_enrolled(host_id)
            raise ProblemError(503, f"Redis did not delete the keys of {host_id}: {exc}", kind="unavailable") from None
        with session.begin():
            before, publications = decommission.delete_host(session, host_id, utcnow())
            audit.record(
                session,
                principal,
                "host.delete",
                kind="host",
                name=host_id,
                tenant=None,
                before=before,
                after=None,
                rollout_id=None,
            )
    request.app.state.telemetry.forget_host(host_id)
    await bus.publish(publications, source="rollout")
    return Response(status_code=204)
