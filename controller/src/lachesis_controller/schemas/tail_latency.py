"""`GET /api/v1/apps/tail-latency` bodies."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TailLatencyStageOut(BaseModel):
    stage: str
    tenant: str
    endpoint: str = Field(description="servers[0]: the owner's endpoint, tcp://HOST:PORT/dir.")
    alpha: float
    state: str = Field(description="normal, forwarding or reclaiming.")
    slow: bool | None = Field(description="The agent's own flag for the endpoint; null before any report.")
    requests: int | None = Field(description="Requests the endpoint answered, as last reported.")
    recent_us: float | None
    mean_us: float | None
    baseline_us: float | None = Field(description="The long-run mean when forwarding began.")
    forwarded_to: str | None
    forwards: int = Field(description="Times the owner's writes were forwarded.")
    reclaims: int
    forwarded_bytes: int | None = Field(description="Bytes written into the forwarding log (all hosts).")
    held_bytes: int | None = Field(description="Bytes the log still holds.")
    reclaimed_bytes: int | None = Field(description="Bytes copied back to the endpoint.")
    reclaim_progress: float | None = Field(description="reclaimed / (reclaimed + held); null without a log.")


class TailLatencyOut(BaseModel):
    stages: list[TailLatencyStageOut]
