"""`GET /api/v1/detours`: the IO headers agents sent to controller applications, newest
first, with each verdict and how long the application took. Tenant-scoped tokens see only
their tenant's headers."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from lachesis_controller.api.deps import PrincipalDep
from lachesis_controller.detours.service import DetourLog
from lachesis_controller.schemas.detours import DetourOut
from lachesis_controller.validation.problems import problem_responses

router = APIRouter(tags=["detours"])


@router.get("/detours", response_model=list[DetourOut], responses=problem_responses(401))
async def list_detours(
    request: Request,
    principal: PrincipalDep,
    limit: int = Query(100, ge=1, le=1000),
) -> list[DetourOut]:
    store: DetourLog = request.app.state.detours
    rows = store.recent(limit=10**9)
    visible = [r for r in rows if principal.sees_tenant(r["tenant"])] if principal.tenant else rows
    return [DetourOut(**r) for r in visible[:limit]]
