"""Who the bearer token is and what it may do, so a client (the dashboard) can turn off what
the API would refuse and say why, instead of learning it from a 403 after the fact."""

from __future__ import annotations

from fastapi import APIRouter

from lachesis_controller.api.auth import _route_refusal
from lachesis_controller.api.deps import PrincipalDep
from lachesis_controller.schemas.tokens import WhoAmI
from lachesis_controller.validation.problems import problem_responses

router = APIRouter(prefix="/whoami", tags=["auth"])


@router.get("", response_model=WhoAmI, responses=problem_responses(401), summary="The caller's identity and rights")
async def whoami(principal: PrincipalDep) -> WhoAmI:
    # The middleware's own check on a write, so the answer cannot drift from what it enforces.
    refusal = _route_refusal(principal, "POST", "/api/v1/rules")
    return WhoAmI(actor=principal.actor, role=principal.role, tenant=principal.tenant, write_refusal=refusal)
