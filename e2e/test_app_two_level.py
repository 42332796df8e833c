"""Two-level caches end to end (Moirai §5.3.5): an agent with a FUSE mount forwards a tenant's
reads to a remote endpoint (tcp://) served by a second agent (--serve-listen/--serve-root). A
replay of the shared CloudPhysics trace runs twice under one level (a cache on the host), then
twice under two levels (the same host cache, plus the server level the storage agent runs in
front of its store). Measured on each second, warm pass, from the agents' stage counters: both
levels count hits, and the bytes read from the server's store are fewer with two levels.

Counts, never durations: a pass is waited for by the level-1 stage's read count reaching the
pass's references (a counted poll of the telemetry the controller serves).
"""

from __future__ import annotations

import mmap
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from conftest import AGENT_BIN, ROOT, Cluster, free_port, mounted, require, wait_for

BLOCK = 4096
BLOCKS = 1024  # the file: 4 MiB
REFS = 6000  # references of one pass
L1_BYTES = 1 << 20  # 256 blocks
L2_BYTES = 8 << 20
BIN = Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN))
TRACE = ROOT / ".." / "shared" / "traces" / "cloudPhysicsIO.csv"


def trace_blocks() -> np.ndarray:
    """The first REFS reads of the CloudPhysics trace as blocks of the file (lbn in 512 B
    sectors -> 4 KiB blocks, folded onto the file's BLOCKS)."""
    rows = np.genfromtxt(TRACE, delimiter=",", names=True, dtype=None, encoding="ascii", max_rows=40_000)
    reads = rows[np.isin(np.char.lower(rows["op"].astype(str)), ["28", "88"])]
    return (reads["lbn"].astype(np.int64) * 512 // BLOCK % BLOCKS)[:REFS]


def policy(port: int, levels: int) -> str:
    l1_parent = "      parent: cache/media-l2\n" if levels == 2 else ""
    l2 = (f"    - {{name: cache/media-l2, kind: cache, owner: media, level: 2, engine: dram, size_bytes: {L2_BYTES},"
          f" serves: [store], hosts: [storage-1]}}\n") if levels == 2 else ""
    return f"""apiVersion: lachesis.dev/v1
kind: Policy
metadata: {{name: media-cache}}
spec:
  tenants:
    - name: media
      classifiers: [{{kind: uid, value: "0"}}]
  stages:
    - name: cache/media-l1
      kind: cache
      owner: media
      engine: dram
      size_bytes: {L1_BYTES}
      hosts: [node-1]
{l1_parent}{l2}  rules:
    - name: media-remote
      priority: 10
      match: {{tenant: media, path_prefix: /media, ops: [read]}}
      detours:
        - {{what: io, to: {{kind: stage, target: cache/media-l1}}}}
        - {{what: io, to: {{kind: file, target: "tcp://127.0.0.1:{port}/store"}}}}
"""


@pytest.fixture
def world(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    require(os.path.exists("/dev/fuse"), "/dev/fuse (modprobe fuse)")
    require(os.geteuid() == 0, "root (the agent mounts a FUSE namespace)")
    require(BIN.exists(), f"{BIN} (cd agents && cargo build --release -p lachesis-agent)")
    require(TRACE.exists(), f"{TRACE} (the shared traces)")
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    backing, mnt, serve_root = cluster.tmp / "backing", cluster.tmp / "mnt", cluster.tmp / "serve"
    for d in (backing, mnt, serve_root / "store"):
        d.mkdir(parents=True)
    port = free_port()
    cluster.start_redis()
    cluster.start_controller()
    agents = {
        "node-1": ["--mount", f"{backing}:{mnt}", "--endpoint-root", str(cluster.tmp)],
        "storage-1": ["--serve-listen", f"127.0.0.1:{port}", "--serve-root", str(serve_root)],
    }
    for host, extra in agents.items():
        cluster._add(
            f"agent-{host}",
            [str(BIN), "run", "--host-id", host, "--redis-url", cluster.enroll(host), "--no-ebpf", *extra,
             "--heartbeat-interval-ms", "500", "--heartbeat-ttl-s", "30"],
            {"RUST_LOG": "info"},
        ).start()
    try:
        for host in agents:
            wait_for(f"{host} to register and ack", lambda h=host: (x := cluster.host(h)) and x["acked_generation"] >= 1,
                     timeout=30)
        wait_for("node-1's FUSE mount", lambda: mounted(mnt), timeout=30)
        yield {"mnt": mnt, "port": port, "serve_root": serve_root}
    finally:
        cluster.stop_all()
        if mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def apply(cluster: Cluster, text: str) -> None:
    with cluster.api() as api:
        r = api.post("/api/v1/policies", content=text, headers={"content-type": "application/yaml"})
        assert r.status_code == 201, r.text
    rollout = cluster.wait_rollout_done(r.json()["rollout_id"], timeout=60)
    assert rollout["state"] == "succeeded", rollout


def stats(cluster: Cluster, stage: str, host: str) -> dict:
    with cluster.api() as api:
        r = api.get(f"/api/v1/stages/{stage}/stats")
    rows = r.json() if r.status_code == 200 else []
    return next((r for r in rows if r["host_id"] == host and r["reported_at"] is not None), {})


def replay(path: Path, blocks: np.ndarray) -> None:
    """The blocks as O_DIRECT 4 KiB reads (the page cache would hide repeats from the switch)."""
    buf = mmap.mmap(-1, BLOCK)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        for b in blocks.tolist():
            assert os.preadv(fd, [buf], b * BLOCK) == BLOCK
            assert buf[:8] == int(b).to_bytes(8, "little"), f"block {b} read back wrong"
    finally:
        os.close(fd)


def measured_pass(cluster: Cluster, path: Path, blocks: np.ndarray, stages: dict[str, str]) -> dict[str, dict]:
    """Replays `blocks` and returns each stage's counter deltas over the pass (its host's
    reports), once level 1 has counted every reference of it."""
    before = {s: stats(cluster, s, h) for s, h in stages.items()}
    replay(path, blocks)

    def after() -> dict[str, dict] | None:
        now = {s: stats(cluster, s, h) for s, h in stages.items()}
        l1, l1_before = now["cache/media-l1"], before["cache/media-l1"]
        seen = (l1.get("hits") or 0) + (l1.get("misses") or 0) - (l1_before.get("hits") or 0) - (l1_before.get("misses") or 0)
        return now if seen >= len(blocks) else None

    now = wait_for("level 1 to report the pass's reads", after, timeout=60)
    return {s: {k: (now[s].get(k) or 0) - (before[s].get(k) or 0) for k in ("hits", "misses", "bytes_read_miss")}
            for s in stages}


def test_two_levels_count_hits_at_both_and_read_less_from_the_servers_store(cluster: Cluster, world: dict) -> None:
    blocks = trace_blocks()
    assert len(blocks) == REFS and len(np.unique(blocks)) > L1_BYTES // BLOCK  # level 1 alone cannot hold it
    apply(cluster, policy(world["port"], levels=1))
    # The data lives on the server only; the host's namespace has the file, of its size, empty.
    stored = world["serve_root"] / "store" / "media" / "f"
    stored.parent.mkdir()
    stored.write_bytes(b"".join(b.to_bytes(8, "little").ljust(BLOCK, b".") for b in range(BLOCKS)))
    f = world["mnt"] / "media" / "f"
    f.parent.mkdir()
    with f.open("wb") as out:
        out.truncate(BLOCKS * BLOCK)

    one = {"cache/media-l1": "node-1"}
    measured_pass(cluster, f, blocks, one)  # warm
    single = measured_pass(cluster, f, blocks, one)

    apply(cluster, policy(world["port"], levels=2))
    with cluster.api() as api:
        (t,) = api.get("/api/v1/apps/two-level").json()["tenants"] or [None]  # no two_level: not listed
    assert t is None
    two = {"cache/media-l1": "node-1", "cache/media-l2": "storage-1"}
    measured_pass(cluster, f, blocks, two)  # warm
    double = measured_pass(cluster, f, blocks, two)

    # Both levels count hits; the server level sees level 1's misses.
    assert double["cache/media-l1"]["hits"] > 0 and double["cache/media-l2"]["hits"] > 0
    assert double["cache/media-l2"]["hits"] + double["cache/media-l2"]["misses"] >= double["cache/media-l1"]["misses"]
    # What reaches the server's store: level 1's misses with one level, the server level's with two.
    from_store_one = single["cache/media-l1"]["bytes_read_miss"]
    from_store_two = double["cache/media-l2"]["bytes_read_miss"]
    assert from_store_one > 0
    assert from_store_two < from_store_one, (single, double)
    # The server level's size is what the controller shipped to the storage host.
    l2 = stats(cluster, "cache/media-l2", "storage-1")
    assert (l2["allocated_bytes"], l2["installed_bytes"]) == (L2_BYTES, L2_BYTES)
