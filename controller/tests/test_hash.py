"""The one Python splitmix64 (lachesis_cli.demo.traces.mix64, used by the demo and the e2e
miniature traces) against the cases the Rust (lachesis_mrc::hash) and C (ebpf/hash.h) ones run:
the sampling decisions of the three must agree bit for bit."""

from __future__ import annotations

import json

import numpy as np
from conftest import SCHEMAS

from lachesis_cli.demo.traces import SHARDS_P, mix64, sample_value

CASES = json.loads((SCHEMAS / "fixtures" / "hash" / "splitmix64.json").read_text())["cases"]


def test_mix64_matches_the_shared_cases() -> None:
    keys = np.array([int(case["in"]) for case in CASES], dtype=np.uint64)
    assert [int(v) for v in mix64(keys)] == [int(case["out"]) for case in CASES]
    assert len(CASES) >= 10 and any(int(case["in"]) == 2**64 - 1 for case in CASES)


def test_sample_value_is_the_hash_mod_p() -> None:
    keys = np.array([int(case["in"]) for case in CASES], dtype=np.uint64)
    assert [int(v) for v in sample_value(keys)] == [int(case["out"]) % SHARDS_P for case in CASES]
