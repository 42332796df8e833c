from __future__ import annotations

from typing import Any

import pytest
from conftest import TENANT, assert_problem, rule_body, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine


@pytest.fixture
def with_tenant(client: TestClient) -> TestClient:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    return client


def test_create_get_list_delete(with_tenant: TestClient) -> None:
    client = with_tenant
    body = rule_body(
        "r1",
        match={"tenant": "web", "ops": ["read", "write"], "path_prefix": "/data/", "range": {"start": 0, "end": 4096}},
    )
    created = client.post("/api/v1/rules", json=body)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/api/v1/rules/r1"
    out = created.json()
    assert out["rollout_id"]
    # What was sent comes back as sent: absent match fields stay absent.
    assert {k: out[k] for k in ("name", "priority", "match", "detours")} == {
        k: body[k] for k in ("name", "priority", "match", "detours")
    }
    assert out["hosts"] is None

    fetched = client.get("/api/v1/rules/r1").json()
    assert fetched["match"] == body["match"]
    assert "rollout_id" not in fetched

    deleted = client.delete("/api/v1/rules/r1")
    assert deleted.status_code == 200
    rollout = client.get(f"/api/v1/rollouts/{deleted.json()['rollout_id']}").json()
    assert rollout["cause"] == "rule r1 deleted"
    assert_problem(client.get("/api/v1/rules/r1"), 404)


def test_list_is_ordered_by_priority_then_name(with_tenant: TestClient) -> None:
    for name, priority in [("b", 5), ("a", 5), ("z", 1), ("c", 9)]:
        assert with_tenant.post("/api/v1/rules", json=rule_body(name, priority=priority)).status_code == 201
    assert [r["name"] for r in with_tenant.get("/api/v1/rules").json()] == ["z", "a", "b", "c"]


def test_replace(with_tenant: TestClient) -> None:
    with_tenant.post("/api/v1/rules", json=rule_body("r1"))
    replaced = with_tenant.put("/api/v1/rules/r1", json=rule_body("r1", priority=99, match={}))
    assert replaced.status_code == 200
    assert replaced.json()["priority"] == 99
    assert with_tenant.get("/api/v1/rules/r1").json()["match"] == {}


def test_tenant_named_by_a_rule_cannot_go_until_the_rule_does(with_tenant: TestClient) -> None:
    with_tenant.post("/api/v1/rules", json=rule_body("r1"))
    assert_problem(with_tenant.delete("/api/v1/tenants/web"), 409)
    with_tenant.delete("/api/v1/rules/r1")
    assert with_tenant.delete("/api/v1/tenants/web").status_code == 200


BAD_BODIES: list[tuple[str, dict[str, Any], str]] = [
    ("unknown top-level field", rule_body(colour="red"), "colour"),
    ("unknown match field", rule_body(match={"tenant": "web", "inode": 42}), "match.inode"),
    ("bad op", rule_body(match={"ops": ["truncate"]}), "match.ops[0]"),
    ("repeated op", rule_body(match={"ops": ["read", "read"]}), "match.ops"),
    ("null ops", rule_body(match={"ops": None}), "match.ops"),
    ("bad tenant name", rule_body(match={"tenant": "Web Servers"}), "match.tenant"),
    ("empty range", rule_body(match={"range": {"start": 10, "end": 10}}), "match.range.end"),
    ("negative priority", rule_body(priority=-1), "priority"),
    ("priority as text", rule_body(priority="10"), "priority"),
    ("no detours", rule_body(detours=[]), "detours"),
    (
        "bad detour kind",
        rule_body(detours=[{"what": "io", "to": {"kind": "tape", "target": "x"}}]),
        "detours[0].to.kind",
    ),
    ("missing match", {k: v for k, v in rule_body().items() if k != "match"}, "match"),
    ("bad name", rule_body("R_1"), "name"),
    ("empty host list", rule_body(hosts=[]), "hosts"),
    ("bad host id", rule_body(hosts=["Host A"]), "hosts[0]"),
    ("body not an object", [1, 2], "body"),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("case", "body", "field"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_invalid_body_is_422_naming_the_field(
    with_tenant: TestClient, db: Engine, case: str, body: Any, field: str
) -> None:
    before = snapshot(db)
    problem = assert_problem(with_tenant.post("/api/v1/rules", json=body), 422)
    fields = [e["field"] for e in problem["errors"]]
    assert field in fields, (case, problem)
    assert all(isinstance(e["message"], str) and e["message"] for e in problem["errors"])
    assert field in problem["detail"]
    assert snapshot(db) == before


def test_unknown_tenant_is_422_on_match_tenant(with_tenant: TestClient, db: Engine) -> None:
    before = snapshot(db)
    problem = assert_problem(with_tenant.post("/api/v1/rules", json=rule_body(match={"tenant": "nope"})), 422)
    assert problem["errors"] == [{"field": "match.tenant", "message": "no tenant named 'nope'"}]
    assert "match.tenant" in problem["detail"]
    assert snapshot(db) == before


def test_unknown_host_is_422_on_its_index(with_tenant: TestClient, db: Engine) -> None:
    before = snapshot(db)
    problem = assert_problem(with_tenant.post("/api/v1/rules", json=rule_body(hosts=["ghost"])), 422)
    assert [e["field"] for e in problem["errors"]] == ["hosts[0]"]
    assert "ghost" in problem["errors"][0]["message"]
    assert snapshot(db) == before


def test_duplicate_rule_is_409_on_name(with_tenant: TestClient, db: Engine) -> None:
    with_tenant.post("/api/v1/rules", json=rule_body("r1"))
    before = snapshot(db)
    problem = assert_problem(with_tenant.post("/api/v1/rules", json=rule_body("r1", priority=3)), 409)
    assert problem["errors"][0]["field"] == "name"
    assert snapshot(db) == before


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        (b'{"name": "r1",\n "priority": 10,,}', "line 2 column 17"),
        (b'{"name": "r1"', "line 1 column 14"),
        (b"", None),
    ],
)
def test_malformed_json_is_400_with_position(
    with_tenant: TestClient, db: Engine, raw: bytes, where: str | None
) -> None:
    before = snapshot(db)
    response = with_tenant.post("/api/v1/rules", content=raw, headers={"content-type": "application/json"})
    if where is None:
        # No body at all is not malformed JSON but a missing one.
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["field"] == "body"
    else:
        problem = assert_problem(response, 400)
        assert where in problem["detail"]
    assert snapshot(db) == before


def test_non_json_content_type_is_415(with_tenant: TestClient, db: Engine) -> None:
    before = snapshot(db)
    assert_problem(with_tenant.post("/api/v1/rules", content=b"name=r1", headers={"content-type": "text/plain"}), 415)
    assert snapshot(db) == before


def test_unknown_rule_is_404_and_changes_nothing(with_tenant: TestClient, db: Engine) -> None:
    before = snapshot(db)
    assert_problem(with_tenant.get("/api/v1/rules/nope"), 404)
    assert_problem(with_tenant.delete("/api/v1/rules/nope"), 404)
    assert_problem(with_tenant.put("/api/v1/rules/nope", json=rule_body("nope")), 404)
    assert_problem(with_tenant.get("/api/v1/rollouts/nope"), 404)
    assert_problem(with_tenant.get("/api/v1/hosts/nope"), 404)
    assert snapshot(db) == before


def test_bad_query_parameter_is_422(with_tenant: TestClient) -> None:
    problem = assert_problem(with_tenant.get("/api/v1/rollouts?limit=0"), 422)
    assert problem["errors"][0]["field"] == "query.limit"
