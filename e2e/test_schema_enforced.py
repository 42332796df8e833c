"""Nothing accepted that is not enforced, walked over the whole policy schema: every choice a
policy can make (each field of each section and stage kind, each value of each enum) has a
verdict here, and the walk fails on a choice without one, so a field added to the schema
must come with the IO that shows an agent honours it, or with its refusal.

Verdicts:
- `Io`: shown in this file, on a real agent with a FUSE mount, by IO whose outcome depends on
  the choice (`test_choices_this_file_shows_with_io`).
- `Shown`: an e2e test named here drives IO through a real agent with that choice; the walk
  checks the test exists and its module names the choice.
- `Refused`: the controller refuses it, 422 naming the field, before anything ships
  (`test_the_refused_choices_are_refused_before_anything_ships`, against the same kind of
  deployment).
- `Guarded`: the controller enforces it before shipping (another tenant's rule may target a
  stage only when the stage is shared with it), shown here both ways on a live controller
  (`test_sharing_is_checked_for_every_stage_kind_a_rule_can_target`).
- `Unit`: decided by a part whose clock or model is an input (when the controller declares a
  scrub's next job and its deadline, the n-th slow report that starts forwarding, the split an
  SLA asks for, the agent planner's pace under a job's cap): an e2e test may not depend on how
  much happens in wall-clock time, so the unit test named drives that input; the walk checks
  the test exists and names the choice. What the part decides reaches IO through the choices
  shown above.
- `Named`: names, descriptions and the document's header: they identify things, there is
  nothing for an agent to do with them.
- `Gap`: accepted, enforced by the agents' code, and not yet shown end to end by IO. Each says
  what would show it; docs/reliability.md lists them. The walk keeps the list from growing
  silently: a new choice cannot be a gap without being written here.

Needs root and /dev/fuse for the live tests.
"""

from __future__ import annotations

import ast
import json
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import HOST, ROOT, Cluster, start_with_datapath, wait_for

SCHEMA = ROOT / "policies" / "schema" / "policy.schema.json"


@dataclass(frozen=True)
class Io:
    check: str  # what the live test below shows


@dataclass(frozen=True)
class Shown:
    tests: tuple[str, ...]  # "e2e/test_x.py::test_y"
    words: tuple[str, ...] = ()  # what the module must name; default: the field and value


@dataclass(frozen=True)
class Refused:
    why: str


@dataclass(frozen=True)
class Guarded:
    """Enforced by the controller before anything ships, shown live here both ways."""

    check: str


@dataclass(frozen=True)
class Unit:
    tests: tuple[str, ...]  # "controller/tests/test_x.py::test_y" or "agents/c/tests/t.rs::fn_name"
    words: tuple[str, ...]


@dataclass(frozen=True)
class Named:
    pass


@dataclass(frozen=True)
class Gap:
    would_show: str


CONFORMANCE = ("e2e/test_conformance.py::test_fsx",)
PATH_TENANTS = ("e2e/test_path_tenants.py::test_a_path_tenants_reads_through_the_mount_reach_its_cache_stage",)
TWO_LEVEL = ("e2e/test_app_two_level.py::test_two_levels_count_hits_at_both_and_read_less_from_the_servers_store",)
TWO_LEVEL_SPLIT = ("e2e/test_app_two_level.py::test_the_installed_sizes_are_the_split_the_controller_reports",)
TAIL = ("e2e/test_app_tail_latency.py::test_a_slow_endpoints_writes_are_forwarded_read_back_and_reclaimed",)
SCRUB = ("e2e/test_app_dingos.py::test_a_declared_scrub_counts_the_foreground_and_reads_the_rest",)
KV = ("e2e/test_kv.py::test_two_tenants_partitions_rate_limit_warm_restart_and_a_corrupt_page",)
DETOUR = (
    "e2e/test_fs_controller_detour.py::test_a_write_waits_for_the_read_set_switch_then_flows_and_the_read_set_comes_back",
)
REMOTE = ("e2e/test_fs_remote.py::test_tenant_writes_go_to_the_remote_host_and_reads_follow_them",)
ALLOCATION = ("e2e/test_closed_loop.py::test_the_loop_beats_an_equal_split_on_the_real_stages",)
FS_CGROUP = ("e2e/test_fs.py::test_tenant_by_cgroup_routes_its_writes",)
EXAMPLES = ("e2e/test_policy_examples.py::test_every_example_policy_installs_on_a_host_with_a_data_path",)
QOS_PRIORITY = ("e2e/test_qos_scheduler.py::test_a_high_tenant_goes_first",)
QOS_RESERVATION = ("e2e/test_qos_scheduler.py::test_a_reservation_goes_ahead_of_a_heavier_tenant",)
QOS_CAP = ("e2e/test_qos_scheduler.py::test_a_cap_holds_a_tenant_below_it",)
SCRUB_CLOCK = ("controller/tests/test_declared_io.py::test_a_scrubs_every_s_window_s_rate_and_hosts_shape_its_jobs",)
PLANNER = (
    "agents/declared/tests/planner.rs::deadline_pacing_reads_what_is_left_over_the_time_left_and_paused_jobs_read_nothing",
)
ENTRY = ("controller/tests/test_tail_latency.py::test_entry_needs_enter_reports_slow_reports_in_a_row",)
SLA = (
    "controller/tests/test_two_level_caches.py::test_the_loop_gives_a_two_level_tenant_its_split_and_the_others_their_share",
)
EXAMPLES_FW = ("e2e/test_policy_examples.py::test_the_fairywren_example_caches_a_kv_tenant_in_fairywren",)

# Each choice of the schema (policies/schema/policy.schema.json, walked by `choices`) and its verdict.
VERDICTS: dict[str, Io | Shown | Refused | Guarded | Unit | Named | Gap] = {
    "apiVersion=lachesis.dev/v1": Named(),
    "kind=Policy": Named(),
    "metadata.name": Named(),
    "metadata.description": Named(),
    "tenants.name": Named(),
    "tenants.description": Named(),
    "tenants.classifiers.kind=path_prefix": Io("a path tenant's reads reach its stage, a sibling directory's do not"),
    "tenants.classifiers.kind=cgroup": Shown(FS_CGROUP, ("cgroup",)),
    "tenants.classifiers.kind=uid": Io("a uid tenant's reads reach its stage, root's do not"),
    "tenants.classifiers.kind=process": Refused("the FUSE switch cannot classify by process"),
    "tenants.classifiers.kind=key_prefix": Shown(KV, ("key_prefix",)),
    "tenants.classifiers.value": Io("the classifiers' values select whose IO is the tenant's"),
    "rules.name": Named(),
    "rules.priority": Io("of two rules matching one read, the lower priority's stage counts it"),
    "rules.hosts": Io("a rule scoped to another host is not installed here: its stage counts nothing"),
    "rules.match.tenant": Io("a tenant rule's stage counts the tenant's reads only"),
    "rules.match.path_prefix": Io("a path rule's stage counts reads under the prefix only"),
    "rules.match.key_prefix": Shown(KV, ("key_prefix",)),
    "rules.match.ops=read": Io("a read rule's stage counts reads, not writes"),
    "rules.match.ops=write": Io("a write rule's write-through stage counts the writes"),
    "rules.match.ops=create": Refused("no data path routes creates: names are created in the backing directory"),
    "rules.match.ops=delete": Refused("the FUSE switch never sees a delete (the key-value front end does: test_kv)"),
    "rules.match.range.start": Io("a range rule's stage counts the blocks of reads inside the range only"),
    "rules.match.range.end": Io("a range rule's stage counts the blocks of reads inside the range only"),
    "rules.detours.what=io": Io("every IO check here detours io to a stage"),
    "rules.detours.what=header": Shown(DETOUR, ('"header"',)),
    "rules.detours.to.kind=stage": Io("every IO check here detours to a stage"),
    "rules.detours.to.kind=file": Shown(REMOTE + DETOUR, ('"file"',)),
    "rules.detours.to.kind=controller": Shown(DETOUR, ('"controller"',)),
    "rules.detours.to.target": Io("the target names the stage that counts the IO"),
    # Every stage kind: its name (what rules target), owner, sharing and hosts.
    **{
        f"stages[{k}].name": Named()
        for k in ("cache", "qos", "log", "replica_set", "tail_latency", "fdp_placement", "scrub")
    },
    "stages[cache].kind=cache": Io("every IO check here reads through a cache stage"),
    "stages[cache].owner": Io("a stage's owner is what its report names"),
    "stages[cache].shared_with": Io("another tenant's reads reach a stage shared with it (and Guarded)"),
    "stages[cache].hosts": Io("a stage scoped to another host is not installed here"),
    "stages[cache].size_bytes": Io("the stage reports the size installed"),
    "stages[cache].level=1": Io("every IO check here uses a host-level stage"),
    "stages[cache].level=2": Shown(TWO_LEVEL, ("level",)),
    "stages[cache].parent": Shown(TWO_LEVEL, ("parent",)),
    "stages[cache].serves": Shown(TWO_LEVEL, ("serves",)),
    "stages[cache].exclusive=true": Shown(TWO_LEVEL, ("exclusive",)),
    "stages[cache].exclusive=false": Shown(TWO_LEVEL, ("exclusive",)),
    "stages[cache].two_level.memory_bytes_per_s": Shown(TWO_LEVEL_SPLIT, ("memory_bytes_per_s",)),
    "stages[cache].two_level.network_bytes_per_s": Shown(TWO_LEVEL_SPLIT, ("network_bytes_per_s",)),
    "stages[cache].two_level.storage_bytes_per_s": Shown(TWO_LEVEL_SPLIT, ("storage_bytes_per_s",)),
    "stages[cache].two_level.sla_bytes_per_s": Unit(SLA, ("sla_bytes_per_s",)),  # installed: TWO_LEVEL_SPLIT
    "stages[cache].two_level.server_max_bytes": Shown(TWO_LEVEL_SPLIT, ("server_max_bytes",)),
    "stages[cache].eviction=lru": Io("every IO check here uses lru"),
    "stages[cache].eviction=fifo": Io("re-read blocks are evicted first by a fifo stage, kept by an lru one"),
    "stages[cache].eviction=mrc": Refused(
        "no agent partitions a shared stage by its tenants' curves: it would ship as lru"
    ),
    **{
        f"stages[cache].engine={e}": Shown(CONFORMANCE, (e,))
        for e in ("dram", "loc", "kangaroo", "hybrid", "fairywren", "hybrid-fairywren")
    },
    "stages[cache].write_mode=through": Io("a write-through stage counts the writes"),
    "stages[cache].write_mode=back": Shown(CONFORMANCE, ('"back"',)),
    "stages[cache].write_mode=around": Shown(CONFORMANCE, ('"around"',)),
    "stages[cache].max_dirty_bytes": Shown(
        ("e2e/test_conformance.py::test_a_write_back_stage_holding_more_dirty_bytes_than_its_size",),
        ("max_dirty_bytes",),
    ),
    "stages[cache].device": Io("the stage is installed on the device named"),
    "stages[qos].kind=qos": Shown(KV, ("kind: qos",)),
    "stages[qos].owner": Shown(KV, ("kind: qos, owner",)),
    "stages[qos].shared_with": Guarded("another tenant's rule may target it only when shared"),
    "stages[qos].hosts": Io("a limiter scoped to another host is shipped there, not here"),
    "stages[qos].max_iops": Shown(KV, ("max_iops",)),
    "stages[qos].max_bandwidth_bytes_per_s": Shown(QOS_CAP, ("max_bandwidth_bytes_per_s",)),
    "stages[qos].min_bandwidth_bytes_per_s": Shown(QOS_RESERVATION, ("min_bandwidth_bytes_per_s",)),
    "stages[qos].priority=high": Shown(QOS_PRIORITY, ("priority: high",)),
    "stages[qos].priority=normal": Shown(QOS_CAP, ("priority: normal",)),
    "stages[qos].priority=low": Shown(QOS_PRIORITY, ("priority: low",)),
    "stages[log].kind=log": Io("the tenant's writes land in log files under dir and read back through the mount"),
    "stages[log].owner": Io("the log stage is its owner's: its writes go there"),
    "stages[log].shared_with": Guarded("another tenant's rule may target it only when shared"),
    "stages[log].hosts": Io("a log stage scoped to another host is shipped there, not here"),
    "stages[log].dir": Io("the tenant's writes land in log files under dir and read back through the mount"),
    "stages[replica_set].kind=replica_set": Io("a write under the replica set's rule lands in every write_set replica"),
    "stages[replica_set].write_set": Io("a write under the replica set's rule lands in every write_set replica"),
    "stages[replica_set].read_set": Io("a read under the replica set's rule is served from the read_set replica"),
    "stages[replica_set].owner": Io("the replica set's rule is its owner's"),
    "stages[replica_set].shared_with": Guarded("another tenant's rule may target it only when shared"),
    "stages[replica_set].hosts": Io(
        "a replica set scoped to another host sends nothing here: its tenant's writes land in the backing file"
    ),
    "stages[tail_latency].kind=tail_latency": Shown(TAIL, ("tail_latency",)),
    "stages[tail_latency].owner": Shown(TAIL, ("owner",)),
    "stages[tail_latency].servers": Shown(TAIL, ("servers",)),
    "stages[tail_latency].alpha": Shown(TAIL, ("alpha",)),
    "stages[tail_latency].reclaim_bytes_per_s": Shown(TAIL, ("reclaim",)),
    "stages[tail_latency].enter_reports": Unit(ENTRY, ("enter_reports",)),
    "stages[tail_latency].candidates": Io(
        "O_DIRECT reads under the rule alternate between the candidates' different bytes"
    ),
    "stages[tail_latency].hedge_after_ms": Refused("no agent hedges reads"),
    "stages[tail_latency].shared_with": Guarded("another tenant's rule may target it only when shared"),
    "stages[tail_latency].hosts": Io(
        "a tail-latency stage scoped to another host sends nothing here: reads come from the backing file"
    ),
    "stages[fdp_placement].kind=fdp_placement": Io(
        "the owner's cache writes are counted by the measuring device under the handle"
    ),
    "stages[fdp_placement].device": Io("the handle's writes are counted by the device named"),
    "stages[fdp_placement].placement_handle": Io(
        "the owner's cache writes are counted under the handle named, and by no other"
    ),
    "stages[fdp_placement].owner": Io(
        "the owner's cache writes are tagged (and a placement without an owner is refused)"
    ),
    "stages[fdp_placement].shared_with": Refused("a placement tags its owner's cache writes only"),
    "stages[fdp_placement].hosts": Io(
        "a placement scoped to another host tags nothing here: its handle counts no write"
    ),
    "stages[scrub].kind=scrub": Shown(EXAMPLES, ("scrub/archive", "bytes_declared")),
    "stages[scrub].owner": Shown(EXAMPLES, ("scrub/archive",)),
    "stages[scrub].paths": Shown(EXAMPLES, ("archive", "bytes_declared")),
    "stages[scrub].every_s": Unit(SCRUB_CLOCK, ("every_s",)),
    "stages[scrub].window_s": Unit(SCRUB_CLOCK, ("window_s",)),
    "stages[scrub].pace=deadline": Shown(EXAMPLES, ("scrub/archive",)),
    "stages[scrub].pace=budget": Shown(SCRUB, ('"pace": "budget"',)),
    "stages[scrub].rate_bytes_per_s": Unit(SCRUB_CLOCK + PLANNER, ("rate_bytes_per_s",)),
    "stages[scrub].shared_with": Refused("a job counts every foreground read of its paths, whoever's"),
    "stages[scrub].hosts": Io("a scrub scoped to another host declares no job here; one scoped here does"),
}


# --- walking the schema ---------------------------------------------------------------


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].split("/")[-1]]
    return node


def _leaves(node: dict[str, Any], defs: dict[str, Any], path: str, out: set[str]) -> None:
    """Adds `path` (or `path=value` for each value of an enum, const or boolean) for every leaf
    under `node`; null alternatives are the field left out, not a choice."""
    node = _resolve(node, defs)
    if "anyOf" in node or "oneOf" in node:
        for alt in node.get("anyOf", node.get("oneOf")):
            if _resolve(alt, defs).get("type") != "null":
                _leaves(alt, defs, path, out)
        return
    if "properties" in node:
        for name, child in node["properties"].items():
            _leaves(child, defs, f"{path}.{name}" if path else name, out)
        return
    if node.get("type") == "array":
        _leaves(node.get("items", {}), defs, path, out)
        return
    values = node.get("enum") or ([node["const"]] if "const" in node else None)
    if values is None and node.get("type") == "boolean":
        values = [True, False]
    if values is None:
        out.add(path)
    else:
        out.update(f"{path}={json.dumps(v) if isinstance(v, bool) else v}" for v in values)


def choices(schema: dict[str, Any]) -> set[str]:
    """Every choice a policy can make, as the keys of VERDICTS: `section.field[=value]`, stage
    fields under their kind (`stages[cache].engine=loc`)."""
    defs = schema.get("$defs", {})
    out: set[str] = set()
    spec = _resolve(schema["properties"]["spec"], defs)
    for name, node in schema["properties"].items():
        if name != "spec":
            _leaves(node, defs, name, out)
    for section, node in spec["properties"].items():
        items = _resolve(_resolve(node, defs)["items"], defs)
        if section != "stages":
            _leaves(items, defs, section, out)
            continue
        for alt in items["oneOf"]:
            kind_schema = _resolve(alt, defs)
            kind = kind_schema["properties"]["kind"]["const"]
            _leaves(kind_schema, defs, f"stages[{kind}]", out)
    return out


def _tests_of(module: Path) -> set[str]:
    """The test functions of a Python module, or the `#[test]` functions of a Rust file."""
    if module.suffix == ".rs":
        return set(re.findall(r"#\[test\]\s*fn ([a-z0-9_]+)", module.read_text()))
    tree = ast.parse(module.read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_choice_of_the_policy_schema_has_a_verdict() -> None:
    found = choices(json.loads(SCHEMA.read_text()))
    assert "stages[cache].engine=fairywren" in found and "rules.match.ops=create" in found, sorted(found)
    missing, stale = sorted(found - VERDICTS.keys()), sorted(VERDICTS.keys() - found)
    assert not missing, f"choices of the policy schema without a verdict here: {missing}"
    assert not stale, f"verdicts for choices the schema no longer has: {stale}"
    for choice, verdict in VERDICTS.items():
        if not isinstance(verdict, Shown | Unit):
            continue
        for ref in verdict.tests:
            file, name = ref.split("::")
            module = ROOT / file
            assert module.exists() and name in _tests_of(module), f"{choice}: no test {ref}"
            text = module.read_text()
            for word in verdict.words:
                assert word in text, f"{choice}: {file} never names {word!r}"


def test_the_gaps_are_the_ones_docs_reliability_lists() -> None:
    """Each gap is written down where an operator reads what the mount guarantees."""
    doc = (ROOT / "docs" / "reliability.md").read_text()
    gaps = sorted(c for c, v in VERDICTS.items() if isinstance(v, Gap))
    unlisted = [c for c in gaps if f"`{c}`" not in doc]
    assert not unlisted, f"gaps docs/reliability.md does not list: {unlisted}"


# --- live: the refused choices ----------------------------------------------------------

HEADER = "apiVersion: lachesis.dev/v1\nkind: Policy\nmetadata: {name: walk}\nspec:\n"
CACHE = "  stages: [{name: cache/x, kind: cache, engine: dram, size_bytes: 4194304}]\n"
TWO = "  tenants: [{name: a, classifiers: [{kind: uid, value: '1'}]}, {name: b, classifiers: [{kind: uid, value: '2'}]}]\n"
REFUSALS: dict[str, tuple[str, str, str]] = {
    # choice: (the policy's spec, the field the refusal names, the problem's type)
    "tenants.classifiers.kind=process": (
        "  tenants: [{name: p, classifiers: [{kind: process, value: searchd}]}]\n",
        "spec.tenants[0].classifiers[0].kind",
        "not-enforced",
    ),
    "rules.match.ops=create": (
        CACHE + "  rules: [{name: c, priority: 5, match: {path_prefix: /x, ops: [create]},"
        " detours: [{what: io, to: {kind: stage, target: cache/x}}]}]\n",
        "spec.rules[0].match.ops[0]",
        "not-enforced",
    ),
    "rules.match.ops=delete": (
        CACHE + "  rules: [{name: d, priority: 5, match: {path_prefix: /x, ops: [read, delete]},"
        " detours: [{what: io, to: {kind: stage, target: cache/x}}]}]\n",
        "spec.rules[0].match.ops[1]",
        "not-enforced",
    ),
    "stages[tail_latency].hedge_after_ms": (
        "  stages: [{name: route/h, kind: tail_latency, candidates: [/a, /b], hedge_after_ms: 5}]\n",
        "spec.stages[0].hedge_after_ms",
        "validation-error",
    ),
    "stages[cache].eviction=mrc": (
        "  stages: [{name: cache/x, kind: cache, engine: dram, size_bytes: 4194304, eviction: mrc}]\n",
        "spec.stages[0].eviction",
        "validation-error",
    ),
    "stages[fdp_placement].shared_with": (
        TWO + "  stages: [{name: fdp/x, kind: fdp_placement, owner: a, device: flash0, placement_handle: 1,"
        " shared_with: [b]}]\n",
        "spec.stages[0].shared_with",
        "validation-error",
    ),
    "stages[scrub].shared_with": (
        TWO + "  stages: [{name: scrub/x, kind: scrub, owner: a, paths: [/a], every_s: 600, shared_with: [b]}]\n",
        "spec.stages[0].shared_with",
        "validation-error",
    ),
}


@pytest.fixture
def home(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "200")
    replicas = cluster.tmp / "replicas"
    replicas.mkdir()
    return start_with_datapath(cluster, "64MiB", ["--endpoint-root", str(replicas)])


def apply(api: httpx.Client, cluster: Cluster, policy: str) -> None:
    applied = api.post("/api/v1/policies", content=policy.encode(), headers={"content-type": "application/yaml"})
    assert applied.status_code == 201, applied.text
    rollout = cluster.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
    assert rollout["state"] == "succeeded", rollout


def test_the_refused_choices_are_refused_before_anything_ships(cluster: Cluster, home: Path) -> None:
    assert set(REFUSALS) == {c for c, v in VERDICTS.items() if isinstance(v, Refused)}
    with cluster.api() as api:
        generation = cluster.host(HOST)["acked_generation"]
        for choice, (spec, field, kind) in REFUSALS.items():
            for dry_run in ("true", "false"):
                r = api.post(
                    f"/api/v1/policies?dry_run={dry_run}",
                    content=(HEADER + spec).encode(),
                    headers={"content-type": "application/yaml"},
                )
                assert r.status_code == 422, (choice, r.text)
                body = r.json()
                assert body["type"].endswith("/" + kind), (choice, body)
                assert any(e["field"].startswith(field) for e in body["errors"]), (choice, body)
                if kind == "not-enforced":
                    assert body["hosts"] == [HOST], (choice, body)
        assert all(p["name"] != "walk" for p in api.get("/api/v1/policies").json()), "a refused policy was kept"
    assert cluster.host(HOST)["acked_generation"] == generation


# --- live: sharing, checked by the controller for every kind a rule can target ---------------


def test_sharing_is_checked_for_every_stage_kind_a_rule_can_target(cluster: Cluster, home: Path) -> None:
    """Tenant b's rule may send IO to tenant a's stage only when the stage is shared with b:
    refused (422 unsafe-rules, the isolation check) without `shared_with: [b]`, accepted with."""
    replicas = cluster.tmp / "replicas"
    for r in ("r1", "r2", "log"):
        (replicas / r).mkdir(exist_ok=True)
    stages = {
        "cache": ("read", "engine: dram, size_bytes: 4194304"),
        "qos": ("read", "max_iops: 1000"),
        "log": ("write", f'dir: "{replicas / "log"}"'),
        "replica_set": (
            "write",
            f'write_set: ["{replicas / "r1"}", "{replicas / "r2"}"], read_set: ["{replicas / "r1"}"]',
        ),
        "tail_latency": ("read", f'candidates: ["{replicas / "r1"}", "{replicas / "r2"}"]'),
    }
    assert {k for k in stages} == {
        c.split("]")[0].removeprefix("stages[")
        for c, v in VERDICTS.items()
        if isinstance(v, Guarded) or c == "stages[cache].shared_with"
    }
    with cluster.api() as api:
        for kind, (op, fields) in stages.items():
            for shared in (False, True):
                policy = (
                    HEADER
                    + f"""\
  tenants:
    - {{name: a, classifiers: [{{kind: path_prefix, value: /a}}]}}
    - {{name: b, classifiers: [{{kind: path_prefix, value: /b}}]}}
  stages:
    - {{name: s/{kind.replace("_", "-")}, kind: {kind}, owner: a, {fields}{", shared_with: [b]" if shared else ""}}}
  rules:
    - {{name: b-to-a, priority: 10, match: {{tenant: b, ops: [{op}]}},
       detours: [{{what: io, to: {{kind: stage, target: s/{kind.replace("_", "-")}}}}}]}}
"""
                )
                r = api.post(
                    "/api/v1/policies?dry_run=true",
                    content=policy.encode(),
                    headers={"content-type": "application/yaml"},
                )
                if shared:
                    assert r.status_code < 300, (kind, r.text)
                else:
                    assert r.status_code == 422, (kind, r.text)
                    body = r.json()
                    assert body["type"].endswith("/unsafe-rules"), (kind, body)
                    assert [v["check"] for v in body["violations"]] == ["isolation"], (kind, body)


# --- live: the choices shown with IO here -------------------------------------------------

BLOCK = 4096
FILE_BYTES = 2 << 20
BLOCKS = FILE_BYTES // BLOCK
RANGE_END = 1 << 20
USER = 4242
HANDLE, HANDLE_ELSEWHERE = 5, 6  # of the measuring device's 8; no other stage here uses the device


def fresh_report(cluster: Cluster) -> dict[str, Any]:
    """A telemetry report the agent began after the caller's IO returned: the report after
    the next one (the next may have been under way during the IO)."""
    seen = len(cluster.agent_messages("telemetry", HOST))
    return wait_for(
        "two more telemetry reports",
        lambda: (m := cluster.agent_messages("telemetry", HOST)) and len(m) >= seen + 2 and m[-1],
        timeout=60,
    )


def stage_reports(cluster: Cluster) -> dict[str, dict]:
    return {s["name"]: s for s in fresh_report(cluster).get("stages") or []}


def handle_writes(report: dict[str, Any], device: str) -> dict[int, int]:
    """Bytes the measuring device counted per placement handle."""
    (dev,) = [d for d in report.get("devices") or [] if d["name"] == device]
    return {h["handle"]: h["host_bytes_written"] for h in dev.get("handles") or []}


def read_all(path: Path, as_uid: int | None = None) -> bytes:
    """Reads the file in whole 64 KiB blocks, in a child as `as_uid` when given."""
    if as_uid is None:
        return path.read_bytes()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the uid, read, send the bytes' length
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(as_uid)
            os.setuid(as_uid)
            n = len(path.read_bytes())
            os.write(w, str(n).encode())
        finally:
            os._exit(0)
    os.close(w)
    n = int(os.read(r, 64) or b"-1")
    os.close(r)
    os.waitpid(pid, 0)
    return b"\0" * n


def test_choices_this_file_shows_with_io(cluster: Cluster, home: Path) -> None:
    data, mnt, replicas = home / "data", home / "mnt", cluster.tmp / "replicas"
    for d in (
        "web",
        "webx",
        "shared",
        "ranged",
        "prio",
        "uid",
        "rep",
        "repx",
        "other",
        "logged",
        "lru",
        "fifo",
        "tail",
        "tailx",
        "scrubbed",
    ):
        (data / d).mkdir()
        os.chmod(data / d, 0o755)
        payload = os.urandom(FILE_BYTES)
        for name in ("f", "g"):
            (data / d / name).write_bytes(payload)
            os.chmod(data / d / name, 0o644)
    for r in ("r1", "r2", "r3", "log", "c1", "c2"):
        (replicas / r).mkdir()
    # The uid tenant's reader must reach the mount: pytest's directories are root's alone.
    for parent in mnt.parents:
        if parent == Path("/tmp") or parent == Path("/"):
            break
        os.chmod(parent, parent.stat().st_mode | 0o011)
    policy = (
        HEADER
        + f"""\
  tenants:
    - {{name: web, classifiers: [{{kind: path_prefix, value: /web}}]}}
    - {{name: friend, classifiers: [{{kind: path_prefix, value: /shared}}]}}
    - {{name: user, classifiers: [{{kind: uid, value: "{USER}"}}]}}
    - {{name: rep, classifiers: [{{kind: path_prefix, value: /rep}}]}}
    - {{name: logt, classifiers: [{{kind: path_prefix, value: /logged}}]}}
    - {{name: repx, classifiers: [{{kind: path_prefix, value: /repx}}]}}
    - {{name: tailt, classifiers: [{{kind: path_prefix, value: /tail}}]}}
    - {{name: tailx, classifiers: [{{kind: path_prefix, value: /tailx}}]}}
    - {{name: scrubbed, classifiers: [{{kind: path_prefix, value: /scrubbed}}]}}
  stages:
    - {{name: cache/web, kind: cache, owner: web, engine: loc, device: flash0, size_bytes: {8 << 20},
       eviction: lru, level: 1, write_mode: through, shared_with: [friend]}}
    - {{name: cache/ranged, kind: cache, engine: dram, size_bytes: {4 << 20}}}
    - {{name: cache/first, kind: cache, engine: dram, size_bytes: {4 << 20}}}
    - {{name: cache/second, kind: cache, engine: dram, size_bytes: {4 << 20}}}
    - {{name: cache/user, kind: cache, owner: user, engine: dram, size_bytes: {4 << 20}}}
    - {{name: cache/lru, kind: cache, engine: dram, size_bytes: {1 << 20}, eviction: lru}}
    - {{name: cache/fifo, kind: cache, engine: dram, size_bytes: {1 << 20}, eviction: fifo}}
    - {{name: cache/elsewhere, kind: cache, engine: dram, size_bytes: {4 << 20}, hosts: [host-elsewhere]}}
    - {{name: reps, kind: replica_set, owner: rep, write_set: ["{replicas / "r1"}", "{replicas / "r2"}"],
       read_set: ["{replicas / "r1"}"]}}
    - {{name: log/l, kind: log, owner: logt, dir: "{replicas / "log"}"}}
    - {{name: log/elsewhere, kind: log, dir: "{replicas / "log"}", hosts: [host-elsewhere]}}
    - {{name: qos/elsewhere, kind: qos, max_iops: 1000, hosts: [host-elsewhere]}}
    - {{name: reps/elsewhere, kind: replica_set, owner: repx, write_set: ["{replicas / "r3"}"],
       read_set: ["{replicas / "r3"}"], hosts: [host-elsewhere]}}
    - {{name: route/tail, kind: tail_latency, owner: tailt, candidates: ["{replicas / "c1"}", "{replicas / "c2"}"]}}
    - {{name: route/elsewhere, kind: tail_latency, owner: tailx, candidates: ["{replicas / "c1"}", "{replicas / "c2"}"],
       hosts: [host-elsewhere]}}
    - {{name: fdp/web, kind: fdp_placement, owner: web, device: flash0, placement_handle: {HANDLE}}}
    - {{name: fdp/elsewhere, kind: fdp_placement, owner: web, device: flash0, placement_handle: {HANDLE_ELSEWHERE},
       hosts: [host-elsewhere]}}
    - {{name: scrub/here, kind: scrub, owner: scrubbed, paths: [/scrubbed], every_s: 3600, hosts: [{HOST}]}}
    - {{name: scrub/elsewhere, kind: scrub, owner: scrubbed, paths: [/scrubbed], every_s: 3600, hosts: [host-elsewhere]}}
  rules:
    - {{name: web-io, priority: 10, match: {{tenant: web}}, detours: [{{what: io, to: {{kind: stage, target: cache/web}}}}]}}
    - {{name: friend-reads, priority: 10, match: {{tenant: friend, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: cache/web}}}}]}}
    - {{name: ranged, priority: 10, match: {{path_prefix: /ranged, ops: [read], range: {{start: 0, end: {RANGE_END}}}}},
       detours: [{{what: io, to: {{kind: stage, target: cache/ranged}}}}]}}
    - {{name: prio-first, priority: 10, match: {{path_prefix: /prio, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: cache/first}}}}]}}
    - {{name: prio-second, priority: 20, match: {{path_prefix: /prio, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: cache/second}}}}]}}
    - {{name: user-reads, priority: 10, match: {{tenant: user, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: cache/user}}}}]}}
    - {{name: elsewhere, priority: 5, hosts: [host-elsewhere], match: {{path_prefix: /other}},
       detours: [{{what: io, to: {{kind: stage, target: cache/ranged}}}}]}}
    - {{name: rep-io, priority: 10, match: {{tenant: rep}}, detours: [{{what: io, to: {{kind: stage, target: reps}}}}]}}
    - {{name: lru, priority: 10, match: {{path_prefix: /lru, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: cache/lru}}}}]}}
    - {{name: fifo, priority: 10, match: {{path_prefix: /fifo, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: cache/fifo}}}}]}}
    - {{name: log-writes, priority: 10, match: {{tenant: logt, ops: [write]}},
       detours: [{{what: io, to: {{kind: stage, target: log/l}}}}]}}
    - {{name: repx-io, priority: 10, match: {{tenant: repx}}, detours: [{{what: io, to: {{kind: stage, target: reps/elsewhere}}}}]}}
    - {{name: tail-reads, priority: 10, match: {{tenant: tailt, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: route/tail}}}}]}}
    - {{name: tailx-reads, priority: 10, match: {{tenant: tailx, ops: [read]}},
       detours: [{{what: io, to: {{kind: stage, target: route/elsewhere}}}}]}}
"""
    )
    # Another host (an agent without a mount) for the choices scoped to it.
    cluster.start_agent("host-elsewhere")
    wait_for(
        "host-elsewhere to enrol and ack",
        lambda: (x := cluster.host("host-elsewhere")) and x["acked_generation"] >= 1,
        timeout=60,
    )
    with cluster.api() as api:
        apply(api, cluster, policy)

    # Stages scoped to another host are shipped there, not here (every kind, one filter).
    shipped = {
        h: {st["name"] for st in json.loads(cluster.redis().get(f"lachesis:agent:{h}:desired"))["stages"]}
        for h in (HOST, "host-elsewhere")
    }
    scoped = {"cache/elsewhere", "log/elsewhere", "qos/elsewhere"}
    assert scoped <= shipped["host-elsewhere"] and not scoped & shipped[HOST], shipped
    before = stage_reports(cluster)
    assert "cache/elsewhere" not in before, sorted(before)  # stages[cache].hosts
    assert before["cache/web"]["owner"] == "web", before["cache/web"]
    assert before["cache/web"]["installed_bytes"] == 8 << 20, before["cache/web"]  # size_bytes, device
    assert all(
        before[s]["misses"] == 0 for s in ("cache/web", "cache/ranged", "cache/first", "cache/second", "cache/user")
    ), before
    handles_before = handle_writes(fresh_report(cluster), "flash0")

    # A sibling whose name starts like the tenant's prefix is not the tenant's; another host's
    # rule (/other to cache/ranged) is not installed here.
    read_all(mnt / "webx" / "f")
    read_all(mnt / "other" / "f")
    # The tenant's, its friend's through the stage shared with it, a range, two priorities,
    # the uid tenant's (as the uid, then as root: root's is not the tenant's).
    read_all(mnt / "web" / "f")
    read_all(mnt / "shared" / "f")
    # The range's file: its second MiB first (outside the range), then its first, in 64 KiB
    # preads, so no request the kernel makes for the first spans into the second.
    fd = os.open(mnt / "ranged" / "f", os.O_RDONLY)
    try:
        for off in [*range(RANGE_END, FILE_BYTES, 1 << 16), *range(0, RANGE_END, 1 << 16)]:
            assert len(os.pread(fd, 1 << 16, off)) == 1 << 16
    finally:
        os.close(fd)
    read_all(mnt / "prio" / "f")
    assert len(read_all(mnt / "uid" / "f", as_uid=USER)) == FILE_BYTES
    read_all(mnt / "uid" / "g")  # another file (the page cache would serve the first): root's
    # Eviction, the same O_DIRECT reads (the page cache would answer re-reads) through a 1 MiB
    # lru and a 1 MiB fifo stage (about 254 blocks with their keys): A (128 blocks), B (96),
    # A again (hits), C (64). C evicts fewer blocks than B holds: lru evicts B's (A was used
    # since), fifo A's (inserted first), and a last pass over A then hits through lru and
    # misses through fifo (each miss evicting the next of A's blocks).
    passes = [(0, 512), (512, 896), (0, 512), (896, 1152), (0, 512)]
    for d in ("lru", "fifo"):
        fd = os.open(mnt / d / "f", os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, 1 << 16)
        try:
            for start, end in passes:
                for off in range(start << 10, end << 10, 1 << 16):
                    assert os.preadv(fd, [buf], off) == 1 << 16
        finally:
            os.close(fd)

    # A write-through write under the tenant: counted by the stage, in the backing file.
    new = os.urandom(BLOCK * 4)
    with open(mnt / "web" / "f", "r+b") as f:
        f.write(new)
    assert (data / "web" / "f").read_bytes()[: len(new)] == new

    report = fresh_report(cluster)
    after = {st["name"]: st for st in report.get("stages") or []}
    web, ranged = after["cache/web"], after["cache/ranged"]
    # The placement: web's cache writes (its fills) went to flash0 under its handle, none under
    # the handle of the placement scoped to another host.
    handles = handle_writes(report, "flash0")
    grew = {h: n - handles_before.get(h, 0) for h, n in handles.items() if n > handles_before.get(h, 0)}
    assert grew.get(HANDLE, 0) >= 2 * FILE_BYTES and HANDLE_ELSEWHERE not in grew, (handles_before, handles)
    assert set(grew) == {HANDLE}, grew
    # web's own file and friend's: every block missed once; webx's and root's none.
    assert web["misses"] == 2 * BLOCKS, web
    assert web["bytes_written"] >= len(new), web
    # Only the blocks of reads inside [0, 1 MiB) reach the range's stage; the other host's
    # rule sent /other nowhere.
    assert ranged["misses"] == RANGE_END // BLOCK, ranged
    assert (after["cache/first"]["misses"], after["cache/second"]["misses"]) == (BLOCKS, 0), after
    assert after["cache/user"]["misses"] == BLOCKS, after["cache/user"]
    lru, fifo = after["cache/lru"], after["cache/fifo"]
    assert lru["misses"] == 128 + 96 + 64 and lru["evictions"] > 0, lru  # A, B, C once each
    assert fifo["misses"] >= lru["misses"] + 64, (lru, fifo)

    # The log stage: the tenant's writes land in log files under its dir, not in the backing
    # file, and read back through the mount.
    logged = os.urandom(BLOCK * 8)
    with open(mnt / "logged" / "f", "r+b") as f:
        f.write(logged)
    in_log = sum(p.stat().st_size for p in (replicas / "log").rglob("*") if p.is_file())
    assert in_log >= len(logged), list((replicas / "log").rglob("*"))
    assert (data / "logged" / "f").read_bytes()[: len(logged)] != logged
    fd = os.open(mnt / "logged" / "f", os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, len(logged))
        assert os.preadv(fd, [buf], 0) == len(logged)
        assert bytes(buf) == logged
    finally:
        os.close(fd)

    # The replica set: a write lands in every write_set replica, a read comes from read_set.
    (mnt / "rep" / "new").write_bytes(b"replicated")
    written = [p for r in ("r1", "r2") for p in (replicas / r).rglob("new")]
    assert len(written) == 2 and all(p.read_bytes() == b"replicated" for p in written), written
    assert not (data / "rep" / "new").exists() or (data / "rep" / "new").read_bytes() != b"replicated"
    # A file the mount never cached, different in the backing directory and in the read_set
    # replica: a read under the rule returns the replica's bytes.
    beside = next(p for p in written if "r1" in p.parts).parent / "fresh"
    beside.write_bytes(b"in-r1")
    (data / "rep" / "fresh").write_bytes(b"local")
    assert (mnt / "rep" / "fresh").read_bytes() == b"in-r1"

    # A replica set scoped to another host: its tenant's write lands in the backing file here.
    (mnt / "repx" / "new").write_bytes(b"not replicated")
    assert (data / "repx" / "new").read_bytes() == b"not replicated"
    assert not list((replicas / "r3").rglob("new"))

    # Tail-latency candidates: the same file, different in each candidate and in the backing
    # directory, laid out in the candidates as the replica set's write laid it out in r1.
    layout = next(p for p in written if "r1" in p.parts).relative_to(replicas / "r1").parent
    for name, body in (("c1", b"from c1!" * 512), ("c2", b"from c2!" * 512)):
        where = replicas / name / layout.parent / "tail"
        where.mkdir(parents=True, exist_ok=True)
        (where / "f").write_bytes(body)
        (replicas / name / layout.parent / "tailx").mkdir(parents=True, exist_ok=True)
        (replicas / name / layout.parent / "tailx" / "f").write_bytes(body)
    for d in ("tail", "tailx"):
        (data / d / "f").write_bytes(b"backing!" * 512)

    def direct_reads(path: Path, n: int) -> set[bytes]:
        """`n` O_DIRECT reads of the file's first 4 KiB (the page cache would answer re-reads)."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, BLOCK)
        try:
            return {bytes(buf[: os.preadv(fd, [buf], 0)]) for _ in range(n)}
        finally:
            os.close(fd)

    # Reads alternate over the candidates (each read the next one), never the backing file.
    assert direct_reads(mnt / "tail" / "f", 4) == {b"from c1!" * 512, b"from c2!" * 512}
    # One scoped to another host sends nothing here: reads come from the backing file.
    assert direct_reads(mnt / "tailx" / "f", 2) == {b"backing!" * 512}

    # Scrubs: the one scoped here declares its job here (and the agent takes it), the one
    # scoped to the other host there only.
    with cluster.api() as api:
        jobs = wait_for(
            "both scrubs' jobs", lambda: len(j := api.get("/api/v1/apps/declared-io").json()) == 2 and j, timeout=60
        )
    assert {(j["source"], j["host"]) for j in jobs} == {("scrub/here", HOST), ("scrub/elsewhere", "host-elsewhere")}
    here = next(j["id"] for j in jobs if j["source"] == "scrub/here")
    wait_for(
        "the agent to report the scrub's job",
        lambda: any(j["id"] == here for j in (cluster.agent_messages("telemetry", HOST)[-1].get("declared_io") or [])),
        timeout=60,
    )
