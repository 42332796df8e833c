"""`GET /api/v1/detours`: the IO headers agents sent to controller applications, newest
first, with each verdict and how long the application took. Tenant-scoped tokens see only
their tenant's headers."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from lachesis_controller.api.deps import PrincipalDep
from lachesis_controller.detours.service import DetourLog
from lachesis_controller.validation.problems import problem_responses

router = APIRouter(tags=["detours"])


class DetourOut(BaseModel):
    id: str = Field(description="The agent's request id.")
    host_id: str
    rule: str
    target: str = Field(description="The controller application.")
    hold: bool = Field(description="The IO waited for the verdict (false: a copy).")
    tenant: str | None
    op: Literal["read", "write", "create", "delete"]
    path: str
    offset: int
    length: int
    sent_at: str
    verdict: Literal["proceed", "deny"] | None = Field(description="null for copies.")
    errno: int | None
    ttl_ms: int | None
    reason: str | None
    latency_ms: float = Field(description="From the request's arrival to its verdict being sent.")
    traceparent: str | None


@router.get("/detours", response_model=list[DetourOut], responses=problem_responses(401))
async def list_detours(
    request: Request, principal: PrincipalDep, limit: int = Query(100, ge=1, le=1000),
) -> list[DetourOut]:
    store: DetourLog = request.app.state.detours
    rows = store.recent(limit=10**9)
    visible = [r for r in rows if principal.sees_tenant(r["tenant"])] if principal.tenant else rows
    return [DetourOut(**r) for r in visible[:limit]]
