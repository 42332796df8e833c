"""API tokens and the caller's identity."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from lachesis_controller.bus.messages import Name
from lachesis_controller.models import Role
from lachesis_controller.schemas.base import RequestModel


class TokenSpec(RequestModel):
    name: Name = Field(description="Unique label of the token, shown in the audit trail as token:<name>.")
    role: Role
    tenant: Name | None = Field(
        default=None,
        description="Set: the token sees and changes only this tenant (roles operator and viewer only).",
    )


class TokenOut(BaseModel):
    id: str
    name: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The bearer secret. Shown only in this response; the controller keeps a hash.")


class WhoAmI(BaseModel):
    actor: str = Field(description="How the audit trail names this caller: bootstrap, anonymous or token:<name>.")
    role: Role
    tenant: str | None = Field(description="Set: this token sees and changes only this tenant.")
    write_refusal: str | None = Field(
        description="Why this token may not change tenants, rules or policies, as a 403 would say it; "
        "null when it may (a tenant's own rules and policies, for a tenant-scoped operator)."
    )
