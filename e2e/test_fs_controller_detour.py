"""The controller detour of the FUSE sSwitch end to end (sRoute's replica read-set experiment,
thesis Fig. 6.8): a real redis-server, the controller and one agent mounting the switch over
a backing directory, with two replica directories.

Rules: reads of /data spread over both replicas (read set: all); writes of /data go to both
replicas but first send their header to the controller application `readset`. While the
flow is read-only, reads hit both replicas; the first write blocks until the controller has
switched the read set to the primary (a two-phase rollout the agent installs) and only then
completes; later writes go without asking; after the quiet time the read set is all replicas
again; with the controller stopped, a write stays blocked and fails with ETIMEDOUT after the
agent's deadline, leaving the replicas as they were.

Needs root and /dev/fuse (under CI=true a missing one fails). The agent binary is
LACHESIS_AGENT_BIN, default agents/target/release/lachesis-agent.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from conftest import AGENT_BIN, Cluster, require, wait_for

HOST = "node-1"
BIN = Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN))
QUIET_S = 3.0
DEADLINE_MS = 3000
BLOCK = 4096


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


def file_detour(d: Path) -> dict:
    return {"what": "io", "to": {"kind": "file", "target": str(d)}}


def log_time(line: str) -> float:
    return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()


@pytest.fixture
def node(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    require(os.path.exists("/dev/fuse"), "/dev/fuse (modprobe fuse)")
    require(os.geteuid() == 0, "root (the agent mounts a FUSE namespace)")
    require(BIN.exists(), f"{BIN} (cd agents && cargo build --release -p lachesis-agent)")
    monkeypatch.setenv("LACHESIS_READSET_QUIET_S", str(QUIET_S))
    paths = {name: cluster.tmp / name for name in ("backing", "mnt", "r1", "r2")}
    for p in paths.values():
        p.mkdir()
    (paths["backing"] / "data").mkdir()
    cluster.start_redis()
    cluster.start_controller()
    cluster._add(
        f"agent-{HOST}",
        [str(BIN), "run", "--host-id", HOST, "--redis-url", cluster.redis_url, "--no-ebpf",
         "--mount", f"{paths['backing']}:{paths['mnt']}", "--detour-deadline-ms", str(DEADLINE_MS),
         "--heartbeat-interval-ms", "500", "--heartbeat-ttl-s", "3"],
        {"RUST_LOG": "info"},
    ).start()
    try:
        wait_for("the agent to register and ack", lambda: (x := cluster.host(HOST)) and x["acked_generation"] >= 1, timeout=30)
        wait_for("the FUSE mount", lambda: mounted(paths["mnt"]), timeout=10)
        yield paths
    finally:
        cluster.stop_all()
        if mounted(paths["mnt"]):
            subprocess.run(["umount", "-l", str(paths["mnt"])], check=False)


def read_sources(fd: int, n: int = 16) -> set[bytes]:
    """Which replica served each read of the first block (the replicas hold different bytes)."""
    return {os.pread(fd, 4, 0) for _ in range(n)}


def read_set(cluster: Cluster) -> list[str]:
    with cluster.api() as api:
        return [d["to"]["target"] for d in api.get("/api/v1/rules/data-reads").json()["detours"]]


def test_a_write_waits_for_the_read_set_switch_then_flows_and_the_read_set_comes_back(cluster: Cluster, node) -> None:
    r1, r2 = node["r1"], node["r2"]
    reads = {"name": "data-reads", "priority": 20, "match": {"ops": ["read"], "path_prefix": "/data"},
             "detours": [file_detour(r1), file_detour(r2)]}
    ask = {"name": "data-writes", "priority": 10, "match": {"ops": ["write"], "path_prefix": "/data"},
           "detours": [{"what": "header", "to": {"kind": "controller", "target": "readset"}},
                       file_detour(r1), file_detour(r2)]}
    with cluster.api() as api:
        for body in (reads, ask):
            created = api.post("/api/v1/rules", json=body)
            assert created.status_code == 201, created.text
            assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=15)["state"] == "succeeded"
    # The replicas hold different bytes in the first block, so a read tells who served it.
    for r, tag in ((r1, b"AAAA"), (r2, b"BBBB")):
        (r / "data").mkdir()
        (r / "data" / "f").write_bytes(tag * (BLOCK // 4))
    # The backing file carries the namespace's size; the bytes live on the replicas.
    with open(node["backing"] / "data" / "f", "wb") as f:
        f.truncate(4 * BLOCK)
    fd = os.open(node["mnt"] / "data" / "f", os.O_RDWR)
    try:
        # Read-only: the read set is every replica.
        assert read_sources(fd) == {b"AAAA", b"BBBB"}

        # The first write waits for the controller to switch the read set to the primary.
        t0 = time.time()
        os.pwrite(fd, b"W" * BLOCK, 2 * BLOCK)
        t1 = time.time()
        first_latency = t1 - t0
        assert read_set(cluster) == [str(r1)]
        agent_log = cluster.processes[f"agent-{HOST}"].text().splitlines()
        installs = [line for line in agent_log if re.search(r"\sinstall\s", line) and "rollout_id=" in line]
        verdicts = [line for line in agent_log if "detour verdict" in line]
        assert verdicts, "the agent logged no verdict"
        assert installs and log_time(installs[-1]) <= log_time(verdicts[0]) <= t1 + 0.01, (installs[-1:], verdicts[:1])
        # Reads now come from the primary only.
        assert read_sources(fd) == {b"AAAA"}

        # Further writes go without a round trip each (at most one more header: the first
        # verdict was asked under the table the switch replaced).
        for i in range(20):
            os.pwrite(fd, bytes([i]) * 512, 3 * BLOCK + i * 8)
        with cluster.api() as api:
            headers = api.get("/api/v1/detours").json()
        assert 1 <= len(headers) <= 2, headers
        assert all(h["verdict"] == "proceed" and h["rule"] == "data-writes" for h in headers)
        assert (r2 / "data" / "f").read_bytes()[2 * BLOCK:3 * BLOCK] == b"W" * BLOCK

        # Write-free for the quiet time: the read set is every replica again.
        wait_for("the read set to come back", lambda: read_set(cluster) == [str(r1), str(r2)], timeout=QUIET_S + 20)
        wait_for("reads to spread again", lambda: read_sources(fd) == {b"AAAA", b"BBBB"}, timeout=10)

        # Without the controller a write stays held, then fails with ETIMEDOUT; nothing changed.
        cluster.processes["controller"].stop()
        before = [(r / "data" / "f").read_bytes() for r in (r1, r2)]
        size = (node["backing"] / "data" / "f").stat().st_size
        t0 = time.time()
        with pytest.raises(OSError) as failed:
            os.pwrite(fd, b"X" * BLOCK, 6 * BLOCK)
        held = time.time() - t0
        assert failed.value.errno == errno.ETIMEDOUT, failed.value
        assert DEADLINE_MS / 1000 - 0.1 <= held <= DEADLINE_MS / 1000 + 5, held
        assert [(r / "data" / "f").read_bytes() for r in (r1, r2)] == before
        assert (node["backing"] / "data" / "f").stat().st_size == size
        assert any("no verdict from the controller" in line for line in cluster.processes[f"agent-{HOST}"].text().splitlines())
    finally:
        os.close(fd)
    print(f"first write held {first_latency * 1000:.0f} ms until the read set was primary-only")
