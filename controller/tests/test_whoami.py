"""GET /api/v1/whoami: the caller's identity and whether it may change anything, agreeing
with what the API then does to a write from the same token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TENANT, assert_problem, make_settings, rule_body
from fastapi.testclient import TestClient

from lachesis_controller.app import create_app

BOOTSTRAP = "bootstrap-secret-for-whoami"


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def secured(tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path, redis_url, api_token=BOOTSTRAP))) as client:
        assert client.post("/api/v1/tenants", json=TENANT, headers=bearer(BOOTSTRAP)).status_code == 201
        yield client


def token(client: TestClient, name: str, role: str, tenant: str | None = None) -> str:
    body: dict[str, Any] = {"name": name, "role": role}
    if tenant is not None:
        body["tenant"] = tenant
    made = client.post("/api/v1/tokens", json=body, headers=bearer(BOOTSTRAP))
    assert made.status_code == 201, made.text
    return str(made.json()["token"])


def test_the_bootstrap_token_is_an_admin_that_may_write(secured: TestClient) -> None:
    me = secured.get("/api/v1/whoami", headers=bearer(BOOTSTRAP))
    assert me.status_code == 200
    assert me.json() == {"actor": "bootstrap", "role": "admin", "tenant": None, "write_refusal": None}


def test_a_viewer_is_told_why_its_writes_are_refused_and_they_are(secured: TestClient) -> None:
    secret = token(secured, "ops-viewer", "viewer")
    me = secured.get("/api/v1/whoami", headers=bearer(secret)).json()
    assert (me["actor"], me["role"], me["tenant"]) == ("token:ops-viewer", "viewer", None)
    assert me["write_refusal"] and "token:ops-viewer (viewer)" in me["write_refusal"]
    refused = assert_problem(secured.post("/api/v1/rules", json=rule_body("r1"), headers=bearer(secret)), 403)
    assert refused["detail"] == me["write_refusal"]


def test_a_tenant_operator_may_write_and_names_its_tenant(secured: TestClient) -> None:
    secret = token(secured, "analytics-op", "operator", tenant=TENANT["name"])
    me = secured.get("/api/v1/whoami", headers=bearer(secret)).json()
    assert me == {"actor": "token:analytics-op", "role": "operator", "tenant": TENANT["name"], "write_refusal": None}
    created = secured.post("/api/v1/rules", json=rule_body("r1"), headers=bearer(secret))
    assert created.status_code == 201, created.text


def test_a_tenant_viewer_names_its_tenant_and_may_not_write(secured: TestClient) -> None:
    secret = token(secured, "analytics-viewer", "viewer", tenant=TENANT["name"])
    me = secured.get("/api/v1/whoami", headers=bearer(secret)).json()
    assert (me["role"], me["tenant"]) == ("viewer", TENANT["name"])
    assert "scoped to tenant" in me["write_refusal"]


def test_no_or_a_revoked_token_is_401(secured: TestClient) -> None:
    assert_problem(secured.get("/api/v1/whoami"), 401)
    assert_problem(secured.get("/api/v1/whoami", headers=bearer("wrong")), 401)


def test_an_open_controller_answers_anonymous_admin(client: TestClient) -> None:
    me = client.get("/api/v1/whoami").json()
    assert me == {"actor": "anonymous", "role": "admin", "tenant": None, "write_refusal": None}


def test_whoami_is_in_the_openapi_document(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()
    assert "/api/v1/whoami" in schema["paths"]
    assert set(schema["components"]["schemas"]["WhoAmI"]["properties"]) == {"actor", "role", "tenant", "write_refusal"}
