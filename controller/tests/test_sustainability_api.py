"""/api/v1/sustainability/{devices,tenants,compare}: real controller, real Redis, a fake agent
that registers a flash device and acks; telemetry as the agent would report it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TENANT, FakeAgent, assert_problem, make_settings
from fastapi.testclient import TestClient
from test_devices_api import two_kangaroo_tenants

from lachesis_controller.app import create_app
from lachesis_controller.bus.messages import Telemetry

GIB = 1 << 30


def _report(at: str, handles: dict[int, tuple[int, int]], stages: dict[str, tuple[int, int]]) -> Telemetry:
    return Telemetry.model_validate(
        {
            "schema": "lachesis.telemetry/v1",
            "host_id": "host-a",
            "sent_at": at,
            "interval_s": 5.0,
            "tenants": [],
            "stages": [
                {
                    "name": f"cache/{owner}",
                    "kind": "cache",
                    "owner": owner,
                    "engine": "kangaroo",
                    "bytes_written": w,
                    "bytes_read_miss": m,
                }
                for owner, (w, m) in stages.items()
            ],
            "devices": [
                {
                    "name": "flash0",
                    "host_bytes_written": sum(a for a, _ in handles.values()),
                    "media_bytes_written": sum(b for _, b in handles.values()),
                    "kind": "measured",
                    "placement_handles": 8,
                    "reclaim_unit_bytes": 1 << 20,
                    "handles": [
                        {"handle": h, "host_bytes_written": a, "media_bytes_written": b}
                        for h, (a, b) in handles.items()
                    ],
                }
            ],
        }
    )


def _two_tenants(client: TestClient, agent: FakeAgent) -> dict[tuple[str, str], int]:
    state = two_kangaroo_tenants(client, agent)
    agent.ack(state)
    return {(s["owner"], p["part"]): p["handle"] for s in state["stages"] for p in s["placement"]}


def test_footprint_per_device_and_tenant_from_measured_bytes(
    client: TestClient, agents: Callable[[str], FakeAgent]
) -> None:
    agent = agents("host-a")
    handles = _two_tenants(client, agent)
    store = client.app.state.telemetry  # type: ignore[attr-defined]
    web = [handles["web", "klog"], handles["web", "kset"]]
    api = [handles["api", "klog"], handles["api", "kset"]]
    zero = {h: (0, 0) for h in web + api}
    store.ingest(_report("2026-11-24T10:00:00Z", zero, {"web": (0, 0), "api": (0, 0)}))
    # In 100 s: web gave its cache 1 MB and its handles took 8 MB (4 MB each) at DLWA 2;
    # api gave 2 MB and its handles took 2 MB at DLWA 1.
    later = {
        web[0]: (4_000_000, 8_000_000),
        web[1]: (4_000_000, 8_000_000),
        api[0]: (1_000_000, 1_000_000),
        api[1]: (1_000_000, 1_000_000),
    }
    store.ingest(_report("2026-11-24T10:01:40Z", later, {"web": (600_000, 400_000), "api": (2_000_000, 0)}))

    body = client.get("/api/v1/sustainability/devices").json()
    assert body["assumptions"]["pe_cycles"] == pytest.approx(3.5 * 365.25 * 5)
    (dev,) = body["devices"]
    assert dev["measured"] and dev["seconds"] == 100.0
    assert dev["dlwa"] == pytest.approx(18 / 10) and dev["media_bytes_per_s"] == pytest.approx(180_000)
    assert dev["dwpd"] == pytest.approx(100_000 * 86_400 / GIB)
    assert dev["lifetime_years"] == pytest.approx(3.5 * 365.25 * 5 * GIB / 180_000 / (86_400 * 365.25))
    # The 1 GiB device embodies 0.16 kg per GB, amortised over its 1.2 years of wear.
    assert dev["embodied_kg"] == pytest.approx(GIB / 1e9 * 0.16)
    assert dev["lifetime_years"] < 5 and dev["kg_per_year"] == pytest.approx(dev["embodied_kg"] / dev["lifetime_years"])
    shares = {t["tenant"]: t["share"] for t in dev["tenants"]}
    assert shares == {"api": pytest.approx(2 / 18), "web": pytest.approx(16 / 18)}
    assert dev["unattributed_share"] == pytest.approx(0.0)
    # Closed form: KSet (random) streams share the spare space; on one handle the logs join them.
    assert 1.0 < dev["separate_handles_dlwa"] < dev["one_handle_dlwa"]

    tenants = {t["name"]: t for t in client.get("/api/v1/sustainability/tenants").json()["tenants"]}
    w = tenants["web"]
    assert (w["engines"], w["given_bytes"], w["host_bytes"], w["media_bytes"]) == (["kangaroo"], 1_000_000, 8e6, 16e6)
    assert (w["alwa"], w["dlwa"], w["wa"]) == (pytest.approx(8.0), pytest.approx(2.0), pytest.approx(16.0))
    assert w["kg_per_year"] == pytest.approx(dev["kg_per_year"] * 16 / 18)
    assert tenants["api"]["alwa"] == pytest.approx(1.0) and tenants["api"]["dlwa"] == pytest.approx(1.0)

    cmp = client.get("/api/v1/sustainability/compare", params={"tenant": "web"}).json()
    by = {s["name"]: s for s in cmp["scenarios"]}
    assert list(by) == ["current", "fairywren", "separate handles", "one handle"]
    assert by["current"]["wa"] == pytest.approx(16.0) and by["current"]["kg_per_year"] == pytest.approx(
        w["kg_per_year"]
    )
    # FairyWREN writes 1.89/23 of Kangaroo's media bytes: a longer-lived device, a smaller share.
    assert by["fairywren"]["wa"] == pytest.approx(16.0 * 1.89 / 23)
    assert by["fairywren"]["lifetime_years"] > by["current"]["lifetime_years"]
    assert by["fairywren"]["kg_per_year"] < by["current"]["kg_per_year"]
    assert by["one handle"]["lifetime_years"] < by["separate handles"]["lifetime_years"]


def test_empty_telemetry_answers_unmeasured(client: TestClient, agents: Callable[[str], FakeAgent]) -> None:
    _two_tenants(client, agents("host-a"))
    (dev,) = client.get("/api/v1/sustainability/devices").json()["devices"]
    assert not dev["measured"] and dev["dlwa"] is None and dev["lifetime_years"] is None and dev["tenants"] == []
    assert dev["embodied_kg"] == pytest.approx(GIB / 1e9 * 0.16)
    for t in client.get("/api/v1/sustainability/tenants").json()["tenants"]:
        assert (t["given_bytes"], t["host_bytes"], t["alwa"], t["kg_per_year"], t["devices"]) == (0, 0, None, 0, [])
    (current,) = client.get("/api/v1/sustainability/compare?tenant=web").json()["scenarios"]
    assert current["name"] == "current" and current["lifetime_years"] is None


def test_no_hosts_no_devices(client: TestClient) -> None:
    assert client.get("/api/v1/sustainability/devices").json()["devices"] == []
    assert client.get("/api/v1/sustainability/tenants").json()["tenants"] == []


@pytest.mark.parametrize(
    "query", ["window_s=0", "window_s=-5", "window_s=nan", "window_s=inf", "window_s=abc", "window_s=604801"]
)
def test_bad_window_is_a_422_problem(client: TestClient, query: str) -> None:
    for route in ("devices", "tenants", "compare?tenant=web&"):
        sep = "" if route.endswith("&") else "?"
        body = assert_problem(client.get(f"/api/v1/sustainability/{route}{sep}{query}"), 422)
        assert "window_s" in body["detail"] or any("window_s" in str(e) for e in body.get("errors", []))


def test_compare_needs_a_known_tenant(client: TestClient) -> None:
    assert_problem(client.get("/api/v1/sustainability/compare"), 422)
    assert_problem(client.get("/api/v1/sustainability/compare?tenant="), 422)
    body = assert_problem(client.get("/api/v1/sustainability/compare?tenant=nope"), 404)
    assert "nope" in body["detail"]


def test_tenant_tokens_see_their_tenant_only(tmp_path: Path, redis_url: str) -> None:
    admin = {"Authorization": "Bearer boot"}
    with TestClient(create_app(make_settings(tmp_path, redis_url, api_token="boot", insecure_no_auth=False))) as client:
        for tenant in (TENANT, {"name": "batch", "classifiers": []}):
            assert client.post("/api/v1/tenants", json=tenant, headers=admin).status_code == 201
        made = client.post(
            "/api/v1/tokens", json={"name": "web-look", "role": "viewer", "tenant": "web"}, headers=admin
        )
        web: dict[str, Any] = {"Authorization": f"Bearer {made.json()['token']}"}
        assert_problem(client.get("/api/v1/sustainability/devices", headers=web), 403)
        assert [t["name"] for t in client.get("/api/v1/sustainability/tenants", headers=web).json()["tenants"]] == [
            "web"
        ]
        assert client.get("/api/v1/sustainability/compare?tenant=web", headers=web).status_code == 200
        assert_problem(client.get("/api/v1/sustainability/compare?tenant=batch", headers=web), 403)
