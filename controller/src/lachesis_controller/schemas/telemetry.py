"""Agent telemetry: per-tenant IO rates, miss-ratio curves, device summaries."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field


class MissRatioPoint(BaseModel):
    size_bytes: int = Field(description="Cache size.")
    miss_ratio: float = Field(description="LRU miss ratio of the tenant's 4 KiB block references at that size.")


class CurveOut(BaseModel):
    policy: Literal["lru"]
    algorithm: Literal["shards-fixed-size", "shards-fixed-rate"]
    unit: Literal["bytes"]
    points: list[MissRatioPoint]
    references: int = Field(description="4 KiB block references the curve covers.")


class SeriesPoint(BaseModel):
    at: datetime
    read_iops: float
    write_iops: float
    read_bytes_per_s: float
    write_bytes_per_s: float
    hit_ratio: float | None = Field(description="Flash cache hit ratio; null until caches report hits.")


class TenantTelemetryOut(BaseModel):
    tenant: str
    updated_at: datetime | None = Field(description="When an agent last reported the tenant; null if never.")
    curve: CurveOut | None
    series: list[SeriesPoint] = Field(description="Rates over each reporting interval, oldest first (bounded).")


class SummaryTenant(BaseModel):
    name: str
    iops: float
    hit_ratio: float | None


class SummaryDevice(BaseModel):
    host_id: str
    name: str
    write_bytes_per_s: float | None = Field(description="Null until the device has reported twice.")
    dlwa: float | None = Field(
        description="Media bytes over host bytes written; null if the device does not report media writes."
    )


class TelemetrySummary(BaseModel):
    total_iops: float
    hit_ratio: float | None
    tenants: list[SummaryTenant]
    devices: list[SummaryDevice]
