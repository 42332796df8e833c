"""`/api/v1/apps/two-level`: the two-level caches' split and what each level measures."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class LevelOut(BaseModel):
    """One level of a tenant's two-level cache, summed over the hosts that report it."""

    level: Literal["host", "server"]
    stage: str
    shipped_bytes: int | None = Field(
        description="Size the controller ships (a1 or a2 while a split is in force); null: not shipped to any host."
    )
    installed_bytes: int | None = Field(
        description="What the reporting hosts' engines hold, summed; null: no report yet."
    )
    hits: int | None = Field(description="Block reads the level served, summed over hosts; null: no report yet.")
    misses: int | None
    hit_ratio: float | None = Field(description="hits / (hits + misses); null before the level saw a read.")
    demoted_blocks: int | None = Field(
        default=None,
        description="Host level: clean evicted blocks queued for the server level; server level (exclusive): "
        "demoted blocks taken. Null: none reported (no demotion).",
    )
    demotion_hits: int | None = Field(
        default=None, description="Server level: hits on blocks it holds because level 1 demoted them."
    )
    exclusive: bool = Field(
        default=False, description="Server level: holds what level 1 demotes rather than what it reads."
    )
    hosts: list[str] = Field(description="Hosts reporting the level's stage.")


class TwoLevelTenantOut(BaseModel):
    tenant: str
    alpha: float | None = Field(
        description="Share of the tenant's cache in the host level (a1 / (a1 + a2)); null: no split in force."
    )
    host_bytes: float | None = Field(description="a1, the host level (Moirai's hypervisor cache).")
    server_bytes: float | None = Field(description="a2, the storage server's level.")
    predicted_hit_ratio: float | None = Field(description="U(a1 + a2) from the tenant's curve.")
    predicted_bandwidth: float | None = Field(description="The split's bandwidth (Eq. 5.7), bytes/s.")
    levels: list[LevelOut]


class TwoLevelOut(BaseModel):
    tenants: list[TwoLevelTenantOut]
