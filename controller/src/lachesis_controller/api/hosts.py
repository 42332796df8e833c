"""Hosts: created by agents registering on the bus, read-only here."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from sqlalchemy import select

from ..db import utcnow
from ..messages import Capabilities, Heartbeat
from ..models import Host
from ..presence import record_heartbeats
from ..problems import not_found, problem_responses
from ..schemas import HostOut
from .deps import BusDep, SessionDep
from .pagination import PageDep

router = APIRouter(prefix="/hosts", tags=["hosts"])


def host_out(host: Host, beats: dict[str, Heartbeat | None] | None) -> HostOut:
    return HostOut(
        id=host.id,
        agent_version=host.agent_version,
        capabilities=Capabilities.model_validate(host.capabilities),
        enrolled_at=host.enrolled_at,
        registered_at=host.registered_at,
        last_seen=host.last_seen,
        alive=None if beats is None else beats.get(host.id) is not None,
        desired_generation=host.desired_generation,
        acked_generation=host.acked_generation,
    )


@router.get("", response_model=list[HostOut], summary="Hosts whose agents registered")
async def list_hosts(
    request: Request, response: Response, session: SessionDep, bus: BusDep, page: PageDep
) -> list[HostOut]:
    with session.begin():
        ids = list(session.scalars(select(Host.id).order_by(Host.id)))
    beats = await bus.heartbeats(ids)
    with session.begin():
        if beats:
            record_heartbeats(session, beats, utcnow())
        hosts = session.scalars(select(Host).order_by(Host.id)).all()
        return page.cut([host_out(h, beats) for h in hosts], request, response)


@router.get("/{host_id}", response_model=HostOut, responses=problem_responses(404))
async def get_host(host_id: str, session: SessionDep, bus: BusDep) -> HostOut:
    with session.begin():
        if session.get(Host, host_id) is None:
            raise not_found("host", host_id)
    beats = await bus.heartbeats([host_id])
    with session.begin():
        if beats:
            record_heartbeats(session, beats, utcnow())
        host = session.get(Host, host_id)
        if host is None:
            raise not_found("host", host_id)
        return host_out(host, beats)
