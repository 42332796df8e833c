"""Policy documents applied as a whole."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class PolicyResult(BaseModel):
    name: str
    version: int = Field(description="Version this document has (dry run: would have) once applied.")
    dry_run: bool
    rollout_id: str | None = Field(description="Rollout shipping the change; null on a dry run.")
    diff: dict[str, Any] = Field(
        description="tenants, rules and stages added/removed/changed overall, and per host under hosts."
    )
    warnings: list[dict[str, Any]] = Field(description="Verifier warnings (check, rules, message).")


class PolicyOut(BaseModel):
    name: str
    version: int
    created_at: datetime
    created_by: str
    rollout_id: str | None
    tenants: list[str]
    document: str = Field(description="The document as it was sent.")
    compiled: dict[str, Any] = Field(description="The tenants, stages and rules it compiled to.")
