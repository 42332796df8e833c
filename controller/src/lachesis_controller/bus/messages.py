"""Pydantic models of the Redis bus messages (api-schemas/bus/*.schema.json).

The JSON Schemas are the contract; these models mirror them field for field so a message
that one accepts the other accepts too (tests/test_bus_contract.py holds them together).
Models are strict and forbid unknown fields because the schemas say
`additionalProperties: false` and the agent (serde) is just as picky.

Dump with `dump()` (by alias, unset fields left out) so an optional field that was absent
stays absent: the fixtures must round-trip unchanged.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from lachesis_controller.validation.bounds import HostPath

HOST_ID_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
TRACEPARENT_PATTERN = r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$"

# RFC 3339 date-time; fromisoformat alone would also take a date without time or a naive time.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _check_timestamp(value: str) -> str:
    if not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with a time zone, e.g. 2026-11-21T10:00:00Z")
    try:
        datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    except ValueError as exc:
        raise ValueError(f"not a valid date-time: {exc}") from None
    return value


HostId = Annotated[str, Field(pattern=HOST_ID_PATTERN, description="Stable host identifier.")]
Name = Annotated[str, Field(pattern=NAME_PATTERN, description="Lower-case DNS-label-like name of a tenant or rule.")]
# Kept as the string that was sent: re-rendering a datetime would change "10:01:00.250Z"
# into "10:01:00.250000Z" and break the byte-for-byte round trip agents rely on.
Timestamp = Annotated[str, AfterValidator(_check_timestamp)]
Traceparent = Annotated[str | None, Field(pattern=TRACEPARENT_PATTERN)]
RolloutId = Annotated[str | None, Field(min_length=1, max_length=64)]
Op = Literal["read", "write", "create", "delete"]
Phase = Literal["quiesce", "install"]

_T = TypeVar("_T")
# An optional field the schemas allow no null in: `x: Absent[int] = Field(default=None)` is
# None when the message left it out, and validates as `int` (an explicit null is refused, the
# JSON Schema has no null). The type checker sees `int | None`, which it is once parsed.
if TYPE_CHECKING:
    Absent: TypeAlias = _T | None
else:
    Absent = Annotated[_T, "absent: None only as the unset default"]


class BusModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


ClassifierKind = Literal["cgroup", "uid", "process", "path_prefix", "key_prefix"]


class Classifier(BusModel):
    kind: ClassifierKind
    value: str = Field(min_length=1, max_length=4096)


class Tenant(BusModel):
    name: Name
    classifiers: list[Classifier]


class ByteRange(BusModel):
    """Byte range [start, end) of an IO; a rule matches IO overlapping it."""

    start: int = Field(ge=0)
    end: int = Field(ge=1)

    @field_validator("end")
    @classmethod
    def _end_after_start(cls, end: int, info: Any) -> int:
        start = info.data.get("start")
        if start is not None and end <= start:
            raise ValueError(f"end ({end}) must be greater than start ({start})")
        return end


def _ops_schema(schema: dict[str, Any]) -> None:
    schema.pop("default", None)
    schema["uniqueItems"] = True


class Match(BusModel):
    """IO header fields a rule matches; an absent or null field matches anything."""

    tenant: Name | None = None
    # Absent means any op. The schema allows no null here, so None is only the "unset"
    # default and an explicit null is rejected by the list type.
    ops: Absent[list[Op]] = Field(default=None, json_schema_extra=_ops_schema)
    path_prefix: str | None = Field(default=None, min_length=1)
    key_prefix: str | None = Field(default=None, min_length=1)
    range: ByteRange | None = None

    @field_validator("ops")
    @classmethod
    def _unique_ops(cls, ops: list[str]) -> list[str]:
        if len(set(ops)) != len(ops):
            raise ValueError("ops must not repeat an op")
        return ops


class DetourTarget(BusModel):
    kind: Literal["file", "stage", "controller"]
    target: str = Field(min_length=1, max_length=4096)


class Detour(BusModel):
    what: Literal["io", "header"]
    to: DetourTarget


class Rule(BusModel):
    """One sSwitch forwarding rule; ascending priority then name, first match wins."""

    name: Name
    priority: int = Field(ge=0, le=1_000_000)
    match: Match
    detours: list[Detour] = Field(min_length=1)


class CacheSize(BusModel):
    """A tenant's share of the cache (the controller's current allocation)."""

    tenant: Name
    size_bytes: int = Field(ge=0)


STAGE_NAME_PATTERN = r"^[a-z0-9]([a-z0-9/-]{0,126}[a-z0-9])?$"
StageName = Annotated[str, Field(pattern=STAGE_NAME_PATTERN, description="What rules name as a stage target.")]
MAX_BYTES = 1 << 50


# The stage contract's cache engines and their write streams (engine parts), named once here.
CacheEngine = Literal["dram", "loc", "kangaroo", "hybrid", "fairywren", "hybrid-fairywren"]
EnginePart = Literal["loc", "klog", "kset", "set-assoc", "fwlog", "fwsets", "fwcold"]


# A directory relative to a forwarding server's root ("" is the root): the schema's pattern.
_SEGMENT = r"([^/.\x00-\x1f][^/\x00-\x1f]*|\.[^/.\x00-\x1f][^/\x00-\x1f]*|\.\.[^/\x00-\x1f]+)"
ServeDir = Annotated[str, Field(max_length=1024, pattern=rf"^({_SEGMENT}(/{_SEGMENT})*)?$")]


class PartHandle(BusModel):
    """The placement broker's reclaim unit handle for one write stream of a cache stage."""

    part: EnginePart
    handle: int = Field(ge=0, le=65535)


class CacheStageConfig(BusModel):
    """The stage contract (common.schema.json#/$defs/cache_stage)."""

    kind: Literal["cache"]
    name: StageName
    owner: Name | None
    engine: CacheEngine
    size_bytes: int = Field(ge=0, le=MAX_BYTES)
    write_mode: Literal["through", "back", "around"]
    eviction: Literal["lru", "fifo"]
    max_dirty_bytes: int = Field(ge=4096, le=MAX_BYTES)
    device: Name | None
    placement: list[PartHandle] = Field(max_length=8)
    next: StageName | None
    # Server level of a two-level cache: directories under the agent's forwarding server's
    # root whose forwarded reads it caches; absent: a stage of the FUSE switch.
    serves: list[ServeDir] | None = Field(default=None, min_length=1, max_length=64)
    # Server level only: exclusive of level 1 (holds what level 1 demotes, not what it reads).
    exclusive: bool = False


class RateLimitStageConfig(BusModel):
    kind: Literal["ratelimit"]
    name: StageName
    owner: Name | None
    iops: int | None = Field(ge=1, le=100_000_000)
    bytes_per_s: int | None = Field(ge=1, le=MAX_BYTES)
    # The IO scheduler's reservation and weight class (absent: none, normal).
    min_bytes_per_s: Absent[int] = Field(default=None, ge=1, le=MAX_BYTES)
    priority: Absent[Literal["high", "normal", "low"]] = Field(default=None)

    @model_validator(mode="after")
    def _something_set(self) -> RateLimitStageConfig:
        if self.iops is None and self.bytes_per_s is None and self.min_bytes_per_s is None and self.priority is None:
            raise ValueError("set iops, bytes_per_s, min_bytes_per_s or priority")
        if (
            self.min_bytes_per_s is not None
            and self.bytes_per_s is not None
            and self.min_bytes_per_s > self.bytes_per_s
        ):
            raise ValueError("min_bytes_per_s is above bytes_per_s")
        return self


class LogStageConfig(BusModel):
    kind: Literal["log"]
    name: StageName
    owner: Name | None
    dir: HostPath
    # tcp://HOST:PORT: the log lives on that agent's `lachesis-fs serve` (tail-latency forwarding).
    remote: str | None = Field(default=None, max_length=256, pattern=r"^tcp://[^/:]+(:[^/:]+)*:([1-9][0-9]{0,4})$")
    # Set: copy what the log holds back to the rest of its route at this rate (reclaim).
    reclaim_bytes_per_s: int | None = Field(default=None, ge=1, le=MAX_BYTES)


StageConfig = Annotated[CacheStageConfig | RateLimitStageConfig | LogStageConfig, Field(discriminator="kind")]


class DesiredState(BusModel):
    schema_: Literal["lachesis.desired-state/v1"] = Field(alias="schema")
    host_id: HostId
    generation: int = Field(ge=1)
    rollout_id: RolloutId
    issued_at: Timestamp
    traceparent: Traceparent
    # Two-phase rollouts (api-schemas/README.md): absent means a one-phase install.
    phase: Absent[Phase] = None
    quiesce: Absent[list[Match]] = Field(default=None)
    restores: Absent[int] = Field(default=None, ge=0)
    # Absent: no allocation (agents keep no per-tenant cache sizes).
    caches: Absent[list[CacheSize]] = Field(default=None)
    tenants: list[Tenant]
    rules: list[Rule]
    # Absent: no stages.
    stages: Absent[list[StageConfig]] = Field(default=None, max_length=1024)


class Device(BusModel):
    name: Name
    path: str = Field(min_length=1)
    kind: Literal["file", "block", "nvme", "measured"]
    size_bytes: int = Field(ge=0)
    fdp: bool
    placement_handles: int = Field(ge=0)
    reclaim_unit_bytes: Absent[int] = Field(default=None, ge=0)


class Kernel(BusModel):
    release: str
    btf: bool
    io_uring: bool
    fuse: bool


def _unique_kinds(kinds: list[str]) -> list[str]:
    if len(set(kinds)) != len(kinds):
        raise ValueError("a classifier kind must not repeat")
    return kinds


def _unique_ops(ops: list[str] | None) -> list[str] | None:
    if ops is not None and len(set(ops)) != len(ops):
        raise ValueError("an operation must not repeat")
    return ops


def _unique_items(schema: dict[str, Any]) -> None:
    schema["uniqueItems"] = True


class DataPath(BusModel):
    """One data path the agent runs, the tenant classifier kinds it decides and the
    operations its IO carries (rules' `match.ops` it can match)."""

    classifiers: Annotated[list[ClassifierKind], AfterValidator(_unique_kinds)] = Field(
        max_length=5, json_schema_extra=_unique_items
    )
    # Absent: an agent from before operations were registered (not judged).
    ops: Absent[Annotated[list[Op], AfterValidator(_unique_ops)]] = Field(
        default=None, max_length=4, json_schema_extra=_unique_items
    )


class DataPaths(BusModel):
    """The data paths the agent runs; one not listed is not run."""

    fuse: Absent[DataPath] = Field(default=None, description="The FUSE switch (--mount): file IO, classified at open.")
    kv: Absent[DataPath] = Field(
        default=None, description="The key-value front end (--kv-listen): requests, classified by key or port."
    )


class Capabilities(BusModel):
    cpus: int = Field(ge=1)
    devices: list[Device]
    kernel: Kernel
    # Absent: an agent from before data paths were registered (policy/enforced.py).
    data_paths: Absent[DataPaths] = Field(default=None)


class Registration(BusModel):
    schema_: Literal["lachesis.registration/v1"] = Field(alias="schema")
    host_id: HostId
    agent_version: str = Field(min_length=1, max_length=64)
    started_at: Timestamp
    capabilities: Capabilities


class Heartbeat(BusModel):
    schema_: Literal["lachesis.heartbeat/v1"] = Field(alias="schema")
    host_id: HostId
    sent_at: Timestamp
    generation: int = Field(ge=0)
    # int | float so that 0 stays 0 (not 0.0) through a round trip.
    uptime_s: int | float = Field(ge=0)


class Ack(BusModel):
    schema_: Literal["lachesis.ack/v1"] = Field(alias="schema")
    host_id: HostId
    generation: int = Field(ge=1)
    rollout_id: RolloutId
    phase: Absent[Phase] = None
    status: Literal["applied", "rejected"]
    reason: str | None
    rules_installed: int = Field(ge=0)
    drained: Absent[int] = Field(default=None, ge=0)
    acked_at: Timestamp
    traceparent: Traceparent


def parse_timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))


# --- telemetry (api-schemas/bus/telemetry.schema.json) ---------------------------------------

Counter = Annotated[int, Field(ge=0)]
# int | float so that a whole number keeps its JSON spelling through a round trip.
LatencyUs = Annotated[int | float | None, Field(ge=0)]


class LatencyP99(BusModel):
    read: LatencyUs
    write: LatencyUs


class TelemetryCurve(BusModel):
    """LRU miss-ratio curve of a tenant's 4 KiB block references; sizes in bytes, ascending."""

    policy: Literal["lru"]
    algorithm: Literal["shards-fixed-size", "shards-fixed-rate"]
    unit: Literal["bytes"]
    sizes: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=256)
    miss_ratios: list[Annotated[int | float, Field(ge=0, le=1)]] = Field(min_length=1, max_length=256)
    references: Counter

    @field_validator("miss_ratios")
    @classmethod
    def _same_length_as_sizes(cls, ratios: list[float], info: Any) -> list[float]:
        sizes = info.data.get("sizes")
        if sizes is not None and len(sizes) != len(ratios):
            raise ValueError(f"{len(ratios)} miss ratios for {len(sizes)} sizes")
        return ratios


class TelemetryCache(BusModel):
    """The tenant's cache at its allocated size, as a shadow LRU measures it (cumulative)."""

    size_bytes: int = Field(ge=0)
    hits: Counter
    misses: Counter


class TelemetryTenant(BusModel):
    name: Name
    ops_read: Counter
    ops_written: Counter
    bytes_read: Counter
    bytes_written: Counter
    latency_us_p99: LatencyP99 | None
    curve: TelemetryCurve | None
    # Absent: no cache size allocated to the tenant at this host.
    cache: Absent[TelemetryCache] = Field(default=None)


class TelemetryHandle(BusModel):
    handle: int = Field(ge=0, le=65535)
    host_bytes_written: Counter
    media_bytes_written: Counter | None


class TelemetryDevice(BusModel):
    name: Name
    host_bytes_written: Counter
    media_bytes_written: Counter | None
    # Absent from agents that do not know them (older agents, plain devices).
    kind: Absent[Literal["file", "block", "nvme", "measured"]] = Field(default=None)
    placement_handles: Absent[int] = Field(default=None, ge=0)
    reclaim_unit_bytes: Absent[int] = Field(default=None, ge=0)
    handles: Absent[list[TelemetryHandle]] = Field(default=None, max_length=65536)


class TelemetryPart(BusModel):
    """One engine part of a flash cache stage: the handles it writes with and its counters."""

    part: Literal["kangaroo", "fairywren", "loc"]
    handles: list[Annotated[int, Field(ge=0, le=65535)]] = Field(max_length=4)
    objects: int = Field(ge=0)
    gets: Counter
    hits: Counter
    flash_bytes_written: Counter
    # Absent from agents that do not report it.
    dram_bytes: Absent[int] = Field(default=None, ge=0)


class TelemetryQos(BusModel):
    """What the data path's IO scheduler dispatched of a qos stage's class."""

    dispatched: Counter
    dispatched_bytes: Counter
    reserved_bytes: Counter
    contended: Counter
    contended_reserved: Counter
    limited: Counter
    limited_bytes: Counter


class TelemetryStage(BusModel):
    """One installed stage and its counters; the cache fields only for cache stages."""

    name: StageName
    kind: Literal["cache", "ratelimit", "log"]
    owner: Name | None
    engine: Absent[CacheEngine] = Field(default=None)
    size_bytes: Absent[int] = Field(default=None, ge=0)
    installed_bytes: Absent[int] = Field(default=None, ge=0)
    hits: Absent[Counter] = Field(default=None)
    misses: Absent[Counter] = Field(default=None)
    bytes_read_hit: Absent[Counter] = Field(default=None)
    bytes_read_miss: Absent[Counter] = Field(default=None)
    bytes_written: Absent[Counter] = Field(default=None)
    # The flash engine's ALWA: bytes asked to store, bytes written to the device.
    app_bytes_written: Absent[Counter] = Field(default=None)
    flash_bytes_written: Absent[Counter] = Field(default=None)
    evictions: Absent[Counter] = Field(default=None)
    writebacks: Absent[Counter] = Field(default=None)
    dirty_bytes: Absent[int] = Field(default=None, ge=0)
    # Log stages: bytes copied back to the route (tail-latency reclaim).
    reclaimed_bytes: Absent[Counter] = Field(default=None)
    # Two-level caches with demotion: level 1's evictions queued for the server level / the
    # server level's demoted blocks taken, and its hits on them.
    demoted_blocks: Absent[Counter] = Field(default=None)
    demotion_hits: Absent[Counter] = Field(default=None)
    # Qos stages: the IO scheduler's counts of the stage's class.
    qos: Absent[TelemetryQos] = Field(default=None)
    # Absent: the FUSE switch runs it.
    front_end: Absent[Literal["fs", "kv"]] = Field(default=None)
    parts: Absent[list[TelemetryPart]] = Field(default=None, max_length=8)


class TelemetryDeclaredFile(BusModel):
    path: HostPath
    offset: Counter
    length: Counter
    crc32: int = Field(ge=0, le=0xFFFFFFFF)


class TelemetryDeclaredJob(BusModel):
    """A declared maintenance IO job's progress on the agent (cumulative since it accepted it)."""

    id: Name
    state: Literal["running", "paused", "done", "failed"]
    bytes_declared: Counter
    dispatched_bytes: Counter
    foreground_bytes: Counter
    shared_bytes: Counter
    error: str | None = Field(max_length=4096)
    # Once done: each range's checksum.
    files: Absent[list[TelemetryDeclaredFile]] = Field(default=None, max_length=1024)


class TelemetryEndpoint(BusModel):
    """A remote endpoint as the agent's data path sees it (its latency monitor)."""

    addr: str = Field(min_length=3, max_length=256)
    requests: Counter
    recent_us: float = Field(ge=0, allow_inf_nan=False)
    mean_us: float = Field(ge=0, allow_inf_nan=False)
    slow: bool


class Telemetry(BusModel):
    schema_: Literal["lachesis.telemetry/v1"] = Field(alias="schema")
    host_id: HostId
    sent_at: Timestamp
    interval_s: int | float = Field(gt=0)
    tenants: list[TelemetryTenant]
    devices: list[TelemetryDevice]
    # Absent: the agent has no data path.
    stages: Absent[list[TelemetryStage]] = Field(default=None, max_length=1024)
    # Absent: the agent has no data path.
    declared_io: Absent[list[TelemetryDeclaredJob]] = Field(default=None, max_length=256)
    # Absent: the agent has no data path.
    endpoints: Absent[list[TelemetryEndpoint]] = Field(default=None, max_length=256)
