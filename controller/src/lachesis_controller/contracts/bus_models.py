"""Generated from api-schemas/bus/*.schema.json by `python -m lachesis_controller.contracts.gen_bus_models`:
do not edit. The hand-written part is bus_base.py; bus/messages.py is what the rest imports."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from lachesis_controller.contracts.bus_base import (
    Absent,
    BusModel,
    RateLimitStageRules,
    Timestamp,
    end_after_start,
    one_miss_ratio_per_size,
    unique_items,
)

EnginePart = Literal["loc", "klog", "kset", "set-assoc", "fwlog", "fwsets", "fwcold"]
ServeDir = Annotated[
    str,
    Field(
        max_length=1024,
        pattern="^(([^/.\\u0000-\\u001f][^/\\u0000-\\u001f]*|\\.[^/.\\u0000-\\u001f][^/\\u0000-\\u001f]*|\\.\\.[^/\\u0000-\\u001f]+)(/([^/.\\u0000-\\u001f][^/\\u0000-\\u001f]*|\\.[^/.\\u0000-\\u001f][^/\\u0000-\\u001f]*|\\.\\.[^/\\u0000-\\u001f]+))*)?$",
    ),
]


class ByteRange(BusModel):
    """
    Byte range [start, end) of an IO; a rule matches IO overlapping it.
    """

    model_config = ConfigDict(extra="forbid")
    start: Annotated[int, Field(ge=0)]
    end: Annotated[int, Field(ge=1)]

    @field_validator("end", mode="after")
    @classmethod
    def end_after_start_validator(cls, v: Any, info: ValidationInfo) -> Any:
        return end_after_start(v, info)


class PartHandle(BusModel):
    model_config = ConfigDict(extra="forbid")
    part: EnginePart
    handle: Annotated[int, Field(ge=0, le=65535)]


ClassifierKind = Literal["cgroup", "uid", "process", "path_prefix", "key_prefix"]


class DetourTarget(BusModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["file", "stage", "controller"]
    target: Annotated[str, Field(max_length=4096, min_length=1)]


CacheEngine = Literal["dram", "loc", "kangaroo", "hybrid", "fairywren", "hybrid-fairywren"]
Serves = Annotated[list[ServeDir], Field(max_length=64, min_length=1)]
Iops = Annotated[int, Field(ge=1, le=100000000)]
BytesPerS = Annotated[int, Field(ge=1, le=1125899906842624)]
Remote = Annotated[str, Field(max_length=256, pattern="^tcp://[^/:]+(:[^/:]+)*:([1-9][0-9]{0,4})$")]
ReclaimBytesPerS = Annotated[int, Field(ge=1, le=1125899906842624)]
HostId = Annotated[str, Field(description="Stable host identifier.", pattern="^[a-z0-9][a-z0-9._-]{0,62}$")]
Name = Annotated[
    str,
    Field(
        description="Lower-case DNS-label-like name of a tenant or rule.",
        pattern="^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    ),
]
Generation = Annotated[int, Field(ge=0)]
Traceparent = Annotated[str | None, Field(pattern="^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")]
Op = Literal["read", "write", "create", "delete"]


class Classifier(BusModel):
    model_config = ConfigDict(extra="forbid")
    kind: ClassifierKind
    value: Annotated[str, Field(max_length=4096, min_length=1)]


class Tenant(BusModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    classifiers: list[Classifier]


class Match(BusModel):
    """
    IO header fields a rule matches; an absent or null field matches anything.
    """

    model_config = ConfigDict(extra="forbid")
    tenant: Name | None = None
    ops: Annotated[Absent[list[Op]], Field(json_schema_extra={"uniqueItems": True})] = None
    path_prefix: Annotated[str | None, Field(min_length=1)] = None
    key_prefix: Annotated[str | None, Field(min_length=1)] = None
    range: ByteRange | None = None

    @field_validator("ops", mode="after")
    @classmethod
    def unique_items_validator(cls, v: Any, info: ValidationInfo) -> Any:
        return unique_items(v, info)


class Detour(BusModel):
    model_config = ConfigDict(extra="forbid")
    what: Literal["io", "header"]
    to: DetourTarget


class Rule(BusModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    priority: Annotated[int, Field(ge=0, le=1000000)]
    match: Match
    detours: Annotated[list[Detour], Field(min_length=1)]


StageName = Annotated[
    str, Field(description="What rules name as a stage target.", pattern="^[a-z0-9]([a-z0-9/-]{0,126}[a-z0-9])?$")
]
StageOwner = Name | None
HostPath = Annotated[
    str,
    Field(
        max_length=4096,
        min_length=2,
        pattern="^(/([^/\\x00-\\x1f\\x7f.]|\\.[^/\\x00-\\x1f\\x7f.]|\\.\\.[^/\\x00-\\x1f\\x7f])[^/\\x00-\\x1f\\x7f]*)+$",
    ),
]
Phase = Literal["quiesce", "install"]


class Ack(BusModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Annotated[Literal["lachesis.ack/v1"], Field(alias="schema")]
    host_id: HostId
    generation: Annotated[int, Field(ge=1)]
    rollout_id: Annotated[str | None, Field(max_length=64, min_length=1)]
    status: Literal["applied", "rejected"]
    reason: str | None
    rules_installed: Annotated[int, Field(ge=0)]
    acked_at: Timestamp
    traceparent: Traceparent
    phase: Absent[Phase] = None
    drained: Annotated[Absent[int], Field(ge=0)] = None


class CacheSize(BusModel):
    model_config = ConfigDict(extra="forbid")
    tenant: Name
    size_bytes: Annotated[int, Field(ge=0)]


class Heartbeat(BusModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Annotated[Literal["lachesis.heartbeat/v1"], Field(alias="schema")]
    host_id: HostId
    sent_at: Timestamp
    generation: Generation
    uptime_s: Annotated[int | float, Field(ge=0.0)]


class Device(BusModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    path: Annotated[str, Field(min_length=1)]
    kind: Literal["file", "block", "nvme", "measured"]
    size_bytes: Annotated[int, Field(ge=0)]
    fdp: bool
    placement_handles: Annotated[int, Field(ge=0)]
    reclaim_unit_bytes: Annotated[Absent[int], Field(ge=0)] = None


class Kernel(BusModel):
    model_config = ConfigDict(extra="forbid")
    release: str
    btf: bool
    io_uring: bool
    fuse: bool


class DataPath(BusModel):
    """
    One data path the agent runs, the tenant classifier kinds it decides and the
    operations its IO carries (rules' `match.ops` it can match).
    """

    model_config = ConfigDict(extra="forbid")
    classifiers: Annotated[
        list[Literal["cgroup", "uid", "process", "path_prefix", "key_prefix"]],
        Field(json_schema_extra={"uniqueItems": True}, max_length=5),
    ]
    ops: Annotated[
        Absent[list[Literal["read", "write", "create", "delete"]]],
        Field(json_schema_extra={"uniqueItems": True}, max_length=4),
    ] = None

    @field_validator("classifiers", "ops", mode="after")
    @classmethod
    def unique_items_validator(cls, v: Any, info: ValidationInfo) -> Any:
        return unique_items(v, info)


Handle = Annotated[int, Field(ge=0, le=65535)]
Counter = Annotated[int, Field(ge=0)]
LatencyUs = Annotated[int | float | None, Field(ge=0.0)]


class TelemetryEndpoint(BusModel):
    model_config = ConfigDict(extra="forbid")
    addr: Annotated[str, Field(max_length=256, min_length=3)]
    requests: Annotated[int, Field(ge=0)]
    recent_us: Annotated[int | float, Field(ge=0.0)]
    mean_us: Annotated[int | float, Field(ge=0.0)]
    slow: bool


class TelemetryCache(BusModel):
    model_config = ConfigDict(extra="forbid")
    size_bytes: Annotated[int, Field(ge=0)]
    hits: Counter
    misses: Counter


Size = Annotated[int, Field(ge=1)]
MissRatio = Annotated[int | float, Field(ge=0.0, le=1.0)]


class TelemetryCurve(BusModel):
    model_config = ConfigDict(extra="forbid")
    policy: Literal["lru"]
    algorithm: Literal["shards-fixed-size", "shards-fixed-rate"]
    unit: Literal["bytes"]
    sizes: Annotated[list[Size], Field(max_length=256, min_length=1)]
    miss_ratios: Annotated[list[MissRatio], Field(max_length=256, min_length=1)]
    references: Annotated[int, Field(ge=0)]

    @field_validator("miss_ratios", mode="after")
    @classmethod
    def one_miss_ratio_per_size_validator(cls, v: Any, info: ValidationInfo) -> Any:
        return one_miss_ratio_per_size(v, info)


class CacheStageConfig(BusModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["cache"]
    name: StageName
    owner: StageOwner
    engine: CacheEngine
    size_bytes: Annotated[int, Field(ge=0, le=1125899906842624)]
    write_mode: Literal["through", "back", "around"]
    eviction: Literal["lru", "fifo"]
    max_dirty_bytes: Annotated[int, Field(ge=4096, le=1125899906842624)]
    device: Name | None
    placement: Annotated[list[PartHandle], Field(max_length=8)]
    next: StageName | None
    serves: Serves | None = None
    exclusive: Absent[bool] = None


class RateLimitStageConfig(RateLimitStageRules):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["ratelimit"]
    name: StageName
    owner: StageOwner
    iops: Iops | None
    bytes_per_s: BytesPerS | None
    min_bytes_per_s: Annotated[Absent[int], Field(ge=1, le=1125899906842624)] = None
    priority: Absent[Literal["high", "normal", "low"]] = None


class LogStageConfig(BusModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["log"]
    name: StageName
    owner: StageOwner
    dir: HostPath
    remote: Remote | None = None
    reclaim_bytes_per_s: ReclaimBytesPerS | None = None


class DataPaths(BusModel):
    """
    The data paths the agent runs; one not listed is not run.
    """

    model_config = ConfigDict(extra="forbid")
    fuse: Annotated[Absent[DataPath], Field(description="The FUSE switch (--mount): file IO, classified at open.")] = (
        None
    )
    kv: Annotated[
        Absent[DataPath],
        Field(description="The key-value front end (--kv-listen): requests, classified by key or port."),
    ] = None


class Capabilities(BusModel):
    model_config = ConfigDict(extra="forbid")
    cpus: Annotated[int, Field(ge=1)]
    devices: list[Device]
    kernel: Kernel
    data_paths: Absent[DataPaths] = None


class Registration(BusModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Annotated[Literal["lachesis.registration/v1"], Field(alias="schema")]
    host_id: HostId
    agent_version: Annotated[str, Field(max_length=64, min_length=1)]
    started_at: Timestamp
    capabilities: Capabilities


class TelemetryDeclaredFile(BusModel):
    model_config = ConfigDict(extra="forbid")
    path: HostPath
    offset: Counter
    length: Counter
    crc32: Annotated[int, Field(ge=0, le=4294967295)]


class TelemetryHandle(BusModel):
    model_config = ConfigDict(extra="forbid")
    handle: Annotated[int, Field(ge=0, le=65535)]
    host_bytes_written: Counter
    media_bytes_written: Annotated[int | None, Field(ge=0)]


class TelemetryPart(BusModel):
    model_config = ConfigDict(extra="forbid")
    part: Literal["kangaroo", "fairywren", "loc"]
    handles: Annotated[list[Handle], Field(max_length=4)]
    objects: Annotated[int, Field(ge=0)]
    gets: Counter
    hits: Counter
    flash_bytes_written: Counter
    dram_bytes: Annotated[Absent[int], Field(ge=0)] = None


class LatencyP99(BusModel):
    model_config = ConfigDict(extra="forbid")
    read: LatencyUs
    write: LatencyUs


class TelemetryQos(BusModel):
    model_config = ConfigDict(extra="forbid")
    dispatched: Counter
    dispatched_bytes: Counter
    reserved_bytes: Counter
    contended: Counter
    contended_reserved: Counter
    limited: Counter
    limited_bytes: Counter


class TelemetryDeclaredJob(BusModel):
    model_config = ConfigDict(extra="forbid")
    id: Name
    state: Literal["running", "paused", "done", "failed"]
    bytes_declared: Counter
    dispatched_bytes: Counter
    foreground_bytes: Counter
    shared_bytes: Counter
    error: Annotated[str | None, Field(max_length=4096)]
    files: Annotated[Absent[list[TelemetryDeclaredFile]], Field(max_length=1024)] = None


class TelemetryTenant(BusModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    ops_read: Counter
    ops_written: Counter
    bytes_read: Counter
    bytes_written: Counter
    latency_us_p99: LatencyP99 | None
    curve: TelemetryCurve | None
    cache: Absent[TelemetryCache] = None


class TelemetryDevice(BusModel):
    model_config = ConfigDict(extra="forbid")
    name: Name
    host_bytes_written: Counter
    media_bytes_written: Annotated[int | None, Field(ge=0)]
    kind: Absent[Literal["file", "block", "nvme", "measured"]] = None
    placement_handles: Annotated[Absent[int], Field(ge=0)] = None
    reclaim_unit_bytes: Annotated[Absent[int], Field(ge=0)] = None
    handles: Annotated[Absent[list[TelemetryHandle]], Field(max_length=65536)] = None


class TelemetryStage(BusModel):
    model_config = ConfigDict(extra="forbid")
    name: StageName
    kind: Literal["cache", "ratelimit", "log"]
    owner: StageOwner
    engine: Absent[Literal["dram", "loc", "kangaroo", "hybrid", "fairywren", "hybrid-fairywren"]] = None
    size_bytes: Annotated[Absent[int], Field(ge=0)] = None
    installed_bytes: Annotated[Absent[int], Field(ge=0)] = None
    hits: Absent[Counter] = None
    misses: Absent[Counter] = None
    bytes_read_hit: Absent[Counter] = None
    bytes_read_miss: Absent[Counter] = None
    bytes_written: Absent[Counter] = None
    app_bytes_written: Absent[Counter] = None
    flash_bytes_written: Absent[Counter] = None
    evictions: Absent[Counter] = None
    writebacks: Absent[Counter] = None
    front_end: Absent[Literal["fs", "kv"]] = None
    parts: Annotated[Absent[list[TelemetryPart]], Field(max_length=8)] = None
    dirty_bytes: Annotated[Absent[int], Field(ge=0)] = None
    reclaimed_bytes: Annotated[Absent[int], Field(ge=0)] = None
    demoted_blocks: Annotated[Absent[int], Field(ge=0)] = None
    demotion_hits: Annotated[Absent[int], Field(ge=0)] = None
    qos: Absent[TelemetryQos] = None


class Telemetry(BusModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Annotated[Literal["lachesis.telemetry/v1"], Field(alias="schema")]
    host_id: HostId
    sent_at: Timestamp
    interval_s: Annotated[int | float, Field(gt=0.0)]
    tenants: list[TelemetryTenant]
    devices: list[TelemetryDevice]
    stages: Annotated[Absent[list[TelemetryStage]], Field(max_length=1024)] = None
    declared_io: Annotated[Absent[list[TelemetryDeclaredJob]], Field(max_length=256)] = None
    endpoints: Annotated[Absent[list[TelemetryEndpoint]], Field(max_length=256)] = None


StageConfig = Annotated[CacheStageConfig | RateLimitStageConfig | LogStageConfig, Field(discriminator="kind")]


class DesiredState(BusModel):
    model_config = ConfigDict(extra="forbid")
    schema_: Annotated[Literal["lachesis.desired-state/v1"], Field(alias="schema")]
    host_id: HostId
    generation: Annotated[int, Field(ge=1)]
    rollout_id: Annotated[str | None, Field(max_length=64, min_length=1)]
    issued_at: Timestamp
    traceparent: Traceparent
    phase: Absent[Phase] = None
    quiesce: Absent[list[Match]] = None
    restores: Annotated[Absent[int], Field(ge=0)] = None
    caches: Absent[list[CacheSize]] = None
    tenants: list[Tenant]
    rules: list[Rule]
    stages: Annotated[Absent[list[StageConfig]], Field(max_length=1024)] = None
