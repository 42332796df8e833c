"""Dependencies the route handlers share: the session, the bus, the settings, the caller."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from lachesis_controller.auth.authz import Principal
from lachesis_controller.bus.client import Bus
from lachesis_controller.config import Settings


# Async on purpose: FastAPI runs sync dependencies in a worker thread, and every database
# call of the controller is meant to happen on the event loop thread (see db.py).
async def _session(request: Request) -> AsyncIterator[Session]:
    with request.app.state.sessions() as session:
        yield session


async def _read_session(request: Request) -> AsyncIterator[Session]:
    # The same sessions on db.read_bind: a handler given one must not write.
    with request.app.state.sessions(bind=request.app.state.read_bind) as session:
        yield session


async def _bus(request: Request) -> Bus:
    bus: Bus = request.app.state.bus
    return bus


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SessionDep = Annotated[Session, Depends(_session)]
ReadSessionDep = Annotated[Session, Depends(_read_session)]
BusDep = Annotated[Bus, Depends(_bus)]
SettingsDep = Annotated[Settings, Depends(_settings)]


async def _principal(request: Request) -> Principal:
    # Set by BearerAuthMiddleware for every /api/v1 request.
    principal: Principal = request.state.principal
    return principal


PrincipalDep = Annotated[Principal, Depends(_principal)]
