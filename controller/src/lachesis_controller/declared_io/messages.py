"""The `declared-io` bus message (api-schemas/bus/declared-io.schema.json): every declared
maintenance job of one host, which the controller keeps in `lachesis:agent:{host}:declared-io`
for the agent to poll. The agent's progress comes back in telemetry (`declared_io`,
`bus.messages.TelemetryDeclaredJob`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from lachesis_controller.bus.messages import BusModel, HostId, Name, Timestamp
from lachesis_controller.validation.bounds import HostPath

MAX_BYTES = 1 << 50
MAX_JOBS = 256
MAX_FILES = 1024
SCHEMA = "lachesis.declared-io/v1"

Bytes = Annotated[int, Field(ge=1, le=MAX_BYTES)]
Pace = Literal["deadline", "budget"]


class FileRange(BusModel):
    path: HostPath
    offset: int = Field(default=0, ge=0, le=MAX_BYTES)
    # None: to the file's end (its size when the agent accepts the job).
    length: Bytes | None = None


class DeclaredJob(BusModel):
    id: Name
    tenant: Name
    files: list[FileRange] = Field(min_length=1, max_length=MAX_FILES)
    deadline: Timestamp
    pace: Pace = "deadline"
    paused: bool = False
    rate_bytes_per_s: Bytes | None = None


class DeclaredIo(BusModel):
    schema_: Literal["lachesis.declared-io/v1"] = Field(alias="schema")
    host_id: HostId
    version: int = Field(ge=1)
    jobs: list[DeclaredJob] = Field(max_length=MAX_JOBS)


def declared_io_key(host_id: str) -> str:
    return f"lachesis:agent:{host_id}:declared-io"
