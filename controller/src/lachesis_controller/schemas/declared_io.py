"""Declared maintenance IO jobs (`/api/v1/apps/declared-io`): what a job declares, what a
change may alter, and what is shown back with its progress."""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, Field

from lachesis_controller.bus.messages import HostId, Name
from lachesis_controller.models import JobState, Pace
from lachesis_controller.schemas.base import RequestModel
from lachesis_controller.validation.bounds import HostPath

MAX_BYTES = 1 << 50


class DeclaredFile(RequestModel):
    path: HostPath = Field(
        description="A file under one of the host agent's mounts (mountpoint or backing directory); a directory: every regular file under it."
    )
    offset: int = Field(default=0, ge=0, le=MAX_BYTES)
    length: int | None = Field(default=None, ge=1, le=MAX_BYTES, description="null: to the file's end.")


class DeclaredJobSpec(RequestModel):
    id: Name | None = Field(default=None, description="null: the controller names it.")
    host: HostId = Field(description="The host whose agent reads the files.")
    tenant: Name = Field(description="Whose data it is.")
    files: list[DeclaredFile] = Field(min_length=1, max_length=1024)
    deadline: AwareDatetime = Field(
        strict=False, description="When every declared byte must have been read; in the future."
    )
    pace: Pace = Field(
        default="deadline",
        description="deadline: read at the rate that finishes a tenth of the window before the deadline, leaving the slack to foreground reads; budget: at the agent's whole budget now.",
    )
    paused: bool = Field(
        default=False, description="The agent's dispatcher reads nothing for it; foreground reads still count."
    )
    rate_bytes_per_s: int | None = Field(
        default=None, ge=1, le=MAX_BYTES, description="The job's own cap under the agent's budget."
    )


class DeclaredJobPatch(RequestModel):
    paused: bool | None = None
    pace: Pace | None = None
    rate_bytes_per_s: int | None = Field(default=None, ge=1, le=MAX_BYTES)


class FileChecksum(BaseModel):
    path: str
    offset: int
    length: int
    crc32: int = Field(
        description="CRC-32 of the CRC-32s (little endian) of the range's bytes in each 64 KiB block aligned to file offsets."
    )


class DeclaredJobOut(BaseModel):
    id: str
    host: str
    tenant: str
    files: list[DeclaredFile]
    deadline: datetime
    pace: Pace
    paused: bool
    rate_bytes_per_s: int | None
    source: str | None = Field(description="The scrub stage that declared it; null: REST.")
    state: JobState
    bytes_declared: int | None = Field(description="As the agent sized it; null until it reports.")
    dispatched_bytes: int = Field(description="Read by the agent's dispatcher for this job.")
    foreground_bytes: int = Field(description="Covered by foreground reads through the FUSE switch.")
    shared_bytes: int = Field(description="Covered by the dispatcher's reads for another job.")
    covered_bytes: int
    error: str | None
    checksums: list[FileChecksum] | None
    created_at: datetime
    created_by: str
    reported_at: datetime | None
    finished_at: datetime | None
