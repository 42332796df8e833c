"""Flash devices with their host and media bytes (DLWA) per placement handle."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class HandleOut(BaseModel):
    handle: int
    host_bytes_written: int
    media_bytes_written: int | None
    dlwa: float | None


class DevicePoint(BaseModel):
    at: datetime
    write_bytes_per_s: float
    dlwa: float | None = Field(description="Media over host bytes written in the interval ending at `at`.")


class DeviceOut(BaseModel):
    host: str
    name: str
    kind: str
    path: str
    size_bytes: int
    placement_handles: int
    reclaim_unit_bytes: int | None
    host_bytes_written: int | None = Field(description="Since the agent opened the device.")
    media_bytes_written: int | None
    dlwa: float | None = Field(description="Media over host bytes since the agent opened the device.")
    predicted_dlwa: float | None = Field(
        description="The placement broker's prediction for the streams placed on the device."
    )
    predicted_by: str | None = Field(description="simulator or model (the FDP paper's closed form).")
    handles: list[HandleOut]
    series: list[DevicePoint]
