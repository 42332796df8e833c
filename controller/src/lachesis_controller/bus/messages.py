"""Pydantic models of the Redis bus messages (api-schemas/bus/*.schema.json): what the rest of
the controller imports.

The JSON Schemas are the contract, and the models are generated from them
(`contracts/bus_models.py`, by `python -m lachesis_controller.contracts.gen_bus_models`; run it
after changing a schema, tests/test_contracts_generated.py fails until then). What a JSON
Schema cannot say (strict types, `Absent[T]`, timestamps kept as sent, cross-field checks) is
written by hand in `contracts/bus_base.py`. tests/test_bus_contract.py holds the models to the
schemas and the shared fixtures, which the agent's serde types run too.

Dump with `dump()` (by alias, unset fields left out) so an optional field that was absent
stays absent: the fixtures must round-trip unchanged.
"""

from __future__ import annotations

from typing import Any, get_args

from lachesis_controller.contracts.bus_base import Absent, BusModel, Timestamp, parse_timestamp
from lachesis_controller.contracts.bus_models import (
    Ack,
    ByteRange,
    CacheEngine,
    CacheSize,
    CacheStageConfig,
    Capabilities,
    Classifier,
    ClassifierKind,
    Counter,
    DataPath,
    DataPaths,
    DesiredState,
    Detour,
    DetourTarget,
    Device,
    EnginePart,
    Heartbeat,
    HostId,
    Kernel,
    LatencyP99,
    LatencyUs,
    LogStageConfig,
    Match,
    Name,
    Op,
    PartHandle,
    Phase,
    RateLimitStageConfig,
    Registration,
    Rule,
    ServeDir,
    StageConfig,
    StageName,
    Telemetry,
    TelemetryCache,
    TelemetryCurve,
    TelemetryDeclaredFile,
    TelemetryDeclaredJob,
    TelemetryDevice,
    TelemetryEndpoint,
    TelemetryHandle,
    TelemetryPart,
    TelemetryQos,
    TelemetryStage,
    TelemetryTenant,
    Tenant,
    Traceparent,
)


def _pattern(alias: Any) -> str:
    """The regular expression of a generated string alias (`Annotated[str, Field(pattern=...)]`)."""
    for meta in get_args(alias)[1:]:
        for item in getattr(meta, "metadata", []):
            if isinstance(getattr(item, "pattern", None), str):
                return str(item.pattern)
    raise ValueError(f"{alias} has no pattern")


# Read from the generated models, so the contract says each once.
HOST_ID_PATTERN = _pattern(HostId)
NAME_PATTERN = _pattern(Name)
STAGE_NAME_PATTERN = _pattern(StageName)
TRACEPARENT_PATTERN = _pattern(Traceparent)
# The largest byte count the stage contract takes (2^50).
MAX_BYTES: int = CacheStageConfig.model_json_schema()["properties"]["size_bytes"]["maximum"]

__all__ = [
    "HOST_ID_PATTERN",
    "MAX_BYTES",
    "NAME_PATTERN",
    "STAGE_NAME_PATTERN",
    "TRACEPARENT_PATTERN",
    "Absent",
    "Ack",
    "BusModel",
    "ByteRange",
    "CacheEngine",
    "CacheSize",
    "CacheStageConfig",
    "Capabilities",
    "Classifier",
    "ClassifierKind",
    "Counter",
    "DataPath",
    "DataPaths",
    "DesiredState",
    "Detour",
    "DetourTarget",
    "Device",
    "EnginePart",
    "Heartbeat",
    "HostId",
    "Kernel",
    "LatencyP99",
    "LatencyUs",
    "LogStageConfig",
    "Match",
    "Name",
    "Op",
    "PartHandle",
    "Phase",
    "RateLimitStageConfig",
    "Registration",
    "Rule",
    "ServeDir",
    "StageConfig",
    "StageName",
    "Telemetry",
    "TelemetryCache",
    "TelemetryCurve",
    "TelemetryDeclaredFile",
    "TelemetryDeclaredJob",
    "TelemetryDevice",
    "TelemetryEndpoint",
    "TelemetryHandle",
    "TelemetryPart",
    "TelemetryQos",
    "TelemetryStage",
    "TelemetryTenant",
    "Tenant",
    "Timestamp",
    "Traceparent",
    "parse_timestamp",
]
