"""Who the bearer token is and what it may do, so a client (the dashboard) can turn off what
the API would refuse and say why, instead of learning it from a 403 after the fact."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from lachesis_controller.api.auth import _route_refusal
from lachesis_controller.api.deps import PrincipalDep
from lachesis_controller.schemas import Role
from lachesis_controller.validation.problems import problem_responses

router = APIRouter(prefix="/whoami", tags=["auth"])


class WhoAmI(BaseModel):
    actor: str = Field(description="How the audit trail names this caller: bootstrap, anonymous or token:<name>.")
    role: Role
    tenant: str | None = Field(description="Set: this token sees and changes only this tenant.")
    write_refusal: str | None = Field(
        description="Why this token may not change tenants, rules or policies, as a 403 would say it; "
        "null when it may (a tenant's own rules and policies, for a tenant-scoped operator)."
    )


@router.get("", response_model=WhoAmI, responses=problem_responses(401), summary="The caller's identity and rights")
async def whoami(principal: PrincipalDep) -> WhoAmI:
    # The middleware's own check on a write, so the answer cannot drift from what it enforces.
    refusal = _route_refusal(principal, "POST", "/api/v1/rules")
    return WhoAmI(actor=principal.actor, role=principal.role, tenant=principal.tenant, write_refusal=refusal)  # type: ignore[arg-type]
