"""The sustainability routes from measured bytes end to end: a real agent with a data path and a
measuring flash device, a tenant's cache stage written and read through the FUSE mount; the
controller's footprint of the device and the tenant is built from what the agent reported
(the device's handle counters, the stage's counters, the handles shipped in desired state).
Needs root and /dev/fuse (as the other data path tests; CI fails without them)."""

from __future__ import annotations

import os

import pytest
from conftest import HOST, Cluster, start_with_datapath, wait_for

STAGE = "cache/wb"
MiB = 1 << 20


@pytest.fixture
def datapath(monkeypatch: pytest.MonkeyPatch, cluster: Cluster):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    return cluster, start_with_datapath(cluster, "64MiB")


def test_footprint_of_a_tenant_written_through_the_mount(datapath) -> None:  # type: ignore[no-untyped-def]
    cluster, home = datapath
    with cluster.api() as api:
        assert (
            api.post(
                "/api/v1/tenants", json={"name": "writer", "classifiers": [{"kind": "path_prefix", "value": "/wb/"}]}
            ).status_code
            == 201
        )
        stage = {
            "name": STAGE,
            "kind": "cache",
            "owner": "writer",
            "size_bytes": 32 * MiB,
            "engine": "loc",
            "write_mode": "through",
        }
        assert api.post("/api/v1/stages", json=stage).status_code == 201
        # The FUSE switch classifies by the rule's path, not by the tenant's path classifier.
        rule = {
            "name": "wb",
            "priority": 5,
            "match": {"path_prefix": "/wb"},
            "detours": [{"what": "io", "to": {"kind": "stage", "target": STAGE}}],
        }
        created = api.post("/api/v1/rules", json=rule)
        assert created.status_code == 201, created.text
        cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)
        # The stage's first report, before any write: the window holds all its bytes.
        wait_for(
            "the stage reported",
            lambda: [
                h for h in api.get(f"/api/v1/stages/{STAGE}/stats").json() if h["host_id"] == HOST and h["reported_at"]
            ],
        )

    # 8 MiB written through the stage (write-through: the LOC stores whole blocks) and read
    # back: the stage was given at least those bytes, and its log wrote regions to flash0.
    (home / "mnt" / "wb").mkdir()
    target = home / "mnt" / "wb" / "data.bin"
    payload = os.urandom(8 * MiB)
    with open(target, "wb") as f:
        f.write(payload)
        os.fsync(f.fileno())
    assert target.read_bytes() == payload

    def measured() -> tuple[dict, dict, dict] | None:
        with cluster.api() as api:
            tenants = api.get("/api/v1/sustainability/tenants").json()["tenants"]
            devices = api.get("/api/v1/sustainability/devices").json()["devices"]
            cmp = api.get("/api/v1/sustainability/compare", params={"tenant": "writer"}).json()
        (t,) = [t for t in tenants if t["name"] == "writer"]
        (d,) = [d for d in devices if d["host"] == HOST and d["name"] == "flash0"]
        if t["given_bytes"] < len(payload) or not t["host_bytes"] or not d["measured"]:
            return None
        return t, d, cmp

    wait_for("the tenant's flash writes in its footprint", measured, timeout=60)
    # Stop the agent so no report moves the window between the three reads, then read until
    # two answers agree (the controller has consumed the agent's last report).
    cluster.processes[f"agent-{HOST}"].stop()
    last: list = [None]

    def settled() -> tuple[dict, dict, dict] | None:
        now, last[0] = measured(), measured()
        return now if now is not None and now == last[0] else None

    t, d, cmp = wait_for("the footprint to settle once the agent stopped", settled, timeout=30)
    assert t["engines"] == ["loc"]
    # The agent reports its engine's own counts: what the LOC was asked to store (keys and the
    # 8 MiB of blocks) and what it wrote to flash0; the tenant's given bytes are the former.
    (report,) = [s for s in cluster.agent_messages("telemetry", HOST)[-1]["stages"] if s["name"] == STAGE]
    assert report["app_bytes_written"] >= len(payload) and report["flash_bytes_written"] > 0, report
    assert t["given_bytes"] == report["app_bytes_written"]
    assert t["alwa"] == pytest.approx(t["host_bytes"] / t["given_bytes"])
    # The measuring device counts media bytes: the tenant's DLWA and the device's are known.
    assert t["dlwa"] is not None and t["dlwa"] >= 1.0 and d["dlwa"] >= 1.0
    share = {s["tenant"]: s["share"] for s in d["tenants"]}["writer"]
    assert share + d["unattributed_share"] == pytest.approx(1.0)
    assert t["kg_per_year"] == pytest.approx(d["kg_per_year"] * share)
    assert t["lifetime_years"] == pytest.approx(d["lifetime_years"])
    # The tenant wrote through its handles, and the device measured writes.
    assert t["host_bytes"] > 0 and d["host_bytes_per_s"] > 0
    # A log has no other small-object engine to compare with; "current" is what was measured.
    names = [s["name"] for s in cmp["scenarios"]]
    assert names[0] == "current" and "fairywren" not in names and "kangaroo" not in names
    assert cmp["scenarios"][0]["kg_per_year"] == pytest.approx(t["kg_per_year"])
