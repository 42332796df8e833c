"""/api/v1/devices: registered devices with measured and predicted DLWA."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conftest import TENANT, FakeAgent, enroll_host, now_rfc3339, wait_until
from fastapi.testclient import TestClient

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
