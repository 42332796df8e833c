from __future__ import annotations

import dataclasses
from pathlib import Path

from conftest import assert_problem, free_port, make_settings
from fastapi.testclient import TestClient

from lachesis_controller.app import create_app


def test_healthz(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_when_everything_answers(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}, "leader": True}


def test_readyz_names_redis_when_it_is_down(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with TestClient(create_app(make_settings(tmp_path, dead))) as client:
        body = assert_problem(client.get("/readyz"), 503)
        assert "redis" in body["detail"]
        assert "database" not in body["detail"]
        assert body["checks"]["database"] == "ok"
        assert body["checks"]["redis"].startswith("unavailable")
        # The API itself still answers from the database; liveness is unknown.
        assert client.get("/api/v1/hosts").json() == []
        assert client.get("/healthz").status_code == 200


def test_metrics_are_prometheus_text(client: TestClient) -> None:
    client.post("/api/v1/tenants", json={"name": "m", "classifiers": []})
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'lachesis_rollouts_started_total{trigger="tenant"}' in response.text
    assert "lachesis_acks_received_total" in response.text


def test_unknown_route_and_method_are_problems(client: TestClient) -> None:
    assert_problem(client.get("/api/v1/nothing"), 404)
    assert_problem(client.patch("/api/v1/rules"), 405)


def test_unexpected_error_is_a_500_problem_without_internals(
    settings,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    from lachesis_controller.api import tenants

    def broken(_tenant: object) -> None:
        raise RuntimeError("secret internal state")

    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.post("/api/v1/tenants", json={"name": "x", "classifiers": []}).status_code == 201
        monkeypatch.setattr(tenants, "tenant_out", broken)
        response = client.get("/api/v1/tenants")
        body = assert_problem(response, 500)
        assert "secret" not in response.text and "RuntimeError" not in response.text
        assert body["instance"] == "/api/v1/tenants"


def test_root_leads_a_browser_to_the_api_docs_without_a_ui_build(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        make_settings(tmp_path, f"redis://127.0.0.1:{free_port()}/0"), ui_dir=tmp_path / "no-ui"
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/", follow_redirects=False)
        assert response.status_code == 307
        assert response.headers["location"] == "/docs"
        assert client.get("/ui/").status_code == 404


def test_the_dashboard_is_served_at_ui(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "index.html").write_text("<title>Lachesis</title>")
    settings = dataclasses.replace(make_settings(tmp_path, f"redis://127.0.0.1:{free_port()}/0"), ui_dir=dist)
    with TestClient(create_app(settings)) as client:
        assert client.get("/", follow_redirects=False).headers["location"] == "/ui/"
        page = client.get("/ui/")
        assert page.status_code == 200
        assert "<title>Lachesis</title>" in page.text
