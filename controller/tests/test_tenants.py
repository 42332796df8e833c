from __future__ import annotations

from conftest import TENANT, assert_problem, rule_body, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine


def test_create_get_list_delete(client: TestClient) -> None:
    created = client.post("/api/v1/tenants", json={**TENANT, "description": "web servers"})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/api/v1/tenants/web"
    body = created.json()
    assert body["name"] == "web"
    assert body["classifiers"] == TENANT["classifiers"]
    assert body["description"] == "web servers"
    assert created.headers["link"] == f'</api/v1/rollouts/{body["rollout_id"]}>; rel="rollout"'

    fetched = client.get("/api/v1/tenants/web").json()
    assert {k: fetched[k] for k in ("name", "classifiers", "description")} == {
        "name": "web",
        "classifiers": TENANT["classifiers"],
        "description": "web servers",
    }
    client.post("/api/v1/tenants", json={"name": "analytics", "classifiers": []})
    assert [t["name"] for t in client.get("/api/v1/tenants").json()] == ["analytics", "web"]

    deleted = client.delete("/api/v1/tenants/web")
    assert deleted.status_code == 200
    assert deleted.json()["rollout_id"] != body["rollout_id"]
    assert_problem(client.get("/api/v1/tenants/web"), 404)
    assert [t["name"] for t in client.get("/api/v1/tenants").json()] == ["analytics"]


def test_change_without_hosts_is_a_succeeded_rollout(client: TestClient) -> None:
    rollout_id = client.post("/api/v1/tenants", json=TENANT).json()["rollout_id"]
    rollout = client.get(f"/api/v1/rollouts/{rollout_id}").json()
    assert rollout["state"] == "succeeded"
    assert rollout["targets"] == []
    assert rollout["cause"] == "tenant web created"
    assert rollout["completed_at"] is not None


def test_replace(client: TestClient) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    new = {"name": "web", "classifiers": [{"kind": "uid", "value": "33"}], "description": "www-data"}
    replaced = client.put("/api/v1/tenants/web", json=new)
    assert replaced.status_code == 200
    assert replaced.json()["classifiers"] == new["classifiers"]
    assert client.get("/api/v1/tenants/web").json()["description"] == "www-data"
    rollout = client.get(f"/api/v1/rollouts/{replaced.json()['rollout_id']}").json()
    assert rollout["cause"] == "tenant web updated"


def test_duplicate_name_is_409_and_changes_nothing(client: TestClient, db: Engine) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    before = snapshot(db)
    body = assert_problem(client.post("/api/v1/tenants", json={**TENANT, "classifiers": []}), 409)
    assert body["errors"][0]["field"] == "name"
    assert "web" in body["detail"]
    assert snapshot(db) == before


def test_delete_of_a_tenant_a_rule_uses_is_409(client: TestClient, db: Engine) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    client.post("/api/v1/rules", json=rule_body("r1"))
    before = snapshot(db)
    body = assert_problem(client.delete("/api/v1/tenants/web"), 409)
    assert "r1" in body["detail"]
    assert snapshot(db) == before


def test_unknown_tenant_is_404(client: TestClient, db: Engine) -> None:
    before = snapshot(db)
    assert "nope" in assert_problem(client.get("/api/v1/tenants/nope"), 404)["detail"]
    assert_problem(client.delete("/api/v1/tenants/nope"), 404)
    assert_problem(client.put("/api/v1/tenants/nope", json={"name": "nope", "classifiers": []}), 404)
    assert snapshot(db) == before


def test_put_with_another_name_is_422(client: TestClient, db: Engine) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    before = snapshot(db)
    body = assert_problem(client.put("/api/v1/tenants/web", json={**TENANT, "name": "other"}), 422)
    assert body["errors"][0]["field"] == "name"
    assert snapshot(db) == before


def test_bad_classifier_is_422(client: TestClient, db: Engine) -> None:
    before = snapshot(db)
    body = assert_problem(
        client.post("/api/v1/tenants", json={"name": "web", "classifiers": [{"kind": "inode", "value": "1"}]}),
        422,
    )
    assert body["errors"][0]["field"] == "classifiers[0].kind"
    assert "classifiers[0].kind" in body["detail"]
    assert snapshot(db) == before
