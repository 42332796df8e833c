"""Cache allocation: proposals from miss-ratio curves, guarantees, the allocations in force."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator

from lachesis_controller.bus.messages import Name
from lachesis_controller.models import AllocationState
from lachesis_controller.schemas.base import RequestModel
from lachesis_controller.validation.bounds import MAX_TENANTS

# Bytes and bytes/s: an exabyte is beyond any cache, and keeps the arithmetic finite.
MAX_QUANTITY = 1e18


class CurveIn(RequestModel):
    sizes: list[Annotated[float, Field(ge=0, le=MAX_QUANTITY, allow_inf_nan=False)]] = Field(
        min_length=1, max_length=100_000, description="Cache sizes in bytes, increasing."
    )
    miss_ratios: list[float] = Field(min_length=1, max_length=100_000, description="Miss ratio at each size.")
    weight: float = Field(
        allow_inf_nan=False, default=1.0, ge=0, le=1e12, description="Requests per second: the weight of its hit ratio."
    )


class MinHitRatioIn(RequestModel):
    kind: Literal["min_hit_ratio"]
    ratio: float = Field(allow_inf_nan=False, gt=0, le=1)


class BandwidthIn(RequestModel):
    """Turned into a minimum hit ratio by Moirai's Eq. 5.2."""

    kind: Literal["bandwidth"]
    sla: float = Field(
        allow_inf_nan=False, gt=0, le=MAX_QUANTITY, description="Bandwidth the tenant must get, bytes/s."
    )
    storage: float = Field(
        allow_inf_nan=False, gt=0, le=MAX_QUANTITY, description="Bandwidth of the storage back end, bytes/s."
    )
    memory: float = Field(allow_inf_nan=False, gt=0, le=MAX_QUANTITY, description="Bandwidth of the cache, bytes/s.")

    @model_validator(mode="after")
    def _ordered(self) -> BandwidthIn:
        if self.memory <= self.storage:
            raise ValueError("memory bandwidth must exceed storage bandwidth")
        return self


class FixedSizeIn(RequestModel):
    kind: Literal["fixed_size"]
    size_bytes: float = Field(allow_inf_nan=False, ge=0, le=MAX_QUANTITY)


GuaranteeIn = Annotated[MinHitRatioIn | BandwidthIn | FixedSizeIn, Field(discriminator="kind")]


class ProposalRequest(RequestModel):
    capacity_bytes: float = Field(allow_inf_nan=False, ge=1, le=MAX_QUANTITY)
    epsilon_bytes: float | None = Field(
        allow_inf_nan=False, default=None, gt=0, description="Increment; default 0.001 × capacity."
    )
    method: Literal["optimal", "waterfill"] = "optimal"
    curves: dict[Name, CurveIn] | None = Field(
        default=None,
        max_length=MAX_TENANTS,
        description="Curves to use (and keep) instead of the stored ones, by tenant.",
    )
    guarantees: dict[Name, GuaranteeIn] | None = Field(
        default=None,
        max_length=MAX_TENANTS,
        description="Guarantees for this proposal only, overriding the stored ones.",
    )
    idle: list[Name] = Field(
        default_factory=list, max_length=MAX_TENANTS, description="Tenants whose space is reclaimed."
    )


class AllocationCurvePoint(BaseModel):
    size_bytes: float
    miss_ratio: float
    index: int = Field(description="The measured point at or below this size.")


class TenantShare(BaseModel):
    size_bytes: float
    reserved_bytes: float
    hit_ratio: float
    weight: float
    idle: bool
    curve_point: AllocationCurvePoint


class CurveCheckOut(BaseModel):
    """The tenant's curve against its cache stage's measured hit ratio (allocation/curve_check.py)."""

    installed_bytes: int = Field(description="The size the stage is installed at, where the curve is read.")
    measured_hit_ratio: float | None = Field(
        description="Hits over the references counted at this size after the warm-up; null until enough."
    )
    predicted_hit_ratio: float | None = Field(description="1 - the curve's miss ratio at installed_bytes.")
    references: int = Field(description="References measured (after the warm-up).")
    off: bool | None = Field(
        description="The curve is off the measurement by more than the tolerance; null: no verdict yet."
    )
    reason: str


class TenantAllocationOut(BaseModel):
    tenant: str
    current: TenantShare | None
    proposed: TenantShare | None
    guarantee: GuaranteeIn | None
    curve_check: CurveCheckOut | None = Field(
        default=None, description="Is the tenant's curve right? Null: it has no reporting cache stage."
    )


class AllocationSummary(BaseModel):
    state: AllocationState
    capacity_bytes: float
    epsilon_bytes: float
    method: str
    utility: float = Field(description="Σ weight × hit ratio.")
    upper_bound: float = Field(description="No allocation of the same curves does better.")
    optimal: bool
    computed_at: datetime
    computed_by: str


class ProposalOut(BaseModel):
    summary: AllocationSummary
    tenants: dict[str, TenantShare]
    gain: float | None = Field(description="Utility over the current allocation's under the same curves.")


class Summaries(BaseModel):
    current: AllocationSummary | None
    proposed: AllocationSummary | None


class GuaranteeOut(BaseModel):
    tenant: str
    guarantee: GuaranteeIn


class GuaranteeBody(RequestModel):
    guarantee: GuaranteeIn
