"""/api/v1/placements: the broker per registered device, with predicted DLWA, and its errors."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import assert_problem, snapshot
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from lachesis_controller.models import Host


def register(db: Engine, host_id: str, devices: list[dict]) -> None:
    """A host as its agent's registration leaves it (the bus path is tested in test_server)."""
    now = datetime.now(UTC)
    with Session(db) as s, s.begin():
        s.add(
            Host(
                id=host_id,
                agent_version="0.1.0",
                enrolled_at=now,
                registered_at=now,
                last_seen=now,
                capabilities={"cpus": 2, "devices": devices, "kernel": {}},
            )
        )


def device(name: str, handles: int) -> dict:
    return {
        "name": name,
        "path": f"/dev/{name}",
        "kind": "nvme",
        "size_bytes": 1 << 30,
        "fdp": handles > 0,
        "placement_handles": handles,
    }


STREAMS = [
    {"tenant": t, "part": p, "space": space, "writes": 0.25}
    for t in ("a", "b")
    for p, space in (("set-assoc", 0.02), ("loc", 0.48))
]


@pytest.fixture
def setup(client: TestClient, db: Engine) -> TestClient:
    for t in ("a", "b"):
        assert client.post("/api/v1/tenants", json={"name": t, "classifiers": []}).status_code == 201
    register(db, "h1", [device("nvme0", 3), device("flash0", 0)])
    return client


def test_place_read_back_and_recompute(setup: TestClient, simulator: Path) -> None:
    client = setup
    r = client.post("/api/v1/placements/h1/nvme0", json={"streams": STREAMS, "overprovisioning": 0.1})
    assert r.status_code == 200, r.text
    body = r.json()
    handles = {f"{s['tenant']}/{s['part']}": s["handle"] for s in body["streams"]}
    assert handles["a/set-assoc"] == handles["b/set-assoc"]  # random with random
    assert len({handles["a/loc"], handles["b/loc"], handles["a/set-assoc"]}) == 3
    assert body["predicted_by"] == "simulator" and 1.0 <= body["predicted_dlwa"] <= 1.1
    assert body["shared"] and "share handle" in body["shared"][0]["reason"]
    assert body["warnings"]  # sharing is never silent
    assert client.get("/api/v1/placements/h1/nvme0").json()["streams"] == body["streams"]
    assert [p["device"] for p in client.get("/api/v1/placements").json()] == ["nvme0"]
    again = client.post("/api/v1/placements/recompute")
    assert again.status_code == 200 and again.json()[0]["streams"] == body["streams"]


def test_a_device_without_fdp_shares_the_default_placement_and_says_so(setup: TestClient) -> None:
    r = setup.post("/api/v1/placements/h1/flash0", json={"streams": STREAMS, "simulate": False})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {s["handle"] for s in body["streams"]} == {0}
    assert any("no FDP placement handles" in w for w in body["warnings"])
    assert body["predicted_by"] == "model" and body["predicted_dlwa"] > 2


@pytest.mark.parametrize(
    ("path", "payload", "status", "needle"),
    [
        ("/api/v1/placements/nohost/nvme0", {"streams": STREAMS}, 404, "nohost"),
        ("/api/v1/placements/h1/nvme9", {"streams": STREAMS}, 404, "nvme0"),
        ("/api/v1/placements/h1/nvme0", {"streams": [{**STREAMS[0], "tenant": "ghost"}]}, 422, "streams[0].tenant"),
        ("/api/v1/placements/h1/nvme0", {"streams": [{**STREAMS[0], "part": "disk"}]}, 422, "streams[0].part"),
        (
            "/api/v1/placements/h1/nvme0",
            {"streams": [{**s, "space": 0.6} for s in STREAMS[:2]]},
            422,
            "more than the device",
        ),
        ("/api/v1/placements/h1/nvme0", {"streams": []}, 422, "streams"),
        ("/api/v1/placements/h1/nvme0", {"streams": STREAMS, "overprovisioning": 0}, 422, "overprovisioning"),
    ],
)
def test_bad_requests_are_4xx_and_change_nothing(
    setup: TestClient, db: Engine, path: str, payload: dict, status: int, needle: str
) -> None:
    before = snapshot(db)
    body = assert_problem(setup.post(path, json=payload), status)
    assert needle in body["detail"] or any(
        needle in e["field"] or needle in e["message"] for e in body.get("errors", [])
    )
    assert snapshot(db) == before


def test_unknown_placement_is_404(setup: TestClient) -> None:
    assert_problem(setup.get("/api/v1/placements/h1/nvme0"), 404)
