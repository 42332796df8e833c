"""stages/resolve.py: declared stages and rules -> what one host ships (the stage contract)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO_ROOT

from lachesis_controller.bus.messages import DesiredState
from lachesis_controller.policy.compile import compile_policy
from lachesis_controller.policy.document import PolicyDocument
from lachesis_controller.stages.resolve import HostView, shipped_rules, shipped_stages

EXAMPLES = sorted((REPO_ROOT / "policies" / "examples").glob("*.yaml"))
FLASH = HostView("host-a", devices=("flash0",))


def cache(name: str, owner: str | None, size: int = 1 << 30, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "cache", "owner": owner, "size_bytes": size, "level": 1, "eviction": "lru", **extra}


def to_stage(name: str, **match: Any) -> dict[str, Any]:
    return {
        "name": f"r-{name.replace('/', '-')}",
        "priority": 10,
        "match": match,
        "detours": [{"what": "io", "to": {"kind": "stage", "target": name}}],
    }


def desired(stages: list[dict[str, Any]], rules: list[dict[str, Any]]) -> DesiredState:
    return DesiredState.model_validate(
        {
            "schema": "lachesis.desired-state/v1",
            "host_id": "host-a",
            "generation": 1,
            "rollout_id": None,
            "issued_at": "2026-11-24T10:00:00Z",
            "traceparent": None,
            "tenants": [],
            "rules": rules,
            "stages": stages,
        }
    )


def test_allocation_sizes_the_owners_level_one_caches_in_proportion() -> None:
    declared = [
        cache("cache/a1", "a", 1 << 30),
        cache("cache/a2", "a", 3 << 30),
        cache("cache/b", "b"),
        cache("cache/shared", None),
        cache("cache/a-l2", "a", 8 << 30, level=2),
    ]
    sizes = {s["name"]: s["size_bytes"] for s in shipped_stages(declared, FLASH, {"a": 1000, "b": 7})}
    assert sizes == {"cache/a1": 250, "cache/a2": 750, "cache/b": 7, "cache/shared": 1 << 30, "cache/a-l2": 8 << 30}
    # No allocation in force: the declared sizes.
    assert {s["size_bytes"] for s in shipped_stages(declared[:1], FLASH, None)} == {1 << 30}


def test_engine_defaults_by_host_and_placement_handles_come_from_the_broker() -> None:
    declared = [cache("cache/a", "a", engine="hybrid"), cache("cache/b", "b")]
    host = HostView(
        "host-a",
        ("flash0", "flash1"),
        {("flash0", "a", "klog"): 3, ("flash0", "a", "kset"): 4, ("flash0", "b", "loc"): 5, ("flash1", "a", "loc"): 9},
    )
    a, b = shipped_stages(declared, host, None)
    assert a["engine"] == "hybrid" and a["placement"] == [{"part": "klog", "handle": 3}, {"part": "kset", "handle": 4}]
    assert b["engine"] == "loc" and b["placement"] == [{"part": "loc", "handle": 5}]
    (dram,) = shipped_stages([cache("cache/b", "b")], HostView("host-b"), None)
    assert dram["engine"] == "dram" and dram["placement"] == []


def test_fdp_placement_overrides_the_broker_for_the_owner() -> None:
    declared = [
        cache("cache/logs", "logs", device="nvme0"),
        {"name": "fdp/logs", "kind": "fdp_placement", "owner": "logs", "device": "nvme0", "placement_handle": 6},
    ]
    host = HostView("host-a", ("nvme0",), {("nvme0", "logs", "loc"): 1})
    (only,) = shipped_stages(declared, host, None)
    assert only["placement"] == [{"part": "loc", "handle": 6}]


def test_every_qos_stage_ships_as_a_scheduler_class() -> None:
    declared = [
        {
            "name": "qos/gold",
            "kind": "qos",
            "owner": "gold",
            "max_bandwidth_bytes_per_s": 100,
            "max_iops": None,
            "min_bandwidth_bytes_per_s": 40,
        },
        {"name": "qos/low", "kind": "qos", "owner": "batch", "priority": "low"},
    ]
    assert shipped_stages(declared, FLASH, None) == [
        {
            "kind": "ratelimit",
            "name": "qos/gold",
            "owner": "gold",
            "iops": None,
            "bytes_per_s": 100,
            "priority": "normal",
            "min_bytes_per_s": 40,
        },
        {
            "kind": "ratelimit",
            "name": "qos/low",
            "owner": "batch",
            "iops": None,
            "bytes_per_s": None,
            "priority": "low",
        },
    ]
    # A priority alone is enforced: the rule through it ships.
    rules = shipped_rules(
        [to_stage("qos/gold"), to_stage("qos/low")], {s["name"]: s for s in declared}, ["qos/gold", "qos/low"], "host-a"
    )
    assert [r["name"] for r in rules] == ["r-qos-gold", "r-qos-low"]
    desired(shipped_stages(declared, FLASH, None), rules)  # the bus contract takes them


def test_replica_sets_split_reads_from_writes_and_tail_latency_spreads_reads() -> None:
    declared = {
        "replica/l": {
            "name": "replica/l",
            "kind": "replica_set",
            "write_set": ["/a", "/b", "/c"],
            "read_set": ["/a", "/b"],
        },
        "route/s": {"name": "route/s", "kind": "tail_latency", "candidates": ["/x", "/y"], "hedge_after_ms": 5},
    }
    rules = shipped_rules(
        [to_stage("replica/l", tenant="l"), to_stage("route/s", ops=["read"])], declared, [], "host-a"
    )
    files = {r["name"]: (r["match"].get("ops"), [d["to"]["target"] for d in r["detours"]]) for r in rules}
    assert files == {
        "r-replica-l": (["read"], ["/a", "/b"]),
        "r-replica-l-writes": (["write", "create", "delete"], ["/a", "/b", "/c"]),
        "r-route-s": (["read"], ["/x", "/y"]),
    }


def test_a_replica_set_or_tail_latency_stage_scoped_to_other_hosts_sends_nothing_here() -> None:
    """Neither kind ships a data-plane stage: its rule's detours are its files, so its `hosts`
    is honoured when the rules are resolved for a host, or not at all."""
    declared = {
        "replica/l": {
            "name": "replica/l",
            "kind": "replica_set",
            "write_set": ["/a"],
            "read_set": ["/a"],
            "hosts": ["host-b"],
        },
        "route/s": {"name": "route/s", "kind": "tail_latency", "candidates": ["/x", "/y"], "hosts": ["host-b"]},
    }
    rules = [to_stage("replica/l", tenant="l"), to_stage("route/s", ops=["read"])]
    assert shipped_rules(rules, declared, [], "host-a") == []
    assert {r["name"] for r in shipped_rules(rules, declared, [], "host-b")} == {
        "r-replica-l",
        "r-replica-l-writes",
        "r-route-s",
    }


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
@pytest.mark.parametrize("host", [FLASH, HostView("host-a")], ids=["flash", "no-device"])
def test_every_example_resolves_to_a_valid_desired_state(example: Path, host: HostView) -> None:
    compiled = compile_policy(PolicyDocument.model_validate(yaml.safe_load(example.read_text())))
    declared = {s["name"]: s for s in compiled.stages}
    stages = shipped_stages(compiled.stages, host, None)
    rules = shipped_rules(
        [{k: v for k, v in r.items() if k != "hosts"} for r in compiled.rules],
        declared,
        [s["name"] for s in stages],
        "host-a",
    )
    message = desired(stages, rules)
    shipped = {s.name for s in message.stages}
    for rule in rules:
        for d in rule["detours"]:
            if d["to"]["kind"] == "stage":
                assert d["to"]["target"] in shipped, f"{rule['name']} names {d['to']['target']}, which is not shipped"
    json.dumps(message.dump())


def test_devices_with_handles_are_placed_automatically_and_stay_put_under_resizes() -> None:
    host = HostView("host-a", ("flash0",), geometry={"flash0": (8, 1 << 30)})
    declared = [cache("cache/a", "a", engine="hybrid"), cache("cache/b", "b"), cache("cache/shared", None)]
    first = {s["name"]: s["placement"] for s in shipped_stages(declared, host, {"a": 100 << 20, "b": 900 << 20})}
    handles = [p["handle"] for ps in first.values() for p in ps]
    assert len(handles) == 4 and len(set(handles)) == 4, f"each stream its own handle: {first}"
    assert first["cache/shared"] == [], "a shared stage has no owner's stream"
    later = {s["name"]: s["placement"] for s in shipped_stages(declared, host, {"a": 900 << 20, "b": 100 << 20})}
    assert later == first
    # One handle: nothing to place.
    one = HostView("host-a", ("flash0",), geometry={"flash0": (1, 1 << 30)})
    assert all(s["placement"] == [] for s in shipped_stages(declared, one, None))


def test_flash_stages_larger_than_their_device_are_scaled_to_fit() -> None:
    host = HostView("host-a", ("flash0",), geometry={"flash0": (8, 1 << 30)})
    declared = [
        cache("cache/a", "a", 16 << 30),
        cache("cache/b", "b", 48 << 30),
        cache("cache/m", "m", 1 << 30, engine="dram"),
    ]
    sizes = {s["name"]: s["size_bytes"] for s in shipped_stages(declared, host, None)}
    assert sizes["cache/m"] == 1 << 30, "memory stages are not on the device"
    assert sizes["cache/a"] + sizes["cache/b"] <= 0.9 * (1 << 30)
    assert sizes["cache/b"] == pytest.approx(3 * sizes["cache/a"], rel=1e-6)
    # What fits is shipped as declared.
    small = [cache("cache/a", "a", 100 << 20)]
    assert shipped_stages(small, host, None)[0]["size_bytes"] == 100 << 20


def test_automatic_handles_stay_put_when_tenants_come_and_go() -> None:
    geometry = {"flash0": (8, 1 << 30)}
    declared = [cache("cache/m", "m"), cache("cache/t", "t")]
    first = shipped_stages(declared, HostView("host-a", ("flash0",), geometry=geometry), None)
    previous = {("flash0", s["owner"], p["part"]): p["handle"] for s in first for p in s["placement"]}
    # Tenant "a" sorts before both: the broker alone would give it handle 0 and move them.
    more = declared + [cache("cache/a", "a")]
    later = shipped_stages(more, HostView("host-a", ("flash0",), geometry=geometry, previous=previous), None)
    handles = {s["name"]: s["placement"][0]["handle"] for s in later}
    assert handles["cache/m"] == previous[("flash0", "m", "loc")]
    assert handles["cache/t"] == previous[("flash0", "t", "loc")]
    assert len(set(handles.values())) == 3


def test_automatic_handles_stay_put_when_streams_outnumber_handles_and_tenants_come() -> None:
    """More streams than handles: the broker groups them, and a new tenant regroups them.
    The groups keep their numbers where they can, so the largest stage is not moved (a
    stage whose handle changes is rebuilt cold, and on a full device could not be)."""
    geometry = {"flash0": (8, 1 << 30)}
    declared = [cache("cache/big", "big", 64 << 30)] + [
        cache(f"cache/kv{i}", f"kv{i}", 64 << 20, engine="hybrid-fairywren") for i in range(3)
    ]
    first = shipped_stages(declared, HostView("host-a", ("flash0",), geometry=geometry), None)
    assert sum(len(s["placement"]) for s in first) > 8
    previous = {("flash0", s["owner"], p["part"]): p["handle"] for s in first for p in s["placement"]}
    big = previous[("flash0", "big", "loc")]
    more = [cache("cache/alpha", "alpha", 4 << 30), cache("cache/beta", "beta", 4 << 30)] + declared
    unsticky = shipped_stages(more, HostView("host-a", ("flash0",), geometry=geometry), None)
    later = shipped_stages(more, HostView("host-a", ("flash0",), geometry=geometry, previous=previous), None)
    handle = {s["name"]: s["placement"][0]["handle"] for s in later}
    assert handle["cache/big"] == big, later
    # Without what was shipped, the new tenants' streams take the low numbers (what moved
    # cache/imagenet in e2e/test_policy_examples): the test would see a move.
    assert {s["name"]: s["placement"][0]["handle"] for s in unsticky}["cache/big"] != big

    # The regrouped placement is the broker's all the same: the same groups, renumbered.
    def groups(shipped: list[dict[str, Any]]) -> set[frozenset[str]]:
        by: dict[int, set[str]] = {}
        for s in shipped:
            for p in s["placement"]:
                by.setdefault(p["handle"], set()).add(f"{s['owner']}/{p['part']}")
        return {frozenset(g) for g in by.values()}

    assert groups(later) == groups(unsticky)


def test_fairywren_stages_ship_their_parts_with_the_brokers_handles() -> None:
    """FairyWREN's three write streams (FwLog, hot and cold FwSets) and, in the hybrid, the
    log each get their own handle: from an operator's placement, or automatically."""
    declared = [cache("cache/a", "a", engine="fairywren"), cache("cache/b", "b", engine="hybrid-fairywren")]
    asked = {
        ("flash0", "a", "fwlog"): 1,
        ("flash0", "a", "fwsets"): 2,
        ("flash0", "a", "fwcold"): 3,
        ("flash0", "b", "fwlog"): 4,
        ("flash0", "b", "fwsets"): 5,
        ("flash0", "b", "fwcold"): 6,
        ("flash0", "b", "loc"): 7,
    }
    a, b = shipped_stages(declared, HostView("host-a", ("flash0",), asked), None)
    assert (a["engine"], a["placement"]) == (
        "fairywren",
        [{"part": "fwlog", "handle": 1}, {"part": "fwsets", "handle": 2}, {"part": "fwcold", "handle": 3}],
    )
    assert (b["engine"], b["placement"]) == (
        "hybrid-fairywren",
        [
            {"part": "fwlog", "handle": 4},
            {"part": "fwsets", "handle": 5},
            {"part": "fwcold", "handle": 6},
            {"part": "loc", "handle": 7},
        ],
    )
    desired([a, b], [to_stage("cache/a", tenant="a"), to_stage("cache/b", tenant="b")])
    auto = HostView("host-a", ("flash0",), geometry={"flash0": (8, 1 << 30)})
    placed = {s["name"]: s["placement"] for s in shipped_stages(declared, auto, {"a": 1 << 28, "b": 1 << 28})}
    assert [p["part"] for p in placed["cache/a"]] == ["fwlog", "fwsets", "fwcold"]
    assert [p["part"] for p in placed["cache/b"]] == ["fwlog", "fwsets", "fwcold", "loc"]
    handles = [p["handle"] for ps in placed.values() for p in ps]
    assert len(handles) == 7 and len(set(handles)) == 7, f"each stream its own handle: {placed}"
