"""The closed loop on real IO: real redis-server, controller and
agent, the agent's FUSE data path over a backing directory and a measuring flash device, one
tenant per shared trace in its own cgroup replaying through the mount, each through its own
flash cache stage.

- The allocation moves off the equal split, and the real stages' aggregate hit ratio under
  the loop beats the equal split's, same traces, same test.
- After each allocation, every stage's installed size equals its allocation (to one region).
- A tenant that stops has its space given to the others within two allocation decisions.
- Shrinking a write-back stage under writes loses no acknowledged write (checksums).
- The device reports measured DLWA and the broker's prediction.

Everything is ordered by counters and generations; the only clock is each phase's replay time
(how much IO happens, never an assertion) and hang guards.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HOST, ROOT, Cluster, require, start_with_datapath, wait_for
from lachesis_cli.client import Client
from lachesis_cli.demo import run as demo_run
from lachesis_cli.settings import Target

TRACES = sorted((ROOT.parent / "shared" / "traces").glob("*.csv")) + sorted((ROOT.parent / "shared" / "traces" / "arc").glob("*.lis.zst"))
PHASE_S = 40.0
CACHE = 24 << 20
# The cache stages' eviction and resize unit (agents/fs: a loc engine's region).
REGION = 1 << 20


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mnt, kind, *_ = line.split()
        if kind == "cgroup2":
            return Path(mnt)
    return None


@pytest.fixture
def loop_cluster(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The cluster with a data path, fast telemetry and a fast allocation loop."""
    require(cgroup2_mount() is not None, "a cgroup2 mount")
    require(len(TRACES) >= 2, "the shared traces in ../shared/traces")
    monkeypatch.setenv("LACHESIS_ALLOCATION_INTERVAL_S", "2")
    monkeypatch.setenv("LACHESIS_ALLOCATION_REACTION_S", "6")
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "1000")
    cluster.home = start_with_datapath(cluster, "256MiB")  # type: ignore[attr-defined]
    return cluster


def client(cluster: Cluster) -> Client:
    return Client(Target(cluster.url, "e2e-token"), timeout_s=30)


def test_the_loop_beats_an_equal_split_on_the_real_stages(loop_cluster: Cluster) -> None:
    with client(loop_cluster) as api:
        demo = demo_run.Demo(api, loop_cluster.home, PHASE_S, CACHE)  # type: ignore[attr-defined]
        demo.prepare(TRACES)
        equal = demo.phase("equal", equal=True)
        loop = demo.phase("loop", equal=False)
        report = f"equal split {equal}\nloop {loop}"
        n = len(demo.tenants)
        equal_sizes = [t["allocated_bytes"] for t in equal["tenants"]]
        loop_sizes = [t["allocated_bytes"] for t in loop["tenants"]]
        assert all(abs(s - CACHE // n) <= REGION for s in equal_sizes), report
        assert max(loop_sizes) - min(loop_sizes) > REGION, f"the loop did not move off the equal split\n{report}"
        for phase in (equal, loop):
            for t in phase["tenants"]:
                assert abs(t["installed_bytes"] - t["allocated_bytes"]) <= REGION, f"{t['name']}\n{report}"
                assert t["hits"] + t["misses"] > 0, report
        assert loop["hit_ratio"] > equal["hit_ratio"], report

        devices = demo.devices()
        assert devices and all(d["kind"] == "measured" for d in devices), devices
        for d in devices:
            assert d["host_bytes_written"] > 0 and d["dlwa"] is not None and d["dlwa"] >= 1.0, devices
            assert d["predicted_dlwa"] is not None, devices
        demo.clean_up()


def test_a_stopped_tenant_gives_its_space_within_two_decisions(loop_cluster: Cluster) -> None:
    with client(loop_cluster) as api:
        demo = demo_run.Demo(api, loop_cluster.home, PHASE_S, CACHE)  # type: ignore[attr-defined]
        demo.prepare(TRACES)
        loop = demo.phase("loop", equal=False)
        # The tenant with the most space stops; the others go on.
        stopped = max(loop["tenants"], key=lambda t: t["allocated_bytes"])
        held = stopped["allocated_bytes"]
        sent_before = len(stage_sizes(loop_cluster))
        others = [t for t in demo.tenants if t.name != stopped["name"]]
        demo.tenants, everyone = others, demo.tenants
        demo.seconds = 3 * PHASE_S / 2
        demo._replay()
        demo.tenants = everyone
        decisions = [sizes for sizes in stage_sizes(loop_cluster)[sent_before:]]
        changed = [d for i, d in enumerate(decisions) if i == 0 or d != decisions[i - 1]]
        stage = next(t.stage for t in everyone if t.name == stopped["name"])
        shrunk = [i for i, d in enumerate(changed) if d.get(stage, held) < held - REGION]
        assert shrunk, f"{stopped['name']} kept its space: {changed}"
        assert shrunk[0] < 2, f"reclaimed only at allocation decision {shrunk[0] + 1}: {changed}"
        given = changed[shrunk[0]]
        assert sum(given.values()) <= CACHE + REGION * len(given), given
        demo.clean_up()


def stage_sizes(cluster: Cluster) -> list[dict[str, int]]:
    """Cache stage name -> size of every desired state sent to the agent, in order."""
    out = []
    for _, fields in cluster.redis().xrange(f"lachesis:agent:{HOST}:inbox"):
        state = json.loads(fields["msg"])
        if state.get("phase") == "quiesce":
            continue
        out.append({s["name"]: s["size_bytes"] for s in state.get("stages", []) if s["kind"] == "cache"})
    return out


WRITER = r"""
import hashlib, os, sys
path, blocks, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
for i in range(blocks):
    block = hashlib.sha256(f"{start}-{i}".encode()).digest() * 128
    os.pwrite(fd, block, i * 4096)
    # One line per acknowledged write: the test learns how far the writer got.
    print(i, flush=True)
os.close(fd)
"""


def test_shrinking_a_write_back_stage_under_writes_loses_no_acknowledged_write(loop_cluster: Cluster) -> None:
    home: Path = loop_cluster.home  # type: ignore[attr-defined]
    with loop_cluster.api() as api:
        assert api.post("/api/v1/tenants", json={"name": "writer", "classifiers": [
            {"kind": "path_prefix", "value": "/wb/"}]}).status_code == 201
        stage = {"name": "cache/wb", "kind": "cache", "owner": "writer", "size_bytes": 32 << 20,
                 "engine": "loc", "write_mode": "back", "max_dirty_bytes": 16 << 20}
        assert api.post("/api/v1/stages", json=stage).status_code == 201, "stage"
        rule = {"name": "wb", "priority": 5, "match": {"tenant": "writer"},
                "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/wb"}}]}
        created = api.post("/api/v1/rules", json=rule)
        assert created.status_code == 201, created.text
        loop_cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)
        (home / "mnt" / "wb").mkdir()
        target = home / "mnt" / "wb" / "data.bin"
        blocks = 6000  # 23 MiB: more than the stage will shrink to
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(blocks), "1"],
                                  stdout=subprocess.PIPE, text=True)
        assert writer.stdout is not None
        acked = 0
        for line in writer.stdout:
            acked = int(line) + 1
            if acked == blocks // 3:
                # Shrink while the writer is a third of the way in and dirty data is held.
                r = api.patch("/api/v1/stages/cache/wb", json={"size_bytes": 2 << 20})
                assert r.status_code == 200, r.text
        assert writer.wait(timeout=300) == 0
        assert acked == blocks
        wait_for("the shrunk stage installed", lambda: installed(api, "cache/wb") is not None
                 and installed(api, "cache/wb") <= (2 << 20) + REGION, timeout=60)
        expect = [hashlib.sha256(f"1-{i}".encode()).digest() * 128 for i in range(blocks)]
        data = target.read_bytes()
        bad = [i for i in range(blocks) if data[i * 4096:(i + 1) * 4096] != expect[i]]
        assert not bad, f"{len(bad)} blocks differ through the mount, first {bad[:5]}"
        # The backing file has every acknowledged write once the stage wrote back (sync).
        with open(target, "rb+") as f:
            os.fsync(f.fileno())
        backing = (home / "data" / "wb" / "data.bin").read_bytes()
        bad = [i for i in range(blocks) if backing[i * 4096:(i + 1) * 4096] != expect[i]]
        assert not bad, f"{len(bad)} blocks differ in the backing file, first {bad[:5]}"


def installed(api, name: str) -> int | None:  # type: ignore[no-untyped-def]
    r = api.get(f"/api/v1/stages/{name}")
    hosts = [h for h in r.json()["hosts"] if h.get("installed_bytes") is not None] if r.status_code == 200 else []
    return hosts[0]["installed_bytes"] if hosts else None
