"""The devsim input contract (api-schemas/devsim-input.schema.json): what the placement broker
writes to `lachesis-devsim` validates against the schema, the shared fixtures are judged the
same way by the schema and by the real simulator (agents/device's `tests/devsim_contract.rs`
runs the same files through the Rust parser)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import SCHEMAS
from jsonschema import Draft202012Validator

from lachesis_controller.placement import Geometry, Stream, devsim

FIXTURES = sorted((SCHEMAS / "fixtures" / "devsim-input").glob("*.json"))
VALID = [p for p in FIXTURES if p.name.startswith("valid-")]
INVALID = [p for p in FIXTURES if p.name.startswith("invalid-")]


def _validator() -> Draft202012Validator:
    schema = json.loads((SCHEMAS / "devsim-input.schema.json").read_text())
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


VALIDATOR = _validator()


def test_there_are_fixtures_of_both_kinds() -> None:
    assert len(VALID) >= 3 and len(INVALID) >= 8
    assert {p.name for p in FIXTURES} == {p.name for p in VALID + INVALID}, "fixtures are valid-* or invalid-*"


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_fixture_validates(path: Path) -> None:
    errors = [e.message for e in VALIDATOR.iter_errors(json.loads(path.read_text()))]
    assert errors == []


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_fixture_is_rejected(path: Path) -> None:
    assert not VALIDATOR.is_valid(json.loads(path.read_text()))


def _mixes() -> list[dict[str, Any]]:
    two = [
        s for t in ("a", "b") for s in (Stream(t, "set-assoc", 0.02, 0.25), Stream(t, "loc", 0.48, 0.25, trimmed=True))
    ]
    logs = [Stream("k", "klog", 0.05, 0.7), Stream("k", "kset", 0.9, 0.3), Stream("w", "fwsets", 0.05, 0.0)]
    return [
        devsim.request(two, {"a/set-assoc": 0, "a/loc": 1, "b/set-assoc": 0, "b/loc": 2}, Geometry(handles=3)),
        devsim.request(
            logs,
            {"k/klog": 0, "k/kset": 1, "w/fwsets": 7},
            Geometry(),
            seed=2**64 - 1,
            warmup_turns=0,
            measure_turns=0.5,
        ),
        # Write shares are relative in the broker and normalised on the way out.
        devsim.request(
            [Stream("x", "loc", 1.0, 3.0)], {"x/loc": 0}, Geometry(reclaim_units=64, pages_per_ru=4, handles=1)
        ),
    ]


@pytest.mark.parametrize("body", _mixes(), ids=["two-tenants", "three-parts", "one-log"])
def test_what_the_broker_writes_validates(body: dict[str, Any]) -> None:
    errors = [f"{list(e.path)}: {e.message}" for e in VALIDATOR.iter_errors(body)]
    assert errors == []


def test_a_broker_request_breaking_the_contract_is_caught_by_the_schema() -> None:
    body = _mixes()[0]
    body["device"]["handles"] = 0
    body["streams"][0]["pattern"] = "log"
    paths = sorted("/".join(map(str, e.path)) for e in VALIDATOR.iter_errors(body))
    assert paths == ["device/handles", "streams/0/pattern"]


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_the_simulator_runs_every_valid_fixture(path: Path, simulator: Path) -> None:
    body = json.loads(path.read_text())
    body["measure_turns"] = min(body.get("measure_turns", 6.0), 0.5)  # the contract, not the DLWA, is tested
    body["warmup_turns"] = 0
    out = devsim.run(body, binary=simulator)
    assert out["dlwa"] >= 1.0 and out["host_pages"] > 0


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_the_simulator_rejects_every_invalid_fixture(path: Path, simulator: Path) -> None:
    proc = subprocess.run([str(simulator)], input=path.read_text(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr  # bad input: a message and exit 2, not a panic
    assert proc.stderr.startswith("lachesis-devsim: ") and proc.stdout == ""
