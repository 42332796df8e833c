"""The bus contract: every fixture in api-schemas/fixtures is judged the same way by the
JSON Schemas and by the controller's pydantic models (the Rust agent runs the same
fixtures against its serde types)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SCHEMAS
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError
from referencing import Registry, Resource

from lachesis_controller.bus.messages import Ack, DesiredState, Heartbeat, Registration, Telemetry
from lachesis_controller.declared_io.messages import DeclaredIo
from lachesis_controller.detours.messages import DetourRequest, DetourVerdict

MODELS: dict[str, type[BaseModel]] = {
    "ack": Ack,
    "declared-io": DeclaredIo,
    "desired-state": DesiredState,
    "detour-request": DetourRequest,
    "detour-verdict": DetourVerdict,
    "heartbeat": Heartbeat,
    "registration": Registration,
    "telemetry": Telemetry,
}
# Fixture folders that are not bus messages, each with the tests that run it.
NOT_MESSAGES = {
    "devsim-input",  # test_placement_devsim_contract.py
    "rule-match",  # test_rule_match.py and agents/switch
    "hash",  # test_hash.py, agents/mrc and the BPF program's hash
}
FIXTURES = sorted(p for p in (SCHEMAS / "fixtures").glob("*/*.json") if p.parent.name not in NOT_MESSAGES)


def _registry() -> Registry:
    resources = []
    for path in sorted((SCHEMAS / "bus").glob("*.schema.json")):
        contents = json.loads(path.read_text())
        resource = Resource.from_contents(contents)
        # Both the $id and the bare file name, so "common.schema.json#/..." resolves
        # however a schema spells the reference.
        resources += [(contents["$id"], resource), (path.name, resource)]
    return Registry().with_resources(resources)


REGISTRY = _registry()


def validator(message: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / "bus" / f"{message}.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=REGISTRY)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_fixtures_exist_for_every_message() -> None:
    for message in MODELS:
        names = [p.name for p in FIXTURES if p.parent.name == message]
        assert any(n.startswith("valid-") for n in names), message
        assert any(n.startswith("invalid-") for n in names), message
    assert {p.parent.name for p in FIXTURES} <= set(MODELS), "a fixture folder has no model"


@pytest.mark.parametrize(
    "path", [p for p in FIXTURES if p.name.startswith("valid-")], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_valid_fixture_validates_and_round_trips(path: Path) -> None:
    data = _load(path)
    errors = list(validator(path.parent.name).iter_errors(data))
    assert errors == [], [e.message for e in errors]
    model = MODELS[path.parent.name].model_validate(data)
    dumped = model.dump()
    assert dumped == data
    # Same JSON text too, so no value changed type on the way (0 vs 0.0, "…250Z" vs "…250000Z").
    assert json.dumps(dumped, sort_keys=True) == json.dumps(data, sort_keys=True)
    # And through JSON text, the way messages arrive from Redis.
    assert MODELS[path.parent.name].model_validate_json(path.read_text()).dump() == data


@pytest.mark.parametrize(
    "path", [p for p in FIXTURES if p.name.startswith("invalid-")], ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_invalid_fixture_is_rejected_by_schema_and_model(path: Path) -> None:
    data = _load(path)
    assert not validator(path.parent.name).is_valid(data), "the JSON Schema accepted it"
    with pytest.raises(ValidationError):
        MODELS[path.parent.name].model_validate(data)
    with pytest.raises(ValidationError):
        MODELS[path.parent.name].model_validate_json(path.read_text())


def test_common_definitions_resolve_through_the_registry() -> None:
    # A desired state whose rule names a bad tenant is caught inside common.schema.json.
    data = _load(SCHEMAS / "fixtures" / "desired-state" / "valid-two-rules.json")
    data["rules"][0]["match"]["tenant"] = "Not A Name"
    errors = list(validator("desired-state").iter_errors(data))
    assert errors and any("Not A Name" in e.message for e in errors)
    with pytest.raises(ValidationError):
        DesiredState.model_validate(data)


def test_telemetry_curve_needs_one_miss_ratio_per_size() -> None:
    # The schema cannot say "same length"; the model (and the agent's serde type) must.
    data = _load(SCHEMAS / "fixtures" / "telemetry" / "valid-two-tenants.json")
    data["tenants"][0]["curve"]["miss_ratios"] = [0.5]
    with pytest.raises(ValidationError, match="1 miss ratios for 3 sizes"):
        Telemetry.model_validate(data)
