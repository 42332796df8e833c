"""Controller detours and their verdicts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


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
