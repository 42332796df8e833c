"""Stages (cache, rate limit, ...) declared by policies and the API, per host."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from lachesis_controller.bus.messages import CacheEngine
from lachesis_controller.schemas.base import RequestModel


class StagePointOut(BaseModel):
    at: datetime
    size_bytes: int | None = Field(description="The size desired state asked for then.")
    installed_bytes: int | None
    hit_ratio: float | None = Field(description="Hits over block reads in the interval ending at `at`.")


class StagePartOut(BaseModel):
    """One engine part of a flash cache stage as the host reports it."""

    part: str = Field(description="kangaroo or fairywren (small objects), or loc (the log, large objects).")
    handles: list[int] = Field(
        description="The placement handles the part writes with (kangaroo: KLog, KSet; fairywren: FwLog, hot subsets, cold subsets)."
    )
    objects: int
    gets: int
    hits: int
    flash_bytes_written: int
    dram_bytes: int | None = Field(
        default=None, description="DRAM of the part's index and buffers; null where the host does not report it."
    )


class StageHost(BaseModel):
    """One host's instance of a stage: what desired state asks for and what the agent reports."""

    host_id: str
    allocated_bytes: int | None = Field(
        description="Cache size shipped to the host (the allocation while one is in force)."
    )
    reported_at: datetime | None
    installed_bytes: int | None = Field(description="Size the engine holds now.")
    hits: int | None
    misses: int | None
    hit_ratio: float | None = Field(description="Hits over block reads since the stage was built.")
    bytes_read_hit: int | None
    bytes_read_miss: int | None
    bytes_written: int | None
    evictions: int | None
    writebacks: int | None
    dirty_bytes: int | None
    demoted_blocks: int | None = Field(
        default=None,
        description="Two-level caches with demotion: a level-1 stage's evicted blocks queued for the server level, a server-level stage's demoted blocks taken; null: none reported.",
    )
    demotion_hits: int | None = Field(
        default=None, description="A server-level stage's hits on blocks it holds because level 1 demoted them."
    )
    front_end: str | None = Field(
        default=None,
        description="The data path running the stage: fs (the FUSE switch) or kv (the key-value front end); null before a report.",
    )
    parts: list[StagePartOut] | None = Field(
        default=None,
        description="A flash cache's engine parts with their handles, where the host reports them (the key-value front end).",
    )
    series: list[StagePointOut] = Field(description="Per reporting interval, oldest first (bounded).")


class StageOut(BaseModel):
    name: str
    kind: str
    owner: str | None
    source: str = Field(description="api, or policy/NAME for a stage a policy declares.")
    declared: dict[str, Any] = Field(description="The declaration, as given (defaults filled in).")
    hosts: list[StageHost]


class StageChange(StageOut):
    rollout_id: str


class StagePatch(RequestModel):
    """Configure a stage: the fields to change (Moirai's configure; resize with size_bytes)."""

    size_bytes: int | None = Field(default=None, ge=1 << 20, le=1 << 50)
    write_mode: Literal["through", "back", "around"] | None = None
    eviction: Literal["lru", "fifo", "mrc"] | None = None
    engine: CacheEngine | None = None
    max_dirty_bytes: int | None = Field(default=None, ge=4096, le=1 << 50)
    max_bandwidth_bytes_per_s: int | None = Field(default=None, ge=1, le=1 << 50)
    max_iops: int | None = Field(default=None, ge=1, le=100_000_000)
