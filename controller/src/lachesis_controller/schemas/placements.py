"""FDP placement: streams to placement handles per device."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from lachesis_controller.bus.messages import EnginePart, Name
from lachesis_controller.models import PredictedBy
from lachesis_controller.schemas.base import RequestModel


class StreamIn(RequestModel):
    tenant: Name
    part: EnginePart = Field(
        description="Cache engine part: loc, klog, fwlog, fwsets, fwcold write logs; kset, set-assoc rewrite at random."
    )
    space: float = Field(allow_inf_nan=False, ge=1e-6, le=1, description="Share of the device's logical space.")
    writes: float = Field(allow_inf_nan=False, ge=0, le=1, description="Share of the device's host writes.")
    trimmed: bool = Field(default=False, description="A log that deallocates each segment before rewriting it.")


class PlacementRequest(RequestModel):
    streams: list[StreamIn] = Field(min_length=1, max_length=256)
    overprovisioning: float = Field(
        allow_inf_nan=False, default=0.07, gt=0, le=1, description="The device's spare share of flash."
    )
    reclaim_units: int = Field(default=1024, ge=64, le=4096, description="Reclaim units the simulator models.")
    simulate: bool = Field(default=True, description="Predict with the simulated SSD (else the closed form).")


class StreamOut(BaseModel):
    tenant: str
    part: str
    space: float
    writes: float
    trimmed: bool
    handle: int


class SharedOut(BaseModel):
    handle: int
    streams: list[str]
    reason: str


class DevicePlacementOut(BaseModel):
    host_id: str
    device: str
    handles: int
    overprovisioning: float
    streams: list[StreamOut]
    shared: list[SharedOut] = Field(description="Handles more than one stream writes with, and why.")
    predicted_dlwa: float
    predicted_by: PredictedBy
    model_dlwa: float = Field(description="The FDP paper's closed form for the same placement.")
    warnings: list[str]
    computed_at: datetime
