"""Every policy in policies/examples installs on a real agent with a data path (a FUSE mount
and a measuring flash device; the KV front end for kv-fairywren) and is in force there: the
rollout is applied, and every stage the controller ships for it is reported installed by the
agent; the FairyWREN example's stage stores objects in FairyWREN's parts."""

from __future__ import annotations

import json

import pytest
from conftest import HOST, ROOT, Cluster, free_port, start_with_datapath, wait_for
from pymemcache.client.base import Client

EXAMPLES = sorted((ROOT / "policies" / "examples").glob("*.yaml"))


@pytest.fixture
def datapath(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "500")
    # The examples' replicas live under /mnt (replica-sets, tail-latency-routing): the
    # operator lets this agent write there.
    start_with_datapath(cluster, "256MiB", ["--endpoint-root", "/mnt"])
    return cluster


def test_every_example_policy_installs_on_a_host_with_a_data_path(datapath: Cluster) -> None:
    assert len(EXAMPLES) == 12
    # What declared-scrub's scrub reads: /archive in the mount's namespace.
    archive = datapath.tmp / "home" / "data" / "archive"
    archive.mkdir()
    (archive / "part-0").write_bytes(b"\x5a" * (1 << 20))
    with datapath.api() as api:
        # All twelve, kv-fairywren too (its KV stages are installed by the switch here; the
        # last test serves it through the KV front end). With more streams than handles the
        # broker regroups them as tenants arrive: the stages keep their handles where they can,
        # and a stage that must move is rebuilt in the space it held.
        for example in EXAMPLES:
            applied = api.post(
                "/api/v1/policies", content=example.read_bytes(), headers={"content-type": "application/yaml"}
            )
            assert applied.status_code == 201, f"{example.name}: {applied.text}"
            rollout = datapath.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
            assert rollout["state"] == "succeeded", f"{example.name}: {rollout}"
            assert [t["status"] for t in rollout["targets"]] == ["applied"], f"{example.name}: {rollout}"
        # What the agent runs now: the shipped stages of all the policies.
        state = datapath.redis().get(f"lachesis:agent:{HOST}:desired")
        shipped = {s["name"]: s for s in json.loads(state).get("stages", [])}
        assert {
            "cache/alpha",
            "cache/beta",
            "cache/global",
            "cache/imagenet",
            "cache/media-l1",
            "cache/media-l2",
            "qos/gold",
        } <= set(shipped), sorted(shipped)
        assert shipped["cache/media-l1"]["next"] == "cache/media-l2"

        def installed() -> dict[str, dict]:
            out = {}
            for s in api.get("/api/v1/stages").json():
                for h in s["hosts"]:
                    if h["reported_at"] is not None and s["name"] in shipped:
                        out[s["name"]] = h
            return out if set(out) == set(shipped) else {}

        reports = wait_for("the agent to report every shipped stage", installed, timeout=60)
        for name, stage in shipped.items():
            if stage["kind"] == "cache":
                region = 1 << 20
                assert abs(reports[name]["installed_bytes"] - stage["size_bytes"]) <= 2 * region, (
                    name,
                    reports[name],
                    stage,
                )

        # The scrub ships no stage: the controller declared its job, and the agent runs it.
        def scrub_job() -> dict | None:
            jobs = api.get("/api/v1/apps/declared-io", params={"host": HOST}).json()
            return next((j for j in jobs if j["source"] == "scrub/archive" and j["bytes_declared"] is not None), None)

        job = wait_for("the agent to run the scrub's job", scrub_job, timeout=60)
        assert job["state"] in ("running", "done"), job
        assert job["bytes_declared"] == 1 << 20


def test_the_fairywren_example_caches_a_kv_tenant_in_fairywren(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kv-fairywren on an agent with the KV front end: the feed: keys' stage is a hybrid whose
    small-object engine is FairyWREN, its parts on the stage's own handles; small objects
    written through the front end land in FairyWREN, none in the log."""
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "500")
    kv_port = free_port()
    start_with_datapath(cluster, "256MiB", ["--kv-listen", f"127.0.0.1:{kv_port}"])
    with cluster.api() as api:
        example = ROOT / "policies" / "examples" / "kv-fairywren.yaml"
        applied = api.post(
            "/api/v1/policies", content=example.read_bytes(), headers={"content-type": "application/yaml"}
        )
        assert applied.status_code == 201, applied.text
        rollout = cluster.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
        assert rollout["state"] == "succeeded", rollout
        state = cluster.redis().get(f"lachesis:agent:{HOST}:desired")
        feeds = {s["name"]: s for s in json.loads(state)["stages"]}["kv/feeds"]
        assert feeds["engine"] == "hybrid-fairywren", feeds
        handles = {p["handle"] for p in feeds["placement"]}
        kv = Client(("127.0.0.1", kv_port), connect_timeout=5, timeout=30)
        try:
            # Five times the DRAM in front of the flash (1/32 of it): most objects reach flash.
            items = {f"feed:{i}": b"%08d" % i * 50 for i in range(5 * feeds["size_bytes"] // 32 // 400)}
            keys = list(items)
            for chunk in range(0, len(keys), 500):
                assert kv.set_many({k: items[k] for k in keys[chunk : chunk + 500]}) == []
            # A cache may have evicted any one of them, but what it returns is what was set.
            got = {}
            for chunk in range(0, len(keys), 500):
                got.update(kv.get_many(keys[chunk : chunk + 500]))
            assert got and all(v == items[k] for k, v in got.items())
        finally:
            kv.close()

        def fairywren_parts() -> dict[str, dict] | None:
            for s in api.get("/api/v1/stages").json():
                if s["name"] == "kv/feeds" and s["hosts"] and s["hosts"][0].get("parts"):
                    parts = {p["part"]: p for p in s["hosts"][0]["parts"]}
                    if parts.get("fairywren", {}).get("objects"):
                        return parts
            return None

        parts = wait_for("kv/feeds to report objects in its FairyWREN part", fairywren_parts, timeout=60)
        assert set(parts) == {"fairywren", "loc"}, parts
        # FwLog, hot and cold subsets each on a handle of the stage's own.
        assert len(set(parts["fairywren"]["handles"])) == 3, parts
        assert set(parts["fairywren"]["handles"]) <= handles, (parts, handles)
        assert parts["loc"]["objects"] == 0, parts
