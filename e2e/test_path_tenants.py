"""A tenant classified by `path_prefix` is enforced by the agent's FUSE switch: after a real
rollout of a policy (a path tenant, its cache stage, a rule sending its reads there), reading
a file under the tenant's prefix through the mount goes through the tenant's stage (misses on
the first pass, hits on the second), and a file under a sibling directory whose name merely
starts with the prefix's last component (`/srv/webx` beside `/srv/web`) is not the tenant's.

Before the FUSE switch could classify by path, the agent logged "the FUSE switch cannot
classify by these; ignored" and the stage counted nothing. Counts, not clocks: the stage's
counters are read from the first telemetry report the agent began after the reads returned
(two reports later than the last one before that moment).

Needs root and /dev/fuse.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import HOST, Cluster, start_with_datapath, wait_for

BLOCK = 4096
FILE_BYTES = 8 << 20
BLOCKS = FILE_BYTES // BLOCK
CHUNK = 1 << 20
STAGE = "cache/web"

POLICY = f"""
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {{name: path-tenant}}
spec:
  tenants:
    - name: web
      classifiers: [{{kind: path_prefix, value: /srv/web/}}]
  stages:
    # DRAM, four times the file: the second pass hits on every block.
    - {{name: {STAGE}, kind: cache, owner: web, engine: dram, size_bytes: {4 * FILE_BYTES}}}
  rules:
    - name: web-reads-cached
      priority: 10
      match: {{tenant: web, ops: [read]}}
      detours: [{{what: io, to: {{kind: stage, target: {STAGE}}}}}]
"""


@pytest.fixture
def home(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "200")
    return start_with_datapath(cluster, "64MiB")


def read_through(path: Path) -> None:
    """Reads the whole file in 1 MiB preads that never reach past its end (so every request
    the kernel sends the switch covers whole blocks of the file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, FILE_BYTES, CHUNK):
            assert len(os.pread(fd, CHUNK, off)) == CHUNK
    finally:
        os.close(fd)


def settled_stage(cluster: Cluster) -> dict:
    """STAGE's counters in a telemetry report the agent began after the caller's IO returned:
    the report after the next one (the next may have been under way during the IO)."""
    seen = len(cluster.agent_messages("telemetry", HOST))
    report = wait_for(
        "two more telemetry reports",
        lambda: (m := cluster.agent_messages("telemetry", HOST)) and len(m) >= seen + 2 and m[-1],
        timeout=60,
    )
    stages = {s["name"]: s for s in report.get("stages") or []}
    assert STAGE in stages, f"the agent reports no {STAGE}: {sorted(stages)}"
    return stages[STAGE]


def test_a_path_tenants_reads_through_the_mount_reach_its_cache_stage(cluster: Cluster, home: Path) -> None:
    data = home / "data"
    (data / "srv" / "web").mkdir(parents=True)
    (data / "srv" / "webx").mkdir(parents=True)
    (data / "srv" / "web" / "big.bin").write_bytes(os.urandom(FILE_BYTES))
    (data / "srv" / "webx" / "other.bin").write_bytes(os.urandom(FILE_BYTES))

    with cluster.api() as api:
        applied = api.post("/api/v1/policies", content=POLICY.encode(), headers={"content-type": "application/yaml"})
        assert applied.status_code == 201, applied.text
        rollout = cluster.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
        assert rollout["state"] == "succeeded", rollout
        assert [t["status"] for t in rollout["targets"]] == ["applied"], rollout

    before = settled_stage(cluster)
    assert (before["hits"], before["misses"]) == (0, 0), before

    mnt = home / "mnt"
    # Not the tenant's: /srv/webx is a sibling of /srv/web, not under it.
    read_through(mnt / "srv" / "webx" / "other.bin")
    read_through(mnt / "srv" / "webx" / "other.bin")
    outside = settled_stage(cluster)
    assert (outside["hits"], outside["misses"]) == (0, 0), outside

    # The tenant's file, cold: every block misses once, at its first read, and every byte is
    # read through the stage. (The kernel may split a read inside a block: the rest of that
    # block is then a hit, so the hit count depends on how it splits, the bytes do not.)
    read_through(mnt / "srv" / "web" / "big.bin")
    cold = settled_stage(cluster)
    assert cold["misses"] == BLOCKS, cold
    assert cold["bytes_read_miss"] + cold["bytes_read_hit"] == FILE_BYTES, cold
    # Warm: every byte is a hit, nothing misses.
    read_through(mnt / "srv" / "web" / "big.bin")
    warm = settled_stage(cluster)
    assert warm["misses"] == BLOCKS, warm
    assert warm["bytes_read_hit"] - cold["bytes_read_hit"] == FILE_BYTES, (cold, warm)
    assert warm["hits"] - cold["hits"] >= BLOCKS, (cold, warm)
    assert warm["owner"] == "web", warm
