"""The rule algebra (policy/match.py) against the cases the Rust switch runs too
(api-schemas/fixtures/rule-match/cases.json): the two languages cannot drift apart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import SCHEMAS

from lachesis_controller.policy.match import Io, covers, matches, overlaps

CASES: dict[str, list[dict[str, Any]]] = json.loads((SCHEMAS / "fixtures" / "rule-match" / "cases.json").read_text())


def _ids(kind: str) -> list[str]:
    return [case["name"] for case in CASES[kind]]


@pytest.mark.parametrize("case", CASES["matches"], ids=_ids("matches"))
def test_matches(case: dict[str, Any]) -> None:
    assert matches(case["match"], Io(**case["io"])) is case["expect"]


@pytest.mark.parametrize("case", CASES["covers"], ids=_ids("covers"))
def test_covers(case: dict[str, Any]) -> None:
    assert covers(case["a"], case["b"]) is case["expect"]


@pytest.mark.parametrize("case", CASES["overlaps"], ids=_ids("overlaps"))
def test_overlaps(case: dict[str, Any]) -> None:
    assert overlaps(case["a"], case["b"]) is case["expect"]
    assert overlaps(case["b"], case["a"]) is case["expect"], "overlaps is symmetric"


def test_every_relation_has_cases_both_ways() -> None:
    for kind in ("matches", "covers", "overlaps"):
        assert {case["expect"] for case in CASES[kind]} == {True, False}, kind
