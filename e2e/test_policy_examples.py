"""Every policy in policies/examples installs on a real agent with a data path (a FUSE mount
and a measuring flash device) and is in force there: the rollout is applied, and every
stage the controller ships for it is reported installed by the agent."""

from __future__ import annotations

import json

import pytest

from conftest import HOST, ROOT, Cluster, start_with_datapath, wait_for

EXAMPLES = sorted((ROOT / "policies" / "examples").glob("*.yaml"))


@pytest.fixture
def datapath(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "500")
    # The examples' replicas live under /mnt (replica-sets, tail-latency-routing): the
    # operator lets this agent write there.
    start_with_datapath(cluster, "256MiB", ["--endpoint-root", "/mnt"])
    return cluster


def test_every_example_policy_installs_on_a_host_with_a_data_path(datapath: Cluster) -> None:
    assert len(EXAMPLES) == 11
    # What declared-scrub's scrub reads: /archive in the mount's namespace.
    archive = datapath.tmp / "home" / "data" / "archive"
    archive.mkdir()
    (archive / "part-0").write_bytes(b"\x5a" * (1 << 20))
    with datapath.api() as api:
        for example in EXAMPLES:
            applied = api.post("/api/v1/policies", content=example.read_bytes(),
                               headers={"content-type": "application/yaml"})
            assert applied.status_code == 201, f"{example.name}: {applied.text}"
            rollout = datapath.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
            assert rollout["state"] == "succeeded", f"{example.name}: {rollout}"
            assert [t["status"] for t in rollout["targets"]] == ["applied"], f"{example.name}: {rollout}"
        # What the agent runs now: the shipped stages of all nine policies.
        state = datapath.redis().get(f"lachesis:agent:{HOST}:desired")
        shipped = {s["name"]: s for s in json.loads(state).get("stages", [])}
        assert {"cache/alpha", "cache/beta", "cache/global", "cache/imagenet", "cache/media-l1",
                "cache/media-l2", "qos/gold"} <= set(shipped), sorted(shipped)
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
                assert abs(reports[name]["installed_bytes"] - stage["size_bytes"]) <= 2 * region, (name, reports[name], stage)

        # The scrub ships no stage: the controller declared its job, and the agent runs it.
        def scrub_job() -> dict | None:
            jobs = api.get("/api/v1/apps/declared-io", params={"host": HOST}).json()
            return next((j for j in jobs if j["source"] == "scrub/archive" and j["bytes_declared"] is not None), None)

        job = wait_for("the agent to run the scrub's job", scrub_job, timeout=60)
        assert job["state"] in ("running", "done"), job
        assert job["bytes_declared"] == 1 << 20
