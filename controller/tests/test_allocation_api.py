"""/api/v1/allocations: proposals from supplied and stored curves, guarantees, apply, errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import assert_problem, make_settings, snapshot
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from lachesis_controller.app import create_app


def tenant(client: TestClient, name: str) -> None:
    assert client.post("/api/v1/tenants", json={"name": name, "classifiers": []}).status_code == 201


# A loop over 600 bytes (nothing hits until it fits) and a tenant with a linear curve.
CURVES = {
    "loop": {"sizes": [0, 599, 600, 1000], "miss_ratios": [1, 1, 0.1, 0.1], "weight": 1.0},
    "web": {"sizes": [0, 1000], "miss_ratios": [1, 0.5], "weight": 1.0},
}


@pytest.fixture
def two(client: TestClient) -> TestClient:
    tenant(client, "loop")
    tenant(client, "web")
    return client


def test_propose_apply_and_read_back(two: TestClient) -> None:
    client = two
    proposed = client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "curves": CURVES})
    assert proposed.status_code == 200, proposed.text
    body = proposed.json()
    assert body["tenants"]["loop"]["size_bytes"] == pytest.approx(600)
    assert body["tenants"]["web"]["size_bytes"] == pytest.approx(400)
    assert body["tenants"]["loop"]["curve_point"] == {
        "size_bytes": pytest.approx(600),
        "miss_ratio": pytest.approx(0.1),
        "index": 2,
    }
    assert body["summary"]["optimal"] is True and body["gain"] is None
    assert body["summary"]["utility"] == pytest.approx(0.9 + 0.2)

    listed = client.get("/api/v1/allocations").json()
    assert [t["tenant"] for t in listed] == ["loop", "web"]
    assert listed[0]["current"] is None and listed[0]["proposed"]["size_bytes"] == pytest.approx(600)

    summary = client.get("/api/v1/allocations/summary")
    assert summary.json()["current"] is None
    stale = '"0000"'
    assert_problem(client.post("/api/v1/allocations/apply", headers={"If-Match": stale}), 412)
    applied = client.post("/api/v1/allocations/apply", headers={"If-Match": etag_of_proposed(client)})
    assert applied.status_code == 200 and applied.json()["state"] == "current"
    assert client.get("/api/v1/allocations").json()[0]["current"]["size_bytes"] == pytest.approx(600)

    # Stored curves are used when none are supplied; water-filling does worse, and says so.
    again = client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "method": "waterfill"}).json()
    assert again["tenants"]["web"]["size_bytes"] == pytest.approx(1000)
    assert again["summary"]["optimal"] is False
    assert again["gain"] == pytest.approx(0.5 - 1.1)


def etag_of_proposed(client: TestClient) -> str:
    from lachesis_controller.api import etags
    from lachesis_controller.schemas.allocations import AllocationSummary

    proposed = client.get("/api/v1/allocations/summary").json()["proposed"]
    return etags.etag_of(AllocationSummary.model_validate(proposed))


def test_guarantees_are_stored_honoured_and_removed(two: TestClient) -> None:
    client = two
    put = client.put("/api/v1/allocations/guarantees/web", json={"guarantee": {"kind": "min_hit_ratio", "ratio": 0.3}})
    assert put.status_code == 200, put.text
    assert client.get("/api/v1/allocations/guarantees").json() == [
        {"tenant": "web", "guarantee": {"kind": "min_hit_ratio", "ratio": 0.3}}
    ]
    body = client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "curves": CURVES}).json()
    # web needs 600 bytes for 0.3: the loop cannot have its 600 any more.
    assert body["tenants"]["web"]["reserved_bytes"] == pytest.approx(600)
    assert body["tenants"]["web"]["hit_ratio"] >= 0.3 - 1e-12
    listed = client.get("/api/v1/allocations").json()
    assert listed[1]["guarantee"] == {"kind": "min_hit_ratio", "ratio": 0.3}
    assert client.delete("/api/v1/allocations/guarantees/web").status_code == 204
    assert_problem(client.delete("/api/v1/allocations/guarantees/web"), 404)


def test_infeasible_guarantees_are_422_naming_them_and_change_nothing(two: TestClient, db: Engine) -> None:
    client = two
    before = snapshot(db)
    body = assert_problem(
        client.post(
            "/api/v1/allocations/proposals",
            json={
                "capacity_bytes": 1000,
                "curves": CURVES,
                "guarantees": {
                    "loop": {"kind": "min_hit_ratio", "ratio": 0.5},
                    "web": {"kind": "fixed_size", "size_bytes": 500},
                },
            },
        ),
        422,
    )
    assert body["type"].endswith("infeasible-guarantees")
    assert {e["field"] for e in body["errors"]} >= {"guarantees.loop", "guarantees.web"}
    assert {u["tenant"] for u in body["unmet"]} >= {"loop", "web"}
    assert snapshot(db) == before  # not even the supplied curves were kept


@pytest.mark.parametrize(
    ("payload", "status", "field"),
    [
        ({"capacity_bytes": 0, "curves": CURVES}, 422, "capacity_bytes"),
        ({"capacity_bytes": 1000, "epsilon_bytes": 2000, "curves": CURVES}, 422, "epsilon_bytes"),
        ({"capacity_bytes": 1000, "curves": {"nobody": CURVES["web"]}}, 422, "curves.nobody"),
        (
            {"capacity_bytes": 1000, "curves": {"web": {"sizes": [0, 5, 5], "miss_ratios": [1, 0.5, 0.4]}}},
            422,
            "curves.web",
        ),
        ({"capacity_bytes": 1000, "curves": {"web": {"sizes": [0, 5], "miss_ratios": [1, 2]}}}, 422, "curves.web"),
        ({"capacity_bytes": 1000}, 422, "curves"),
        ({"capacity_bytes": 1000, "curves": CURVES, "idle": ["ghost"]}, 422, "idle[0]"),
        (
            {
                "capacity_bytes": 1000,
                "curves": CURVES,
                "guarantees": {"web": {"kind": "bandwidth", "sla": 5, "storage": 10, "memory": 5}},
            },
            422,
            "guarantees.web",
        ),
        ({"capacity_bytes": 1000, "curves": CURVES, "bogus": 1}, 422, "bogus"),
    ],
)
def test_bad_proposals_are_4xx_and_change_nothing(
    two: TestClient, db: Engine, payload: dict, status: int, field: str
) -> None:
    before = snapshot(db)
    body = assert_problem(two.post("/api/v1/allocations/proposals", json=payload), status)
    assert any(e["field"].startswith(field) for e in body["errors"]), body
    assert snapshot(db) == before


def test_malformed_json_and_unknown_tenant_guarantee(two: TestClient) -> None:
    r = two.post("/api/v1/allocations/proposals", content=b"{", headers={"Content-Type": "application/json"})
    assert_problem(r, 400)
    assert_problem(
        two.put("/api/v1/allocations/guarantees/ghost", json={"guarantee": {"kind": "fixed_size", "size_bytes": 1}}),
        404,
    )
    assert_problem(two.put("/api/v1/allocations/guarantees/web", json={"guarantee": {"kind": "nope"}}), 422)
    assert_problem(two.post("/api/v1/allocations/apply"), 409)


def test_idle_tenants_are_reclaimed(two: TestClient) -> None:
    body = two.post(
        "/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "curves": CURVES, "idle": ["loop"]}
    ).json()
    assert body["tenants"]["loop"]["size_bytes"] == 0 and body["tenants"]["loop"]["idle"] is True
    assert body["tenants"]["web"]["size_bytes"] == pytest.approx(1000)


BOOTSTRAP = "bootstrap-secret-for-allocation-tests"


@pytest.fixture
def secured(tmp_path: Path, redis_url: str) -> Iterator[tuple[TestClient, Engine]]:
    settings = make_settings(tmp_path, redis_url, api_token=BOOTSTRAP)
    with TestClient(create_app(settings)) as client:
        engine = create_engine(settings.database_url)
        yield client, engine
        engine.dispose()


def test_roles_and_tenant_scope(secured: tuple[TestClient, Engine]) -> None:
    client, db = secured
    admin = {"Authorization": f"Bearer {BOOTSTRAP}"}
    for name in ("loop", "web"):
        client.post("/api/v1/tenants", json={"name": name, "classifiers": []}, headers=admin)

    def token(name: str, role: str, tenant: str | None = None) -> dict[str, str]:
        body = {"name": name, "role": role, **({"tenant": tenant} if tenant else {})}
        return {"Authorization": f"Bearer {client.post('/api/v1/tokens', json=body, headers=admin).json()['token']}"}

    viewer, web_op = token("v", "viewer"), token("w", "operator", "web")
    assert (
        client.post(
            "/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "curves": CURVES}, headers=admin
        ).status_code
        == 200
    )
    before = snapshot(db)
    assert_problem(client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000}, headers=viewer), 403)
    assert_problem(client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000}, headers=web_op), 403)
    assert_problem(
        client.put(
            "/api/v1/allocations/guarantees/web",
            json={"guarantee": {"kind": "fixed_size", "size_bytes": 999}},
            headers=web_op,
        ),
        403,
    )
    assert_problem(client.get("/api/v1/allocations"), 401)
    assert snapshot(db) == before
    assert [t["tenant"] for t in client.get("/api/v1/allocations", headers=web_op).json()] == ["web"]
    assert len(client.get("/api/v1/allocations", headers=viewer).json()) == 2
