"""The audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class AuditEventOut(BaseModel):
    id: int
    at: datetime
    actor: str = Field(description="bootstrap, anonymous (auth off) or token:<name>.")
    action: str = Field(description="<kind>.<verb>, e.g. rule.update.")
    resource_kind: str
    resource_name: str
    tenant: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    rollout_id: str | None
