"""The bus models are generated from api-schemas/bus/: the committed module is what the
generator writes from the schemas today, a schema change shows up in it, and the conventions
the generator adds to the library's output (Absent, uniqueItems, timestamps kept as sent,
cross-field checks) hold in the models the controller imports."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from lachesis_controller.bus.messages import (
    ByteRange,
    DataPath,
    DesiredState,
    Heartbeat,
    Match,
    RateLimitStageConfig,
    TelemetryDevice,
    TelemetryEndpoint,
)
from lachesis_controller.contracts import gen_bus_models

REGENERATE = (
    "contracts/bus_models.py is not what api-schemas/bus/ generates: run "
    f"`.lachesis/venv/bin/{gen_bus_models.COMMAND}` from the repository root and commit the result"
)


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    return gen_bus_models.load()


def test_bus_models_are_generated_from_the_schemas(schemas: dict[str, dict[str, Any]]) -> None:
    assert gen_bus_models.OUTPUT.read_text() == gen_bus_models.render(schemas), REGENERATE


def test_a_schema_change_shows_in_the_generated_module(schemas: dict[str, dict[str, Any]]) -> None:
    changed = copy.deepcopy(schemas)
    changed["heartbeat"]["properties"]["load_avg"] = {"type": "number", "minimum": 0}
    text = gen_bus_models.render(changed)
    assert text != gen_bus_models.OUTPUT.read_text()
    # Optional without null: Absent; a JSON number: int | float.
    assert "load_avg: Annotated[Absent[int | float], Field(ge=0.0)] = None" in text


def test_a_message_schema_def_without_a_python_name_is_refused(schemas: dict[str, dict[str, Any]]) -> None:
    changed = copy.deepcopy(schemas)
    changed["telemetry"]["$defs"]["gauge"] = {"type": "integer"}
    with pytest.raises(ValueError, match="gauge"):
        gen_bus_models.render(changed)


HEARTBEAT = {"schema": "lachesis.heartbeat/v1", "host_id": "h1", "sent_at": "2026-11-21T10:01:00.250Z"}


def test_timestamps_and_whole_numbers_keep_their_spelling() -> None:
    heartbeat = Heartbeat.model_validate_json(
        '{"schema": "lachesis.heartbeat/v1", "host_id": "h1", "sent_at": "2026-11-21T10:01:00.250Z",'
        ' "generation": 3, "uptime_s": 0}'
    )
    assert heartbeat.dump()["sent_at"] == "2026-11-21T10:01:00.250Z"
    assert repr(heartbeat.dump()["uptime_s"]) == "0"
    with pytest.raises(ValidationError, match="RFC 3339"):
        Heartbeat.model_validate({**HEARTBEAT, "sent_at": "2026-11-21", "generation": 3, "uptime_s": 0})


def test_an_optional_field_without_null_in_its_schema_refuses_null() -> None:
    device = {"name": "nvme0", "host_bytes_written": 0, "media_bytes_written": None}
    assert TelemetryDevice.model_validate(device).placement_handles is None
    assert "placement_handles" not in TelemetryDevice.model_validate(device).dump()
    with pytest.raises(ValidationError):
        TelemetryDevice.model_validate({**device, "placement_handles": None})
    # A field whose schema has null takes it (and keeps it through a round trip).
    assert Match.model_validate({"tenant": None}).dump() == {"tenant": None}
    # The JSON Schema pydantic writes (openapi.json, the policy schema) offers no null either.
    ops = Match.model_json_schema()["properties"]["ops"]
    assert "default" not in ops and ops["uniqueItems"] is True


def test_strict_and_closed() -> None:
    with pytest.raises(ValidationError):
        ByteRange.model_validate({"start": "0", "end": 1})
    with pytest.raises(ValidationError, match="extra"):
        ByteRange.model_validate({"start": 0, "end": 1, "step": 1})
    with pytest.raises(ValidationError):
        TelemetryEndpoint.model_validate_json(
            '{"addr": "h:1", "requests": 1, "recent_us": NaN, "mean_us": 1, "slow": false}'
        )


def test_unique_items_from_the_schema_are_enforced() -> None:
    with pytest.raises(ValidationError, match="ops must not repeat") as refused:
        Match.model_validate({"ops": ["read", "read"]})
    assert refused.value.errors()[0]["loc"] == ("ops",)
    with pytest.raises(ValidationError, match="classifiers must not repeat"):
        DataPath.model_validate({"classifiers": ["uid", "uid"]})
    assert DataPath.model_validate({"classifiers": ["uid", "cgroup"]}).classifiers == ["uid", "cgroup"]


def test_cross_field_checks_the_schemas_cannot_say() -> None:
    with pytest.raises(ValidationError, match="greater than start") as refused:
        ByteRange.model_validate({"start": 4096, "end": 4096})
    assert refused.value.errors()[0]["loc"] == ("end",)
    stage = {"kind": "ratelimit", "name": "qos/a", "owner": None, "iops": None, "bytes_per_s": None}
    with pytest.raises(ValidationError, match="set iops"):
        RateLimitStageConfig.model_validate(stage)
    with pytest.raises(ValidationError, match="above bytes_per_s"):
        RateLimitStageConfig.model_validate({**stage, "bytes_per_s": 10, "min_bytes_per_s": 20})
    assert RateLimitStageConfig.model_validate({**stage, "priority": "high"}).priority == "high"


def test_stages_are_told_apart_by_kind() -> None:
    state = {
        "schema": "lachesis.desired-state/v1",
        "host_id": "h1",
        "generation": 1,
        "rollout_id": None,
        "issued_at": "2026-11-21T10:00:00Z",
        "traceparent": None,
        "tenants": [],
        "rules": [],
        "stages": [{"kind": "log", "name": "log/a", "owner": None, "dir": "/var/log/a"}],
    }
    parsed = DesiredState.model_validate(state)
    assert parsed.stages is not None and type(parsed.stages[0]).__name__ == "LogStageConfig"
    state["stages"] = [{"kind": "tape", "name": "t", "owner": None}]
    with pytest.raises(ValidationError, match="tape"):
        DesiredState.model_validate(state)
