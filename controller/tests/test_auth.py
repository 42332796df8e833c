from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TENANT, assert_problem, make_settings
from fastapi.testclient import TestClient

from lachesis_controller.app import create_app

TOKEN = "t0ken-for-tests"


@pytest.fixture
def secured(tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(tmp_path, redis_url, api_token=TOKEN))) as client:
        yield client


def test_api_needs_the_token(secured: TestClient) -> None:
    body = assert_problem(secured.get("/api/v1/tenants"), 401)
    assert "Bearer" in body["detail"]
    assert secured.get("/api/v1/tenants").headers["www-authenticate"].startswith("Bearer")
    assert_problem(secured.get("/api/v1/tenants", headers={"Authorization": "Bearer wrong"}), 401)
    assert_problem(secured.get("/api/v1/tenants", headers={"Authorization": TOKEN}), 401)
    ok = secured.get("/api/v1/tenants", headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json() == []


def test_unauthenticated_write_is_refused_before_the_body_is_read(secured: TestClient) -> None:
    assert_problem(secured.post("/api/v1/tenants", json=TENANT), 401)
    assert_problem(
        secured.post("/api/v1/tenants", content=b"{not json", headers={"content-type": "application/json"}),
        401,
    )
    created = secured.post("/api/v1/tenants", json=TENANT, headers={"Authorization": f"Bearer {TOKEN}"})
    assert created.status_code == 201


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json", "/metrics"])
def test_probes_and_docs_stay_open(secured: TestClient, path: str) -> None:
    assert secured.get(path).status_code == 200


def test_no_token_configured_means_open(client: TestClient) -> None:
    assert client.get("/api/v1/tenants").status_code == 200
