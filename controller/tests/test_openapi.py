from __future__ import annotations

import json

from conftest import SCHEMAS
from fastapi.testclient import TestClient

from lachesis_controller.app import openapi_document as render


def test_committed_openapi_matches_the_app() -> None:
    committed = (SCHEMAS / "openapi.json").read_text()
    assert committed == render(), (
        "api-schemas/openapi.json is out of date: run .lachesis/venv/bin/lachesis-controller openapi"
    )


def test_served_openapi_is_the_exported_one(client: TestClient) -> None:
    served = client.get("/openapi.json").json()
    assert served == json.loads(render())
    assert "/api/v1/rules" in served["paths"]
    problem = served["paths"]["/api/v1/rules"]["post"]["responses"]["422"]["content"]
    assert list(problem) == ["application/problem+json"]
