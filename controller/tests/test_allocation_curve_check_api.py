"""GET /api/v1/allocations says, per tenant, whether its curve agrees with its cache stage's
measured hit ratio (allocation/curve_check.py); the metrics say the same. Decided by counts of
references in the reports, never by time."""

from __future__ import annotations

from typing import Any

from conftest import TENANT
from fastapi.testclient import TestClient

from lachesis_controller.allocation.service import curve_checks, export_curve_checks
from lachesis_controller.bus.messages import Telemetry
from lachesis_controller.observability import metrics

SIZE = 8 << 20


def report(second: int, hits: int, misses: int, curve_hit: float) -> Telemetry:
    return Telemetry.model_validate(
        {
            "schema": "lachesis.telemetry/v1",
            "host_id": "host-a",
            "sent_at": f"2026-11-28T10:00:{second:02d}Z",
            "interval_s": 1.0,
            "devices": [],
            "tenants": [
                {
                    "name": "web",
                    "ops_read": hits + misses,
                    "ops_written": 0,
                    "bytes_read": 4096 * (hits + misses),
                    "bytes_written": 0,
                    "latency_us_p99": None,
                    "curve": {
                        "policy": "lru",
                        "algorithm": "shards-fixed-size",
                        "unit": "bytes",
                        "sizes": [4096, 64 << 20],
                        "miss_ratios": [1 - curve_hit, 1 - curve_hit],
                        "references": hits + misses + 1,
                    },
                }
            ],
            "stages": [
                {
                    "name": "cache/web",
                    "kind": "cache",
                    "owner": "web",
                    "engine": "loc",
                    "size_bytes": SIZE,
                    "installed_bytes": SIZE,
                    "hits": hits,
                    "misses": misses,
                }
            ],
        }
    )


def check_of(client: TestClient) -> dict[str, Any]:
    (row,) = [r for r in client.get("/api/v1/allocations").json() if r["tenant"] == "web"]
    return row["curve_check"]  # type: ignore[no-any-return]


def test_a_curve_off_its_stage_is_reported(client: TestClient) -> None:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    store = client.app.state.telemetry  # type: ignore[attr-defined]
    (row,) = client.get("/api/v1/allocations").json()
    assert row["curve_check"] is None  # no stage reports yet
    # The curve says 0.5 at 8 MiB; the stage warms up (4,096 references) then hits 0.9.
    store.ingest(report(0, 0, 0, 0.5))
    store.ingest(report(1, 100, 4000, 0.5))
    check = check_of(client)
    assert check["off"] is None and check["installed_bytes"] == SIZE
    store.ingest(report(2, 18_100, 6000, 0.5))
    check = check_of(client)
    assert check["off"] is True and check["references"] == 20_000
    assert abs(check["measured_hit_ratio"] - 0.9) < 1e-9 and abs(check["predicted_hit_ratio"] - 0.5) < 1e-9
    exported: set[str] = set()
    export_curve_checks(curve_checks(store), exported)
    assert exported == {"web"}
    assert metrics.TENANT_CURVE_OFF.labels("web")._value.get() == 1.0
    # The tenant's stage goes away: so does its metric.
    export_curve_checks({}, exported)
    assert exported == set()
