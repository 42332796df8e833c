"""Roles, tenant-scoped tokens, the token API and the audit trail.

Every refusal is checked for its status and problem body and, for writes, for leaving the
database exactly as it was.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TENANT, assert_problem, make_settings, rule_body, snapshot
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine

from lachesis_controller.app import create_app
from lachesis_controller.models import ApiToken

BOOTSTRAP = "bootstrap-secret-for-tests"
OTHER = {"name": "db", "classifiers": [{"kind": "path_prefix", "value": "/srv/db/"}]}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


ADMIN_HEADERS = bearer(BOOTSTRAP)


@pytest.fixture
def secured(tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    settings = make_settings(tmp_path, redis_url, api_token=BOOTSTRAP)
    with TestClient(create_app(settings)) as client:
        client.app.state.test_db_url = settings.database_url  # type: ignore[attr-defined]
        yield client


@pytest.fixture
def state_db(secured: TestClient) -> Iterator[Engine]:
    engine = create_engine(secured.app.state.test_db_url)  # type: ignore[attr-defined]
    yield engine
    engine.dispose()


@pytest.fixture
def make_token(secured: TestClient) -> Callable[..., str]:
    def make(name: str, role: str, tenant: str | None = None) -> str:
        body: dict[str, Any] = {"name": name, "role": role}
        if tenant is not None:
            body["tenant"] = tenant
        response = secured.post("/api/v1/tokens", json=body, headers=ADMIN_HEADERS)
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    return make


@pytest.fixture
def seeded(secured: TestClient) -> TestClient:
    """Two tenants, a rule of each, and a rule of all tenants, made by the bootstrap admin."""
    for tenant in (TENANT, OTHER):
        assert secured.post("/api/v1/tenants", json=tenant, headers=ADMIN_HEADERS).status_code == 201
    for body in (
        rule_body("web-read"),
        rule_body("db-read", match={"tenant": "db", "ops": ["read"]}),
        rule_body("everyone", priority=1, match={"ops": ["write"]}),
    ):
        assert secured.post("/api/v1/rules", json=body, headers=ADMIN_HEADERS).status_code == 201
    return secured


def assert_forbidden(response: Any) -> dict[str, Any]:
    body = assert_problem(response, 403)
    assert body["type"].endswith("/forbidden")
    assert "may not" in body["detail"]
    return body


# --- authentication ---------------------------------------------------------------------


def test_missing_unknown_and_revoked_tokens_get_401(secured: TestClient, make_token: Callable[..., str]) -> None:
    secret = make_token("ci", "viewer")
    assert secured.get("/api/v1/tenants", headers=bearer(secret)).status_code == 200
    token_id = secured.get("/api/v1/tokens", headers=ADMIN_HEADERS).json()[0]["id"]
    assert secured.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_HEADERS).status_code == 200

    for headers in ({}, bearer("lct_unknown"), bearer(secret), {"Authorization": f"Basic {secret}"}):
        response = secured.get("/api/v1/tenants", headers=headers)
        assert_problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_the_secret_is_shown_once_and_stored_only_as_its_sha256(secured: TestClient, state_db: Engine) -> None:
    created = secured.post("/api/v1/tokens", json={"name": "ci", "role": "operator"}, headers=ADMIN_HEADERS)
    assert created.status_code == 201
    body = created.json()
    secret = body["token"]
    assert secret.startswith("lct_") and len(secret) > 40
    assert body["role"] == "operator" and body["tenant"] is None and body["created_by"] == "bootstrap"
    assert created.headers["location"] == f"/api/v1/tokens/{body['id']}"

    listed = secured.get("/api/v1/tokens", headers=ADMIN_HEADERS)
    assert secret not in listed.text and "hash" not in listed.text
    assert [t["name"] for t in listed.json()] == ["ci"]
    with state_db.connect() as connection:
        stored = connection.execute(select(ApiToken.token_hash)).scalar_one()
    assert stored == hashlib.sha256(secret.encode()).hexdigest()


def test_token_api_refuses_bad_requests_without_writing(
    secured: TestClient, make_token: Callable[..., str], state_db: Engine
) -> None:
    make_token("ci", "viewer")
    before = snapshot(state_db)
    assert_problem(secured.post("/api/v1/tokens", json={"name": "ci", "role": "viewer"}, headers=ADMIN_HEADERS), 409)
    body = assert_problem(
        secured.post("/api/v1/tokens", json={"name": "t", "role": "admin", "tenant": "web"}, headers=ADMIN_HEADERS),
        422,
    )
    assert body["errors"][0]["field"] == "role"
    assert_problem(secured.post("/api/v1/tokens", json={"name": "t", "role": "root"}, headers=ADMIN_HEADERS), 422)
    assert_problem(secured.delete("/api/v1/tokens/nope", headers=ADMIN_HEADERS), 404)
    assert snapshot(state_db) == before
    token_id = secured.get("/api/v1/tokens", headers=ADMIN_HEADERS).json()[0]["id"]
    assert secured.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_HEADERS).status_code == 200
    assert_problem(secured.delete(f"/api/v1/tokens/{token_id}", headers=ADMIN_HEADERS), 409)


# --- roles ------------------------------------------------------------------------------


def test_viewer_reads_but_changes_nothing(seeded: TestClient, make_token: Callable[..., str], state_db: Engine) -> None:
    viewer = bearer(make_token("look", "viewer"))
    for path in ("/api/v1/tenants", "/api/v1/rules", "/api/v1/hosts", "/api/v1/rollouts", "/api/v1/audit"):
        assert seeded.get(path, headers=viewer).status_code == 200, path
    assert len(seeded.get("/api/v1/rules", headers=viewer).json()) == 3

    before = snapshot(state_db)
    assert_forbidden(seeded.post("/api/v1/tenants", json={**TENANT, "name": "new"}, headers=viewer))
    assert_forbidden(seeded.put("/api/v1/tenants/web", json=TENANT, headers=viewer))
    assert_forbidden(seeded.delete("/api/v1/tenants/db", headers=viewer))
    assert_forbidden(seeded.post("/api/v1/rules", json=rule_body("new"), headers=viewer))
    assert_forbidden(seeded.put("/api/v1/rules/web-read", json=rule_body("web-read"), headers=viewer))
    assert_forbidden(seeded.delete("/api/v1/rules/web-read", headers=viewer))
    # Refused before the body is read: no parse error for a body it may not send.
    assert_forbidden(
        seeded.post("/api/v1/rules", content=b"{nope", headers={**viewer, "content-type": "application/json"})
    )
    assert_forbidden(seeded.get("/api/v1/tokens", headers=viewer))
    assert_forbidden(seeded.post("/api/v1/tokens", json={"name": "x", "role": "admin"}, headers=viewer))
    assert snapshot(state_db) == before


def test_operator_changes_tenants_and_rules_but_not_tokens(
    secured: TestClient, make_token: Callable[..., str], state_db: Engine
) -> None:
    operator = bearer(make_token("ops", "operator"))
    assert secured.post("/api/v1/tenants", json=TENANT, headers=operator).status_code == 201
    assert secured.post("/api/v1/rules", json=rule_body(), headers=operator).status_code == 201
    assert secured.put("/api/v1/rules/r1", json=rule_body(priority=5), headers=operator).status_code == 200
    assert secured.delete("/api/v1/rules/r1", headers=operator).status_code == 200

    before = snapshot(state_db)
    assert_forbidden(secured.get("/api/v1/tokens", headers=operator))
    assert_forbidden(secured.post("/api/v1/tokens", json={"name": "x", "role": "admin"}, headers=operator))
    token_id = secured.get("/api/v1/tokens", headers=ADMIN_HEADERS).json()[0]["id"]
    assert_forbidden(secured.delete(f"/api/v1/tokens/{token_id}", headers=operator))
    assert snapshot(state_db) == before


def test_admin_tokens_manage_tokens(secured: TestClient, make_token: Callable[..., str]) -> None:
    admin = bearer(make_token("root", "admin"))
    created = secured.post("/api/v1/tokens", json={"name": "ci", "role": "viewer"}, headers=admin)
    assert created.status_code == 201 and created.json()["created_by"] == "token:root"
    assert secured.delete(f"/api/v1/tokens/{created.json()['id']}", headers=admin).status_code == 200


# --- tenant-scoped tokens ---------------------------------------------------------------


def test_tenant_token_sees_only_its_tenant(seeded: TestClient, make_token: Callable[..., str]) -> None:
    web = bearer(make_token("web-ops", "operator", tenant="web"))
    assert [t["name"] for t in seeded.get("/api/v1/tenants", headers=web).json()] == ["web"]
    assert seeded.get("/api/v1/tenants/web", headers=web).status_code == 200
    assert_forbidden(seeded.get("/api/v1/tenants/db", headers=web))
    assert [r["name"] for r in seeded.get("/api/v1/rules", headers=web).json()] == ["web-read"]
    assert seeded.get("/api/v1/rules/web-read", headers=web).status_code == 200
    assert_forbidden(seeded.get("/api/v1/rules/db-read", headers=web))
    assert_forbidden(seeded.get("/api/v1/rules/everyone", headers=web))
    assert_forbidden(seeded.get("/api/v1/tokens", headers=web))


def test_tenant_token_changes_only_its_tenants_rules(
    seeded: TestClient, make_token: Callable[..., str], state_db: Engine
) -> None:
    web = bearer(make_token("web-ops", "operator", tenant="web"))
    before = snapshot(state_db)
    # Classifiers decide whose IO is whose: tenants are off limits to a tenant's token.
    assert_forbidden(seeded.post("/api/v1/tenants", json={**TENANT, "name": "web2"}, headers=web))
    assert_forbidden(seeded.put("/api/v1/tenants/web", json=TENANT, headers=web))
    assert_forbidden(seeded.delete("/api/v1/tenants/web", headers=web))
    assert_forbidden(seeded.post("/api/v1/rules", json=rule_body("x", match={"tenant": "db"}), headers=web))
    assert_forbidden(seeded.post("/api/v1/rules", json=rule_body("x", match={"ops": ["read"]}), headers=web))
    assert_forbidden(seeded.put("/api/v1/rules/db-read", json=rule_body("db-read"), headers=web))
    assert_forbidden(
        seeded.put("/api/v1/rules/web-read", json=rule_body("web-read", match={"tenant": "db"}), headers=web)
    )
    assert_forbidden(seeded.delete("/api/v1/rules/db-read", headers=web))
    assert_forbidden(seeded.delete("/api/v1/rules/everyone", headers=web))
    assert snapshot(state_db) == before

    created = seeded.post("/api/v1/rules", json=rule_body("web-write", match={"tenant": "web"}), headers=web)
    assert created.status_code == 201
    assert seeded.put("/api/v1/rules/web-read", json=rule_body("web-read", priority=3), headers=web).status_code == 200
    assert seeded.delete("/api/v1/rules/web-write", headers=web).status_code == 200


def test_tenant_token_changes_only_its_tenants_stages_and_sees_no_devices(
    seeded: TestClient, make_token: Callable[..., str], state_db: Engine
) -> None:
    web = bearer(make_token("web-ops", "operator", tenant="web"))
    cache = {"name": "cache/db", "kind": "cache", "owner": "db", "size_bytes": 1 << 20}
    before = snapshot(state_db)
    assert_forbidden(seeded.post("/api/v1/stages", json=cache, headers=web))
    assert_forbidden(seeded.post("/api/v1/stages", json={**cache, "owner": None}, headers=web))
    assert_forbidden(seeded.get("/api/v1/devices", headers=web))
    assert snapshot(state_db) == before
    assert seeded.post("/api/v1/stages", json=cache, headers=ADMIN_HEADERS).status_code == 201
    assert_problem(seeded.get("/api/v1/stages/cache/db", headers=web), 404)
    assert [s["name"] for s in seeded.get("/api/v1/stages", headers=web).json()] == []
    assert_problem(seeded.patch("/api/v1/stages/cache/db", json={"size_bytes": 2 << 20}, headers=web), 404)
    own = seeded.post("/api/v1/stages", json={**cache, "name": "cache/web", "owner": "web"}, headers=web)
    assert own.status_code == 201, own.text
    assert seeded.patch("/api/v1/stages/cache/web", json={"size_bytes": 2 << 20}, headers=web).status_code == 200


def test_tenant_viewer_cannot_write_its_own_rules(seeded: TestClient, make_token: Callable[..., str]) -> None:
    web = bearer(make_token("web-look", "viewer", tenant="web"))
    assert seeded.get("/api/v1/rules/web-read", headers=web).status_code == 200
    assert_forbidden(seeded.delete("/api/v1/rules/web-read", headers=web))


def test_tenant_token_sees_only_rollouts_and_audit_of_its_tenant(
    seeded: TestClient, make_token: Callable[..., str]
) -> None:
    web = bearer(make_token("web-ops", "operator", tenant="web"))
    own = seeded.put("/api/v1/rules/web-read", json=rule_body("web-read", priority=3), headers=web)
    other = seeded.put(
        "/api/v1/rules/db-read", json=rule_body("db-read", match={"tenant": "db"}), headers=ADMIN_HEADERS
    )
    assert seeded.get(f"/api/v1/rollouts/{own.json()['rollout_id']}", headers=web).status_code == 200
    assert_problem(seeded.get(f"/api/v1/rollouts/{other.json()['rollout_id']}", headers=web), 404)
    listed = {r["id"] for r in seeded.get("/api/v1/rollouts", headers=web).json()}
    assert own.json()["rollout_id"] in listed and other.json()["rollout_id"] not in listed

    events = seeded.get("/api/v1/audit", headers=web).json()
    assert events and {e["tenant"] for e in events} == {"web"}
    everything = seeded.get("/api/v1/audit", headers=ADMIN_HEADERS).json()
    assert {"db", None} <= {e["tenant"] for e in everything}


# --- audit ------------------------------------------------------------------------------


def test_every_change_is_audited_with_who_what_before_and_after(
    secured: TestClient, make_token: Callable[..., str]
) -> None:
    operator = bearer(make_token("ops", "operator"))
    secured.post("/api/v1/tenants", json=TENANT, headers=operator)
    secured.put("/api/v1/tenants/web", json={**TENANT, "description": "the web"}, headers=operator)
    created = secured.post("/api/v1/rules", json=rule_body(), headers=operator).json()
    secured.put("/api/v1/rules/r1", json=rule_body(priority=20), headers=operator)
    secured.delete("/api/v1/rules/r1", headers=operator)
    secured.delete("/api/v1/tenants/web", headers=operator)

    events = secured.get("/api/v1/audit", headers=ADMIN_HEADERS).json()
    assert [e["action"] for e in events] == [
        "tenant.delete",
        "rule.delete",
        "rule.update",
        "rule.create",
        "tenant.update",
        "tenant.create",
        "token.create",
    ]
    by_action = {e["action"]: e for e in events}
    assert by_action["token.create"]["actor"] == "bootstrap"
    assert "token" not in (by_action["token.create"]["after"] or {})
    assert {e["actor"] for e in events[:-1]} == {"token:ops"}
    rule_update = by_action["rule.update"]
    assert rule_update["before"]["priority"] == 10 and rule_update["after"]["priority"] == 20
    assert rule_update["tenant"] == "web" and rule_update["resource_name"] == "r1"
    assert by_action["rule.create"]["before"] is None
    assert by_action["rule.create"]["rollout_id"] == created["rollout_id"]
    assert by_action["rule.delete"]["after"] is None
    assert by_action["tenant.update"]["after"]["description"] == "the web"

    page = secured.get("/api/v1/audit?limit=2&offset=1", headers=ADMIN_HEADERS).json()
    assert [e["action"] for e in page] == ["rule.delete", "rule.update"]
    only_rules = secured.get("/api/v1/audit?resource_kind=rule", headers=ADMIN_HEADERS).json()
    assert {e["resource_kind"] for e in only_rules} == {"rule"} and len(only_rules) == 3


def test_refused_and_invalid_changes_leave_no_audit_event(secured: TestClient, make_token: Callable[..., str]) -> None:
    viewer = bearer(make_token("look", "viewer"))
    secured.post("/api/v1/tenants", json=TENANT, headers=viewer)
    secured.post("/api/v1/rules", json=rule_body(match={"tenant": "missing"}), headers=ADMIN_HEADERS)
    actions = [e["action"] for e in secured.get("/api/v1/audit", headers=ADMIN_HEADERS).json()]
    assert actions == ["token.create"]


def test_without_a_bootstrap_token_callers_act_as_anonymous_admin(client: TestClient) -> None:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert client.get("/api/v1/audit").json()[0]["actor"] == "anonymous"
