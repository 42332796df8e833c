"""The two bus messages of controller detours (api-schemas/bus/detour-*.schema.json):
an agent's held IO header in, the application's verdict out."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from lachesis_controller.bus.messages import BusModel, HostId, Name, Op, Timestamp, Traceparent

RequestId = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")]


class IoHeader(BusModel):
    tenant: Name | None
    op: Op
    path: str = Field(min_length=1, max_length=4096)
    offset: int = Field(ge=0)
    length: int = Field(ge=0)


class DetourRequest(BusModel):
    schema_: Literal["lachesis.detour-request/v1"] = Field(alias="schema")
    id: RequestId
    host_id: HostId
    generation: int = Field(ge=0)
    rule: Name
    target: str = Field(min_length=1, max_length=4096)
    hold: bool
    header: IoHeader
    sent_at: Timestamp
    traceparent: Traceparent


class DetourVerdict(BusModel):
    schema_: Literal["lachesis.detour-verdict/v1"] = Field(alias="schema")
    id: RequestId
    host_id: HostId
    verdict: Literal["proceed", "deny"]
    errno: Annotated[int, Field(ge=1, le=4095)] | None
    ttl_ms: Annotated[int, Field(ge=0)] | None
    reason: Annotated[str, Field(max_length=1024)] | None
    decided_at: Timestamp
    traceparent: Traceparent

    @model_validator(mode="after")
    def _errno_only_with_deny(self) -> DetourVerdict:
        if self.verdict == "deny" and (self.errno is None or self.ttl_ms is not None):
            raise ValueError("deny needs an errno and no ttl_ms")
        if self.verdict == "proceed" and self.errno is not None:
            raise ValueError("proceed takes no errno")
        return self
