"""ETag / If-Match: of two writers who read the same version, the second gets 412 and
changes nothing."""

from __future__ import annotations

from conftest import TENANT, assert_problem, rule_body, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from test_policies import POLICY, post


def test_second_writer_of_a_rule_gets_412(client: TestClient, db: Engine) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    created = client.post("/api/v1/rules", json=rule_body())
    read = client.get("/api/v1/rules/r1")
    assert read.headers["etag"] == created.headers["etag"]
    etag = read.headers["etag"]

    first = client.put("/api/v1/rules/r1", json=rule_body(priority=20), headers={"If-Match": etag})
    assert first.status_code == 200 and first.headers["etag"] != etag
    before = snapshot(db)
    second = client.put("/api/v1/rules/r1", json=rule_body(priority=30), headers={"If-Match": etag})
    body = assert_problem(second, 412)
    assert body["etag"] == first.headers["etag"]
    assert_problem(client.delete("/api/v1/rules/r1", headers={"If-Match": etag}), 412)
    assert snapshot(db) == before
    assert client.delete("/api/v1/rules/r1", headers={"If-Match": first.headers["etag"]}).status_code == 200


def test_second_writer_of_a_tenant_gets_412(client: TestClient, db: Engine) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    etag = client.get("/api/v1/tenants/web").headers["etag"]
    assert (
        client.put("/api/v1/tenants/web", json={**TENANT, "description": "a"}, headers={"If-Match": etag}).status_code
        == 200
    )
    before = snapshot(db)
    assert_problem(
        client.put("/api/v1/tenants/web", json={**TENANT, "description": "b"}, headers={"If-Match": etag}), 412
    )
    assert_problem(client.delete("/api/v1/tenants/web", headers={"If-Match": etag}), 412)
    assert snapshot(db) == before
    assert client.put("/api/v1/tenants/web", json=TENANT, headers={"If-Match": "*"}).status_code == 200
    # Without If-Match the last writer wins, as before.
    assert client.put("/api/v1/tenants/web", json=TENANT).status_code == 200


def test_second_writer_of_a_policy_gets_412(client: TestClient, db: Engine) -> None:
    assert post(client, POLICY).headers["etag"] == '"v1"'
    assert client.get("/api/v1/policies/web-cache").headers["etag"] == '"v1"'
    headers = {"content-type": "application/yaml", "If-Match": '"v1"'}
    first = client.post("/api/v1/policies", content=POLICY.encode(), headers=headers)
    assert first.status_code == 201 and first.headers["etag"] == '"v2"'
    before = snapshot(db)
    assert_problem(client.post("/api/v1/policies", content=POLICY.encode(), headers=headers), 412)
    assert snapshot(db) == before
    # If-Match on a policy that does not exist yet cannot match.
    other = POLICY.replace("name: web-cache", "name: fresh")
    assert_problem(client.post("/api/v1/policies", content=other.encode(), headers=headers), 412)


def test_lists_page_with_limit_and_offset_and_stay_whole_without(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        client.post("/api/v1/tenants", json={**TENANT, "name": name})
    whole = client.get("/api/v1/tenants")
    assert [t["name"] for t in whole.json()] == ["a", "b", "c"] and "link" not in whole.headers
    first = client.get("/api/v1/tenants?limit=2")
    assert [t["name"] for t in first.json()] == ["a", "b"]
    assert first.headers["x-total-count"] == "3"
    assert first.headers["link"] == '</api/v1/tenants?limit=2&offset=2>; rel="next"'
    last = client.get("/api/v1/tenants?limit=2&offset=2")
    assert [t["name"] for t in last.json()] == ["c"] and "link" not in last.headers
    for path in ("/api/v1/rules", "/api/v1/hosts", "/api/v1/tokens", "/api/v1/policies"):
        assert client.get(f"{path}?limit=1&offset=0").status_code == 200, path
    assert_problem(client.get("/api/v1/tenants?limit=0"), 422)
