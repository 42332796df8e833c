"""Hit ratios of the tenants' caches at their allocated sizes, from the agents' shadow-cache
counters in telemetry: per interval, summed over hosts, in the series and the summary."""

from __future__ import annotations

from fastapi.testclient import TestClient
from test_telemetry_store import T0, T5, T10, report

from lachesis_controller.bus.agent_telemetry import TelemetryStore, hit_ratio


def cache(hits: int, misses: int, size: int = 16 << 20) -> dict[str, int]:
    return {"size_bytes": size, "hits": hits, "misses": misses}


def test_hit_ratio_is_over_the_interval_and_summed_over_hosts() -> None:
    store = TelemetryStore()
    store.ingest(report(T0, cache=cache(100, 900)))
    store.ingest(report(T0, host="host-b", cache=cache(0, 0)))
    assert store.tenant_caches() == {}  # one report is no interval yet
    store.ingest(report(T5, cache=cache(400, 1000)))  # +300 hits, +100 misses
    assert store.tenant("web").series[-1].hit_ratio == 0.75
    store.ingest(report(T5, host="host-b", cache=cache(100, 300)))  # +100, +300
    assert store.tenant_caches() == {"web": (400, 400)}
    assert store.tenant("web").series[-1].hit_ratio == 0.5
    # A tenant without a cache (no allocation) has no hit ratio, not zero.
    assert "batch" not in store.tenant_caches()
    assert store.tenant("batch").series[-1].hit_ratio is None


def test_an_idle_interval_and_a_restarted_agent() -> None:
    store = TelemetryStore()
    store.ingest(report(T0, cache=cache(50, 50)))
    store.ingest(report(T5, cache=cache(50, 50)))
    assert store.tenant("web").series[-1].hit_ratio is None  # no reference: no ratio
    store.ingest(report(T10, cache=cache(3, 1)))  # counters went down: restarted from zero
    assert store.tenant("web").series[-1].hit_ratio == 0.75


def test_hit_ratio_of_several_caches_weighs_by_references() -> None:
    assert hit_ratio([(90, 10), (0, 100)]) == 0.45
    assert hit_ratio([]) is None and hit_ratio([(0, 0)]) is None


def test_summary_reports_hit_ratios(client: TestClient) -> None:
    from conftest import TENANT

    client.post("/api/v1/tenants", json=TENANT)
    client.post("/api/v1/tenants", json={"name": "batch", "classifiers": []})
    store: TelemetryStore = client.app.state.telemetry  # type: ignore[attr-defined]
    store.ingest(report(T0, cache=cache(0, 0)))
    store.ingest(report(T5, cache=cache(30, 10)))
    summary = client.get("/api/v1/telemetry/summary").json()
    assert summary["hit_ratio"] == 0.75
    assert {t["name"]: t["hit_ratio"] for t in summary["tenants"]} == {"batch": None, "web": 0.75}
    point = client.get("/api/v1/tenants/web/telemetry").json()["series"][-1]
    assert point["hit_ratio"] == 0.75
