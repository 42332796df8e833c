"""The modules generated from api-schemas/ are what their generators write from the contracts
today, and a generator refuses a contract that does not say everything it needs."""

from __future__ import annotations

import copy
import json

import pytest

from lachesis_controller.contracts import engine_parts, gen_engine_parts


def test_engine_parts_is_generated_from_the_stage_contract() -> None:
    schema = json.loads(gen_engine_parts.SCHEMA.read_text())
    assert gen_engine_parts.OUTPUT.read_text() == gen_engine_parts.render(schema), (
        "contracts/engine_parts.py is out of date: run python -m lachesis_controller.contracts.gen_engine_parts"
    )
    assert gen_engine_parts.main(["--check"]) == 0
    assert engine_parts.ENGINE_PARTS["hybrid"] == ("klog", "kset", "loc")
    assert engine_parts.PART_PATTERNS["kset"] == "random"


@pytest.mark.parametrize("breaks", ["an engine without parts", "a part without a pattern", "an unknown part"])
def test_a_contract_that_does_not_say_everything_is_refused(breaks: str) -> None:
    schema = copy.deepcopy(json.loads(gen_engine_parts.SCHEMA.read_text()))
    engine = gen_engine_parts._find(schema, "x-parts")
    part = gen_engine_parts._find(schema, "x-write-pattern")
    if breaks == "an engine without parts":
        del engine["x-parts"]["kangaroo"]
    elif breaks == "a part without a pattern":
        del part["x-write-pattern"]["kset"]
    else:
        engine["x-parts"]["loc"] = ["loc", "nvram"]
    with pytest.raises(ValueError):
        gen_engine_parts.render(schema)
