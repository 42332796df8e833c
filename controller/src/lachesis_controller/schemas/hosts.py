"""Hosts (agents) and their enrollment."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from lachesis_controller.bus.messages import Capabilities


class HostOut(BaseModel):
    id: str
    agent_version: str
    capabilities: Capabilities
    enrolled_at: datetime = Field(description="First registration.")
    registered_at: datetime = Field(description="Latest registration (agent start or reconnect).")
    last_seen: datetime
    alive: bool | None = Field(description="Whether the agent's heartbeat key exists; null when Redis cannot be asked.")
    desired_generation: int
    acked_generation: int


class EnrollmentOut(BaseModel):
    host_id: str
    redis_user: str
    redis_url: str = Field(
        description="The bus URL for the agent (`lachesis-agent run --redis-url`), with its "
        "user and secret. Shown once: the controller keeps only the secret's SHA-256."
    )
    created_at: datetime
