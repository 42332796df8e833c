"""/api/v1/stages: Moirai's cache API (create, configure, remove, stats) over the shipped
stage contract."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import TENANT, FakeAgent, assert_problem, enroll, rule_body, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from lachesis_controller.bus.messages import Telemetry

CACHE = {"name": "cache/web", "kind": "cache", "owner": "web", "size_bytes": 64 << 20, "write_mode": "back"}


@pytest.fixture
def host(client: TestClient, agents: Callable[[str], FakeAgent]) -> FakeAgent:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    agent = agents("host-a")
    enroll(client, agent)
    return agent


def shipped(agent: FakeAgent, generation: int) -> dict[str, Any]:
    return {s["name"]: s for s in agent.wait_desired(generation).get("stages", [])}


def test_create_ships_the_stage_and_configure_resizes_it(client: TestClient, host: FakeAgent) -> None:
    generation = host.desired()["generation"]
    created = client.post("/api/v1/stages", json=CACHE)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/api/v1/stages/cache/web"
    assert created.json()["source"] == "api"
    stage = shipped(host, generation + 1)["cache/web"]
    assert (stage["engine"], stage["size_bytes"], stage["write_mode"], stage["owner"]) == (
        "dram",
        64 << 20,
        "back",
        "web",
    )

    resized = client.patch("/api/v1/stages/cache/web", json={"size_bytes": 128 << 20})
    assert resized.status_code == 200, resized.text
    assert shipped(host, generation + 2)["cache/web"]["size_bytes"] == 128 << 20
    assert client.get("/api/v1/stages/cache/web").json()["hosts"][0]["allocated_bytes"] == 128 << 20

    # A rule may now send IO there; the stage cannot go while it does.
    assert client.post("/api/v1/rules", json=rule_body("r1")).status_code == 201
    assert_problem(client.delete("/api/v1/stages/cache/web"), 409)
    assert client.delete("/api/v1/rules/r1").status_code == 200
    assert client.delete("/api/v1/stages/cache/web").status_code == 204
    assert "cache/web" not in shipped(host, generation + 5)
    assert_problem(client.get("/api/v1/stages/cache/web"), 404)


def test_bad_input_is_refused_and_changes_nothing(client: TestClient, host: FakeAgent, db: Engine) -> None:
    assert client.post("/api/v1/stages", json=CACHE).status_code == 201
    before = snapshot(db)
    cases = [
        (client.post("/api/v1/stages", json=CACHE), 409),
        (client.post("/api/v1/stages", json={**CACHE, "name": "cache/x", "owner": "nobody"}), 422),
        (client.post("/api/v1/stages", json={**CACHE, "name": "cache/x", "size_bytes": -1}), 422),
        (client.post("/api/v1/stages", json={**CACHE, "name": "cache/x", "size_bytes": 1e308}), 422),
        (client.post("/api/v1/stages", json={**CACHE, "name": "Cache X"}), 422),
        (client.post("/api/v1/stages", json={**CACHE, "name": "cache/x", "kind": "teleport"}), 422),
        (client.post("/api/v1/stages", json={**CACHE, "name": "cache/x", "parent": "cache/web"}), 422),
        (client.patch("/api/v1/stages/cache/web", json={}), 422),
        (client.patch("/api/v1/stages/cache/web", json={"size_bytes": 0}), 422),
        (client.patch("/api/v1/stages/cache/web", json={"colour": "red"}), 422),
        (client.patch("/api/v1/stages/cache/none", json={"size_bytes": 1 << 20}), 404),
        (client.delete("/api/v1/stages/cache/none"), 404),
    ]
    for response, status in cases:
        assert_problem(response, status)
    assert snapshot(db) == before


def test_policy_stages_are_listed_but_changed_through_their_policy(client: TestClient, host: FakeAgent) -> None:
    policy = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: p}
spec:
  stages:
    - {name: cache/p, kind: cache, owner: web, size_bytes: 16777216}
"""
    assert client.post(
        "/api/v1/policies", content=policy.encode(), headers={"content-type": "application/yaml"}
    ).status_code in (200, 201)
    listed = {s["name"]: s for s in client.get("/api/v1/stages").json()}
    assert listed["cache/p"]["source"] == "policy/p"
    assert_problem(client.patch("/api/v1/stages/cache/p", json={"size_bytes": 1 << 30}), 409)
    assert_problem(client.delete("/api/v1/stages/cache/p"), 409)


def test_stats_are_what_the_agent_reports(client: TestClient, host: FakeAgent) -> None:
    assert client.post("/api/v1/stages", json=CACHE).status_code == 201
    store = client.app.state.telemetry  # type: ignore[attr-defined]
    for at, hits, misses in [("10:00:00", 10, 90), ("10:00:05", 70, 130)]:
        store.ingest(
            Telemetry.model_validate(
                {
                    "schema": "lachesis.telemetry/v1",
                    "host_id": "host-a",
                    "sent_at": f"2026-11-24T{at}Z",
                    "interval_s": 5.0,
                    "tenants": [],
                    "devices": [],
                    "stages": [
                        {
                            "name": "cache/web",
                            "kind": "cache",
                            "owner": "web",
                            "engine": "dram",
                            "size_bytes": 64 << 20,
                            "installed_bytes": 64 << 20,
                            "hits": hits,
                            "misses": misses,
                            "dirty_bytes": 4096,
                        }
                    ],
                }
            )
        )
    (row,) = client.get("/api/v1/stages/cache/web/stats").json()
    assert (row["host_id"], row["hits"], row["misses"], row["installed_bytes"], row["dirty_bytes"]) == (
        "host-a",
        70,
        130,
        64 << 20,
        4096,
    )
    assert row["hit_ratio"] == pytest.approx(70 / 200)


def test_a_kv_stage_is_served_with_its_front_end_and_engine_parts(client: TestClient, host: FakeAgent) -> None:
    assert client.post("/api/v1/stages", json={**CACHE, "engine": "hybrid"}).status_code == 201
    parts = [
        {
            "part": "kangaroo",
            "handles": [1, 2],
            "objects": 150,
            "gets": 160,
            "hits": 150,
            "flash_bytes_written": 1 << 20,
        },
        {"part": "loc", "handles": [3], "objects": 4, "gets": 5, "hits": 4, "flash_bytes_written": 2 << 20},
    ]
    client.app.state.telemetry.ingest(
        Telemetry.model_validate(
            {  # type: ignore[attr-defined]
                "schema": "lachesis.telemetry/v1",
                "host_id": "host-a",
                "sent_at": "2026-11-25T10:00:00Z",
                "interval_s": 5.0,
                "tenants": [],
                "devices": [],
                "stages": [
                    {
                        "name": "cache/web",
                        "kind": "cache",
                        "owner": "web",
                        "engine": "hybrid",
                        "size_bytes": 64 << 20,
                        "installed_bytes": 64 << 20,
                        "hits": 154,
                        "misses": 11,
                        "front_end": "kv",
                        "parts": parts,
                    }
                ],
            }
        )
    )
    (row,) = client.get("/api/v1/stages/cache/web/stats").json()
    assert row["front_end"] == "kv"
    # This agent reports no DRAM per part (older agents do not): served as unknown, not as 0.
    assert row["parts"] == [{**p, "dram_bytes": None} for p in parts]


def test_a_policy_ships_its_own_stages_in_the_generation_it_causes(client: TestClient, host: FakeAgent) -> None:
    generation = host.desired()["generation"]
    policy = """\
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: q}
spec:
  stages:
    - {name: cache/q, kind: cache, owner: web, size_bytes: 16777216}
  rules:
    - {name: q, priority: 5, match: {tenant: web}, detours: [{what: io, to: {kind: stage, target: cache/q}}]}
"""
    r = client.post("/api/v1/policies", content=policy.encode(), headers={"content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    state = host.wait_desired(generation + 1)
    assert [s["name"] for s in state["stages"]] == ["cache/q"]
    assert [d["to"]["target"] for d in state["rules"][0]["detours"]] == ["cache/q"]


def test_a_stage_name_of_128_characters_is_stored_and_audited(client: TestClient, host: FakeAgent) -> None:
    name = "cache/" + "a" * 122
    created = client.post("/api/v1/stages", json={**CACHE, "name": name})
    assert created.status_code == 201, created.text
    assert client.get(f"/api/v1/stages/{name}").json()["name"] == name
    assert_problem(client.post("/api/v1/stages", json={**CACHE, "name": name + "b"}), 422)
