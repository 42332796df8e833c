"""/api/v1/devices: registered devices with measured and predicted DLWA."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conftest import TENANT, FakeAgent, enroll_host, now_rfc3339, wait_until
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from lachesis_controller.bus.messages import Telemetry

FLASH = {
    "name": "flash0",
    "path": "/var/lib/lachesis/flash0.img",
    "kind": "measured",
    "size_bytes": 1 << 30,
    "fdp": True,
    "placement_handles": 8,
    "reclaim_unit_bytes": 1 << 20,
}


def register_with_flash(agent: FakeAgent) -> None:
    agent.send(
        "registrations",
        {
            "schema": "lachesis.registration/v1",
            "host_id": agent.host_id,
            "agent_version": "0.1.0",
            "started_at": now_rfc3339(),
            "capabilities": {
                "cpus": 2,
                "devices": [FLASH],
                "kernel": {"release": "6.1.0", "btf": True, "io_uring": True, "fuse": True},
            },
        },
    )


def two_kangaroo_tenants(client: TestClient, agent: FakeAgent) -> dict[str, Any]:
    """host-a with a flash device, tenants web and api with a Kangaroo cache stage each; the
    desired state that places them."""
    enroll_host(client, agent.host_id)
    register_with_flash(agent)
    agent.ack(agent.wait_desired(1))
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert (
        client.post(
            "/api/v1/tenants",
            json={**TENANT, "name": "api", "classifiers": [{"kind": "path_prefix", "value": "/srv/api/"}]},
        ).status_code
        == 201
    )
    for owner in ("web", "api"):
        body = {
            "name": f"cache/{owner}",
            "kind": "cache",
            "owner": owner,
            "size_bytes": 256 << 20,
            "engine": "kangaroo",
        }
        assert client.post("/api/v1/stages", json=body).status_code == 201
    return agent.wait_desired(5)  # enrolment, two tenants, two stages


def test_devices_show_measured_and_predicted_dlwa(client: TestClient, agents: Callable[[str], FakeAgent]) -> None:
    state = two_kangaroo_tenants(client, agents("host-a"))
    handles = {(s["owner"], p["part"]): p["handle"] for s in state["stages"] for p in s["placement"]}
    assert len(handles) == 4 and len(set(handles.values())) == 4, handles
    client.app.state.telemetry.ingest(
        Telemetry.model_validate(
            {  # type: ignore[attr-defined]
                "schema": "lachesis.telemetry/v1",
                "host_id": "host-a",
                "sent_at": "2026-11-24T10:00:00Z",
                "interval_s": 5.0,
                "tenants": [],
                "stages": [],
                "devices": [
                    {
                        "name": "flash0",
                        "host_bytes_written": 1000,
                        "media_bytes_written": 1250,
                        "kind": "measured",
                        "placement_handles": 8,
                        "reclaim_unit_bytes": 1 << 20,
                        "handles": [{"handle": 1, "host_bytes_written": 1000, "media_bytes_written": 1250}],
                    }
                ],
            }
        )
    )
    (dev,) = wait_until(lambda: client.get("/api/v1/devices").json(), what="devices")
    assert (dev["kind"], dev["placement_handles"], dev["host_bytes_written"], dev["media_bytes_written"]) == (
        "measured",
        8,
        1000,
        1250,
    )
    assert dev["dlwa"] == 1.25 and dev["handles"][0]["dlwa"] == 1.25
    assert dev["predicted_by"] == "model" and dev["predicted_dlwa"] >= 1.0


def test_placement_assignments_follow_what_each_generation_shipped(
    client: TestClient, agents: Callable[[str], FakeAgent], db: Engine
) -> None:
    """The handles a host was shipped are rows of their own, replaced by every generation:
    a new tenant's stage leaves the others' handles alone, and a stage taken away takes its
    rows with it."""

    def rows() -> dict[tuple[str, str], tuple[int, int]]:
        with db.connect() as connection:
            found = connection.execute(
                text("SELECT tenant, part, handle, generation FROM placement_assignments WHERE host_id = 'host-a'")
            )
            return {(t, p): (h, g) for t, p, h, g in found}

    def shipped(state: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
        return {
            (s["owner"], p["part"]): (p["handle"], state["generation"]) for s in state["stages"] for p in s["placement"]
        }

    agent = agents("host-a")
    state = two_kangaroo_tenants(client, agent)
    agent.ack(state)
    assert len(rows()) == 4 and rows() == shipped(state)

    tenant = {**TENANT, "name": "batch", "classifiers": [{"kind": "path_prefix", "value": "/srv/batch/"}]}
    assert client.post("/api/v1/tenants", json=tenant).status_code == 201
    agent.ack(agent.wait_desired(6))
    stage = {"name": "cache/batch", "kind": "cache", "owner": "batch", "size_bytes": 128 << 20, "engine": "kangaroo"}
    assert client.post("/api/v1/stages", json=stage).status_code == 201
    later = agent.wait_desired(7)
    agent.ack(later)
    assert rows() == shipped(later) and len(rows()) == 6
    kept = {k: h for k, (h, _) in shipped(state).items()}
    assert {k: h for k, (h, _) in rows().items() if k[0] != "batch"} == kept

    assert client.delete("/api/v1/stages/cache/web").status_code == 204
    last = agent.wait_desired(8)
    assert {t for t, _ in rows()} == {"api", "batch"} and rows() == shipped(last)
