"""Agent telemetry: the in-memory store (rates, curves, devices) and the telemetry API fed
from an agent's telemetry stream on a real redis-server."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import SCHEMAS, TENANT, assert_problem, enroll_host, make_settings, wait_until
from fastapi.testclient import TestClient

from lachesis_controller.app import create_app
from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.bus.messages import Telemetry

FIXTURE = json.loads((SCHEMAS / "fixtures" / "telemetry" / "valid-two-tenants.json").read_text())


def report(at: str, host: str = "host-a", interval: float = 5.0, **web: Any) -> Telemetry:
    """The valid-two-tenants fixture sent at `at` by `host`, tenant web's fields overridden."""
    data = copy.deepcopy(FIXTURE)
    data["host_id"], data["sent_at"], data["interval_s"] = host, at, interval
    data["tenants"][0].update(web)
    return Telemetry.model_validate(data)


T0, T5, T10 = "2026-11-21T10:00:00Z", "2026-11-21T10:00:05Z", "2026-11-21T10:00:10Z"


def test_consecutive_reports_become_rates() -> None:
    store = TelemetryStore()
    store.ingest(report(T0, ops_read=1000, bytes_read=4_096_000, ops_written=0, bytes_written=0))
    assert store.tenant("web").series == []  # one report is no rate yet
    store.ingest(report(T5, ops_read=6000, bytes_read=24_576_000, ops_written=50, bytes_written=204_800))
    (point,) = store.tenant("web").series
    assert point.rates.read_iops == 1000.0
    assert point.rates.read_bytes_per_s == 4_096_000.0
    assert point.rates.write_iops == 10.0
    assert point.rates.write_bytes_per_s == 40_960.0
    assert store.tenant_rates()["web"].iops == 1010.0
    assert store.tenant("web").updated_at is not None and store.tenant("web").updated_at.second == 5


def test_a_counter_that_goes_down_restarted_from_zero() -> None:
    store = TelemetryStore()
    store.ingest(report(T0, ops_read=9000))
    store.ingest(report(T5, ops_read=500))  # the agent restarted
    assert store.tenant("web").series[-1].rates.read_iops == 100.0


def test_repeated_and_older_reports_change_nothing() -> None:
    store = TelemetryStore()
    store.ingest(report(T0, ops_read=0))
    store.ingest(report(T5, ops_read=5000))
    before = store.tenant("web")
    store.ingest(report(T5, ops_read=5000))
    store.ingest(report(T0, ops_read=0))
    assert store.tenant("web") == before


def test_rates_sum_over_hosts_and_stale_hosts_drop_out() -> None:
    store = TelemetryStore()
    for host in ("host-a", "host-b"):
        store.ingest(report(T0, host=host, ops_read=0))
        store.ingest(report(T5, host=host, ops_read=500))
    assert store.tenant_rates()["web"].read_iops == 200.0
    # host-b goes quiet; 30 s later (6 of its intervals) only host-a counts.
    store.ingest(report("2026-11-21T10:00:35Z", host="host-a", ops_read=3500))
    assert store.tenant_rates()["web"].read_iops == 100.0


MIB = 1 << 20


def blocks_report(at: str, host: str = "host-a", **tenants: tuple[int, int, int | None]) -> Telemetry:
    """A report whose tenants (name=(read ops, read bytes, block references or None for no
    curve)) carry only those counters."""
    curve = FIXTURE["tenants"][0]["curve"]
    data = copy.deepcopy(FIXTURE) | {"host_id": host, "sent_at": at, "devices": []}
    data["tenants"] = [
        {
            "name": n,
            "ops_read": ops,
            "ops_written": 0,
            "bytes_read": nbytes,
            "bytes_written": 0,
            "latency_us_p99": None,
            "curve": None if refs is None else curve | {"references": refs},
        }
        for n, (ops, nbytes, refs) in tenants.items()
    ]
    return Telemetry.model_validate(data)


def test_block_reference_rate_counts_4k_blocks_not_syscalls() -> None:
    store = TelemetryStore()
    # Same IOPS: "web" reads 1 MiB a call (256 blocks), "batch" 4 KiB (one block), "cached"
    # is served by the page cache (its block count stands still).
    store.ingest(blocks_report(T0, web=(0, 0, 1), batch=(0, 0, 1), cached=(0, 0, 70)))
    store.ingest(
        blocks_report(
            T5, web=(500, 500 * MIB, 1 + 500 * 256), batch=(500, 500 * 4096, 501), cached=(500, 500 * 4096, 70)
        )
    )
    rates = store.tenant_rates()
    assert rates["web"].iops == rates["batch"].iops == rates["cached"].iops == 100.0
    assert rates["web"].block_refs_per_s == 25_600.0
    assert rates["batch"].block_refs_per_s == 100.0
    assert rates["cached"].block_refs_per_s == 0.0
    assert store.tenant("web").series[-1].rates.block_refs_per_s == 25_600.0


def test_block_references_sum_over_hosts_and_a_host_without_block_io_adds_none() -> None:
    store = TelemetryStore()
    store.ingest(blocks_report(T0, "host-a", web=(0, 0, 100)))
    store.ingest(blocks_report(T0, "host-b", web=(0, 0, 100)))
    store.ingest(blocks_report(T0, "host-c", web=(0, 0, None)))
    store.ingest(blocks_report(T5, "host-a", web=(10, 10 * MIB, 100 + 2560)))
    store.ingest(blocks_report(T5, "host-b", web=(10, 10 * MIB, 100 + 2560)))
    # host-c: page-cache hits only, so no block reference ever and no curve: IOPS, no blocks.
    store.ingest(blocks_report(T5, "host-c", web=(1000, 1000 * 4096, None)))
    rates = store.tenant_rates()["web"]
    assert rates.iops == 204.0
    assert rates.block_refs_per_s == 1024.0


def test_curve_appearing_counts_from_zero_and_reports_without_one_carry_no_blocks() -> None:
    store = TelemetryStore()
    store.ingest(blocks_report(T0, web=(0, 0, None), batch=(0, 0, None)))
    store.ingest(blocks_report(T5, web=(5, 5 * 4096, 5), batch=(50, 50 * 4096, None)))
    rates = store.tenant_rates()
    assert rates["web"].block_refs_per_s == 1.0  # the agent sends a curve from the first reference
    assert rates["batch"].block_refs_per_s is None and rates["batch"].iops == 10.0
    # web's slot recreated (the agent restarted, no block IO since): no curve means zero.
    store.ingest(blocks_report(T10, web=(1, 4096, None), batch=(50, 50 * 4096, None)))
    assert store.tenant_rates()["web"].block_refs_per_s == 0.0


def test_latest_curves_prefer_the_curve_with_most_references() -> None:
    store = TelemetryStore()
    small = copy.deepcopy(FIXTURE["tenants"][0]["curve"]) | {"references": 10, "miss_ratios": [1.0, 1.0, 1.0]}
    store.ingest(report(T0, host="host-a"))
    store.ingest(report(T0, host="host-b", curve=small))
    curves = store.latest_curves()
    assert set(curves) == {"web"}  # batch has no curve
    assert curves["web"].references == 12300
    assert curves["web"].sizes == [1048576, 16777216, 268435456]


def test_devices_get_write_rates_and_dlwa() -> None:
    store = TelemetryStore()
    store.ingest(report(T0))
    nvme = {"name": "nvme0", "host_bytes_written": 1228800 + 5_000_000, "media_bytes_written": 1474560 + 7_500_000}
    data = report(T5).dump()
    data["devices"] = [nvme, FIXTURE["devices"][1]]
    store.ingest(Telemetry.model_validate(data))
    devices = {d: (w, dlwa) for _, d, w, dlwa in store.devices()}
    assert devices["nvme0"] == (1_000_000.0, 1.5)
    assert devices["flash1"] == (0.0, None)


# --- the API, fed through Redis ----------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path, redis_url: str) -> Iterator[tuple[TestClient, redis.Redis]]:
    bus = redis.Redis.from_url(redis_url, decode_responses=True)
    with TestClient(create_app(make_settings(tmp_path, redis_url))) as client:
        enroll_host(client, "host-a")
        for tenant in (TENANT, {"name": "batch", "classifiers": []}):
            assert client.post("/api/v1/tenants", json=tenant).status_code == 201
        yield client, bus
    bus.close()


def xadd(bus: redis.Redis, msg: Telemetry | str) -> None:
    bus.xadd("lachesis:agent:host-a:telemetry", {"msg": msg if isinstance(msg, str) else json.dumps(msg.dump())})


def test_telemetry_api_serves_what_agents_sent(api: tuple[TestClient, redis.Redis]) -> None:
    client, bus = api
    empty = client.get("/api/v1/tenants/web/telemetry")
    assert empty.status_code == 200
    assert empty.json() == {"tenant": "web", "updated_at": None, "curve": None, "series": []}

    xadd(bus, report(T0, ops_read=0, bytes_read=0))
    xadd(bus, report(T5, ops_read=5000, bytes_read=20_480_000))
    body = wait_until(
        lambda: (b := client.get("/api/v1/tenants/web/telemetry").json())["series"] and b, what="telemetry"
    )
    assert body["curve"] == {
        "policy": "lru",
        "algorithm": "shards-fixed-size",
        "unit": "bytes",
        "references": 12300,
        "points": [
            {"size_bytes": 1048576, "miss_ratio": 0.92},
            {"size_bytes": 16777216, "miss_ratio": 0.41},
            {"size_bytes": 268435456, "miss_ratio": 0.05},
        ],
    }
    (point,) = body["series"]
    assert point["read_iops"] == 1000.0 and point["read_bytes_per_s"] == 4_096_000.0
    assert point["hit_ratio"] is None
    assert body["updated_at"].startswith("2026-11-21T10:00:05")

    summary = client.get("/api/v1/telemetry/summary").json()
    assert summary["tenants"] == [
        {"name": "batch", "iops": 0.0, "hit_ratio": None},
        {"name": "web", "iops": 1000.0 + point["write_iops"], "hit_ratio": None},
    ]
    assert summary["total_iops"] == 1000.0 + point["write_iops"]
    assert {(d["host_id"], d["name"]) for d in summary["devices"]} == {("host-a", "nvme0"), ("host-a", "flash1")}


def test_a_bad_telemetry_message_is_dropped_with_a_log_line(
    api: tuple[TestClient, redis.Redis], caplog: pytest.LogCaptureFixture
) -> None:
    client, bus = api
    xadd(bus, report(T0, ops_read=0))
    xadd(bus, report(T5, ops_read=5000))
    before = wait_until(lambda: (b := client.get("/api/v1/tenants/web/telemetry").json())["series"] and b)
    bad = report(T10, ops_read=99999).dump()
    bad["tenants"][0]["curve"]["miss_ratios"] = [0.5]  # one ratio for three sizes
    with caplog.at_level(logging.WARNING, logger="lachesis_controller.bus.consumer"):
        xadd(bus, json.dumps(bad))
        xadd(bus, "{not json")
        wait_until(
            lambda: sum(
                "lachesis:agent:host-a:telemetry" in r.getMessage() and "dropped invalid" in r.getMessage()
                for r in caplog.records
            )
            == 2,
            what="two drop log lines",
        )
    assert client.get("/api/v1/tenants/web/telemetry").json() == before


def test_unknown_tenant_is_a_404_problem(api: tuple[TestClient, redis.Redis]) -> None:
    client, _ = api
    body = assert_problem(client.get("/api/v1/tenants/nope/telemetry"), 404)
    assert "nope" in body["detail"]


def test_tenant_scoped_tokens_see_only_their_tenant(tmp_path: Path, redis_url: str) -> None:
    admin = {"Authorization": "Bearer boot"}
    with TestClient(create_app(make_settings(tmp_path, redis_url, api_token="boot"))) as client:
        for tenant in (TENANT, {"name": "batch", "classifiers": []}):
            assert client.post("/api/v1/tenants", json=tenant, headers=admin).status_code == 201
        made = client.post(
            "/api/v1/tokens", json={"name": "web-look", "role": "viewer", "tenant": "web"}, headers=admin
        )
        web = {"Authorization": f"Bearer {made.json()['token']}"}
        assert client.get("/api/v1/tenants/web/telemetry", headers=web).status_code == 200
        assert_problem(client.get("/api/v1/tenants/batch/telemetry", headers=web), 403)
        summary = client.get("/api/v1/telemetry/summary", headers=web).json()
        assert [t["name"] for t in summary["tenants"]] == ["web"] and summary["devices"] == []
        assert len(client.get("/api/v1/telemetry/summary", headers=admin).json()["tenants"]) == 2
