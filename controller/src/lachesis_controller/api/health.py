"""Liveness, readiness and metrics: unversioned and never behind the token, so probes and
scrapers need no credentials."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from lachesis_controller.bus.client import REDIS_DOWN
from lachesis_controller.schemas.health import Health, Readiness
from lachesis_controller.validation.problems import problem_response, problem_responses

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/livez", response_model=Health, summary="The process's event loop answers")
async def livez() -> Health:
    # Served on the event loop itself, so an answer means the loop is not stuck: a liveness
    # probe restarts a controller whose loop blocks, not one whose database is down (that is
    # /readyz's business).
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="The database and Redis both answer; says whether this replica leads",
    responses=problem_responses(503),
)
async def readyz(request: Request) -> Response:
    checks: dict[str, str] = {}
    try:
        with request.app.state.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:  # any driver error means "not ready", whatever its class
        checks["database"] = f"unavailable: {type(exc).__name__}"
    try:
        await asyncio.wait_for(request.app.state.bus.redis.ping(), timeout=2.0)
        checks["redis"] = "ok"
    except REDIS_DOWN as exc:
        checks["redis"] = f"unavailable: {type(exc).__name__}: {exc}"
    down = [name for name, state in checks.items() if state != "ok"]
    leader = request.app.state.leadership.leading
    if down:
        return problem_response(
            request,
            503,
            "not ready: " + "; ".join(f"{name} {checks[name]}" for name in down),
            kind="not-ready",
            extra={"checks": checks, "leader": leader},
        )
    return JSONResponse(Readiness(status="ok", checks=checks, leader=leader).model_dump())


@router.get("/metrics", include_in_schema=False)
async def metrics() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
