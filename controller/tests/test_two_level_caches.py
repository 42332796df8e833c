"""Two-level caches end to end in the controller, without agents: the loop splits a
two-level tenant's share (Moirai's α), the split is recorded with the allocation, and the
stage contract ships a1 to the host's level-1 stage and a2 to the server-level stage."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from lachesis_controller.allocation import AllocationLoop, Curve, Decision, LoopConfig, TenantCurve, split_two_level
from lachesis_controller.allocation.service import shares, two_level_specs
from lachesis_controller.allocation.two_level import TwoLevelSpec, bandwidth
from lachesis_controller.bus.messages import DesiredState
from lachesis_controller.stages.resolve import HostView, shipped_stages

CURVE = Curve.from_points(np.linspace(0, 1000, 51), 1 - 0.9 * np.sqrt(np.linspace(0, 1, 51)))
BW = {"memory_bytes_per_s": 10_000.0, "network_bytes_per_s": 2_000.0, "storage_bytes_per_s": 200.0}


def cache(name: str, owner: str | None, size: int = 1 << 30, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "cache", "owner": owner, "size_bytes": size, "level": 1, "eviction": "lru", **extra}


def declared() -> list[dict[str, Any]]:
    return [
        cache(
            "cache/a-l1", "a", parent="cache/a-l2", two_level={**BW, "sla_bytes_per_s": 3_000, "server_max_bytes": 1000}
        ),
        cache("cache/a-l2", "a", 1 << 31, level=2, serves=["tenants/a"]),
        cache("cache/b", "b"),
    ]


def test_the_loop_gives_a_two_level_tenant_its_split_and_the_others_their_share() -> None:
    specs = two_level_specs(declared())
    assert specs == {"a": TwoLevelSpec(10_000.0, 2_000.0, 200.0, 3_000.0, 1000.0)}
    tenants = {"a": TenantCurve(CURVE, 100.0), "b": TenantCurve(CURVE, 100.0)}
    published: list[Decision] = []
    loop = AllocationLoop(lambda: tenants, published.append, LoopConfig(capacity=600), two_level=lambda: specs)
    d = loop.step()
    assert d.rolled_out and set(d.levels) == {"a"}
    split = d.levels["a"]
    # Within a's single-level share (300 of 600) and the server maximum, as the split says.
    want = split_two_level(
        "a",
        CURVE,
        sla=3_000,
        memory=10_000,
        network=2_000,
        storage=200,
        hypervisor_max=300,
        storage_max=1000,
        epsilon=0.6,
    )
    assert split == want and split.bandwidth >= 3_000
    assert d.proposal is not None
    assert d.proposal.sizes["a"] == split.hypervisor and d.proposal.sizes["b"] == pytest.approx(300)
    rec = shares({n: loop.last_demands[n] for n in tenants}, d.proposal, d.levels)
    assert rec["a"]["size_bytes"] == split.hypervisor
    assert rec["a"]["levels"] == {
        "alpha": split.alpha,
        "host_bytes": split.hypervisor,
        "server_bytes": split.storage,
        "hit_ratio": split.hit_ratio,
        "bandwidth": split.bandwidth,
    }
    assert "levels" not in rec["b"]


def test_without_an_sla_the_split_reaches_the_best_the_maxima_allow() -> None:
    specs = {"a": TwoLevelSpec(10_000.0, 2_000.0, 200.0, None, 1000.0)}
    loop = AllocationLoop(
        lambda: {"a": TenantCurve(CURVE, 1.0)}, lambda d: None, LoopConfig(capacity=300), two_level=lambda: specs
    )
    split = loop.step().levels["a"]
    best = float(bandwidth(CURVE, 300, 1000, 10_000, 2_000, 200))
    assert split.bandwidth == pytest.approx(best) and split.hypervisor <= 300


def test_an_unreachable_sla_keeps_the_allocation_in_force() -> None:
    specs = {"a": TwoLevelSpec(10_000.0, 2_000.0, 200.0, 9_000.0, 10.0)}
    loop = AllocationLoop(
        lambda: {"a": TenantCurve(CURVE, 1.0)}, lambda d: None, LoopConfig(capacity=10), two_level=lambda: specs
    )
    d = loop.step()
    assert not d.rolled_out and "bandwidth SLA 9000" in d.reason and loop.current is None


def test_level_one_ships_a1_and_the_server_level_a2_with_its_directories() -> None:
    host = HostView("host-a")
    stages = {s["name"]: s for s in shipped_stages(declared(), host, {"a": 120, "b": 480}, {"a": 700})}
    assert stages["cache/a-l1"]["size_bytes"] == 120 and stages["cache/a-l1"]["next"] == "cache/a-l2"
    assert "serves" not in stages["cache/a-l1"]
    assert stages["cache/a-l2"]["size_bytes"] == 700 and stages["cache/a-l2"]["serves"] == ["tenants/a"]
    assert stages["cache/b"]["size_bytes"] == 480
    # No split in force: the declared sizes.
    plain = {s["name"]: s["size_bytes"] for s in shipped_stages(declared(), host, None)}
    assert plain["cache/a-l2"] == 1 << 31
    # What ships is a valid desired state.
    DesiredState.model_validate(
        {
            "schema": "lachesis.desired-state/v1",
            "host_id": "host-a",
            "generation": 1,
            "rollout_id": None,
            "issued_at": "2026-11-24T10:00:00Z",
            "traceparent": None,
            "tenants": [],
            "rules": [],
            "stages": list(stages.values()),
        }
    )


def test_a_level_one_stage_whose_parent_runs_on_another_host_chains_nothing() -> None:
    stages = [{**declared()[0], "hosts": ["host-a"]}, {**declared()[1], "hosts": ["storage-1"]}]
    (l1,) = shipped_stages(stages, HostView("host-a"), None)
    assert (l1["name"], l1["next"]) == ("cache/a-l1", None)
    (l2,) = shipped_stages(stages, HostView("storage-1"), None)
    assert (l2["name"], l2["serves"]) == ("cache/a-l2", ["tenants/a"])


def test_an_exclusive_server_level_ships_exclusive_and_only_with_serves() -> None:
    l2 = {**declared()[1], "exclusive": True}
    (s,) = shipped_stages([l2], HostView("storage-1"), None)
    assert s["exclusive"] is True
    (plain,) = shipped_stages([declared()[1]], HostView("storage-1"), None)
    assert "exclusive" not in plain  # absent unless set: older agents read the same contract
    # exclusive on a stage without serves ships nothing of it (the policy refuses it).
    (l1,) = shipped_stages([{**declared()[0], "exclusive": True}], HostView("host-a"), None)
    assert "exclusive" not in l1


def test_a_shared_server_level_is_one_pool_sized_by_the_sum_of_its_tenants_a2() -> None:
    pool = cache("cache/pool", None, 1 << 31, level=2, serves=["tenants/a", "tenants/b"], shared_with=["a", "b"])
    (s,) = shipped_stages([pool], HostView("host-a"), None, {"a": 700, "b": 300, "c": 5})
    assert s["size_bytes"] == 1000 and s["serves"] == ["tenants/a", "tenants/b"]


POLICY = """
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: two-level}
spec:
  tenants:
    - {name: media, classifiers: [{kind: path_prefix, value: /srv/media/}]}
  stages:
    - name: cache/media-l1
      kind: cache
      owner: media
      parent: cache/media-l2
      size_bytes: 67108864
      two_level: {memory_bytes_per_s: 10000000000, network_bytes_per_s: 1000000000, storage_bytes_per_s: 100000000,
                  server_max_bytes: 268435456}
    - {name: cache/media-l2, kind: cache, owner: media, level: 2, size_bytes: 268435456, serves: [media]}
  rules:
    - name: media-reads
      priority: 10
      match: {tenant: media, ops: [read]}
      detours:
        - {what: io, to: {kind: stage, target: cache/media-l1}}
        - {what: io, to: {kind: file, target: "tcp://storage-1:7070/media"}}
"""


def test_rest_shows_the_split_in_force_and_each_levels_hits(client: Any, agents: Any, db: Any) -> None:
    from conftest import enroll
    from sqlalchemy.orm import Session

    from lachesis_controller.bus.messages import Telemetry
    from lachesis_controller.db import utcnow
    from lachesis_controller.models import CacheAllocation

    for host in ("host-a", "storage-1"):
        enroll(client, agents(host))
    applied = client.post("/api/v1/policies", content=POLICY, headers={"content-type": "application/yaml"})
    assert applied.status_code == 201, applied.text
    before = client.get("/api/v1/apps/two-level").json()["tenants"]
    assert [(t["tenant"], t["alpha"]) for t in before] == [("media", None)]
    assert [lv["shipped_bytes"] for lv in before[0]["levels"]] == [64 << 20, 256 << 20]
    with Session(db) as s, s.begin():
        s.merge(
            CacheAllocation(
                state="current",
                capacity_bytes=1 << 30,
                epsilon_bytes=1 << 20,
                method="optimal",
                utility=1.0,
                upper_bound=1.0,
                optimal=True,
                computed_at=utcnow(),
                computed_by="test",
                tenants={
                    "media": {
                        "size_bytes": 32 << 20,
                        "levels": {
                            "alpha": 0.2,
                            "host_bytes": 32 << 20,
                            "server_bytes": 128 << 20,
                            "hit_ratio": 0.7,
                            "bandwidth": 5e8,
                        },
                    }
                },
            )
        )
    store = client.app.state.telemetry
    for host, stage, hits, misses in [("host-a", "cache/media-l1", 30, 70), ("storage-1", "cache/media-l2", 20, 50)]:
        store.ingest(
            Telemetry.model_validate(
                {
                    "schema": "lachesis.telemetry/v1",
                    "host_id": host,
                    "sent_at": "2026-11-24T10:00:00Z",
                    "interval_s": 5.0,
                    "tenants": [],
                    "devices": [],
                    "stages": [
                        {
                            "name": stage,
                            "kind": "cache",
                            "owner": "media",
                            "engine": "dram",
                            "size_bytes": 1 << 20,
                            "installed_bytes": 1 << 20,
                            "hits": hits,
                            "misses": misses,
                        }
                    ],
                }
            )
        )
    (t,) = client.get("/api/v1/apps/two-level").json()["tenants"]
    assert (t["alpha"], t["host_bytes"], t["server_bytes"]) == (0.2, 32 << 20, 128 << 20)
    host_level, server_level = t["levels"]
    assert (host_level["level"], host_level["shipped_bytes"], host_level["hits"], host_level["hosts"]) == (
        "host",
        32 << 20,
        30,
        ["host-a"],
    )
    assert (server_level["level"], server_level["shipped_bytes"], server_level["hits"], server_level["misses"]) == (
        "server",
        128 << 20,
        20,
        50,
    )
    assert server_level["hit_ratio"] == pytest.approx(20 / 70)
    assert (server_level["exclusive"], server_level["demoted_blocks"], host_level["demoted_blocks"]) == (
        False,
        None,
        None,
    )


def test_rest_shows_what_level_one_demoted_to_an_exclusive_server_level(client: Any, agents: Any) -> None:
    from conftest import enroll

    from lachesis_controller.bus.messages import Telemetry

    for host in ("host-a", "storage-1"):
        enroll(client, agents(host))
    exclusive = POLICY.replace("serves: [media]}", "serves: [media], exclusive: true}")
    applied = client.post("/api/v1/policies", content=exclusive, headers={"content-type": "application/yaml"})
    assert applied.status_code == 201, applied.text
    store = client.app.state.telemetry
    for host, stage, extra in [
        ("host-a", "cache/media-l1", {"demoted_blocks": 52}),
        ("storage-1", "cache/media-l2", {"demoted_blocks": 50, "demotion_hits": 35}),
    ]:
        store.ingest(
            Telemetry.model_validate(
                {
                    "schema": "lachesis.telemetry/v1",
                    "host_id": host,
                    "sent_at": "2026-11-25T10:00:00Z",
                    "interval_s": 5.0,
                    "tenants": [],
                    "devices": [],
                    "stages": [
                        {
                            "name": stage,
                            "kind": "cache",
                            "owner": "media",
                            "engine": "dram",
                            "size_bytes": 1 << 20,
                            "installed_bytes": 1 << 20,
                            "hits": 10,
                            "misses": 5,
                            **extra,
                        }
                    ],
                }
            )
        )
    (t,) = client.get("/api/v1/apps/two-level").json()["tenants"]
    host_level, server_level = t["levels"]
    assert (host_level["demoted_blocks"], host_level["exclusive"]) == (52, False)
    assert (server_level["exclusive"], server_level["demoted_blocks"], server_level["demotion_hits"]) == (True, 50, 35)
    rows = {r["host_id"]: r for r in client.get("/api/v1/stages/cache/media-l2/stats").json()}
    assert (rows["storage-1"]["demoted_blocks"], rows["storage-1"]["demotion_hits"]) == (50, 35)


def test_exclusive_without_serves_is_refused_with_the_field(client: Any) -> None:
    bad = POLICY.replace("      parent: cache/media-l2\n", "      parent: cache/media-l2\n      exclusive: true\n")
    assert bad != POLICY
    r = client.post("/api/v1/policies", content=bad, headers={"content-type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert "spec.stages[0]" in r.text and "exclusive is for a server-level stage" in r.text
    assert client.get("/api/v1/policies").json() == []


def test_bandwidths_out_of_order_are_refused_with_the_field(client: Any) -> None:
    bad = POLICY.replace("memory_bytes_per_s: 10000000000", "memory_bytes_per_s: 10")
    r = client.post("/api/v1/policies", content=bad, headers={"content-type": "application/yaml"})
    assert r.status_code == 422, r.text
    assert "spec.stages[0].two_level" in r.text and "memory_bytes_per_s >= network_bytes_per_s" in r.text
    assert client.get("/api/v1/policies").json() == []
