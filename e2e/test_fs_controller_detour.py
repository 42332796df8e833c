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

What happened before what is read from the order of the agent's log lines (one process, one
log), never from clocks: the install of the read-set switch precedes the verdict, and the
verdict is logged before the held IO is released.

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
from pathlib import Path

import pytest
from conftest import AGENT_BIN, Cluster, require, wait_for

HOST = "node-1"
BIN = Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN))
# Both long enough that no step of the test takes that long (each only ends a wait the test
# ends anyway: the quiet time before the read set comes back, the deadline of the write
# made without a controller); shorter, a slow machine would see the read set come back
# mid-test, or a first write time out while the controller switches the read set.
QUIET_S = 30.0
DEADLINE_MS = 30000
BLOCK = 4096


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


def file_detour(d: Path) -> dict:
    return {"what": "io", "to": {"kind": "file", "target": str(d)}}


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
        [
            str(BIN),
            "run",
            "--host-id",
            HOST,
            "--redis-url",
            cluster.enroll(HOST),
            "--no-ebpf",
            "--mount",
            f"{paths['backing']}:{paths['mnt']}",
            "--detour-deadline-ms",
            str(DEADLINE_MS),
            "--endpoint-root",
            str(cluster.tmp),
            "--heartbeat-interval-ms",
            "500",
            "--heartbeat-ttl-s",
            "3",
        ],
        {"RUST_LOG": "info"},
    ).start()
    try:
        wait_for(
            "the agent to register and ack",
            lambda: (x := cluster.host(HOST)) and x["acked_generation"] >= 1,
            timeout=30,
        )
        wait_for("the FUSE mount", lambda: mounted(paths["mnt"]), timeout=30)
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
    reads = {
        "name": "data-reads",
        "priority": 20,
        "match": {"ops": ["read"], "path_prefix": "/data"},
        "detours": [file_detour(r1), file_detour(r2)],
    }
    ask = {
        "name": "data-writes",
        "priority": 10,
        "match": {"ops": ["write"], "path_prefix": "/data"},
        "detours": [
            {"what": "header", "to": {"kind": "controller", "target": "readset"}},
            file_detour(r1),
            file_detour(r2),
        ],
    }
    with cluster.api() as api:
        for body in (reads, ask):
            created = api.post("/api/v1/rules", json=body)
            assert created.status_code == 201, created.text
            assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=30)["state"] == "succeeded"
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
        t0 = time.monotonic()
        os.pwrite(fd, b"W" * BLOCK, 2 * BLOCK)
        first_latency = time.monotonic() - t0  # reported below, never asserted
        assert read_set(cluster) == [str(r1)]
        # The agent logs a verdict before it releases the IO, so the returned write's verdict
        # is in the log now; the read-set switch's install came before it.
        agent_log = cluster.processes[f"agent-{HOST}"].text().splitlines()
        installs = [i for i, line in enumerate(agent_log) if re.search(r"\sinstall\s", line) and "rollout_id=" in line]
        verdicts = [i for i, line in enumerate(agent_log) if "detour verdict" in line]
        assert len(verdicts) == 1, [agent_log[i] for i in verdicts]
        assert "verdict=Proceed" in agent_log[verdicts[0]], agent_log[verdicts[0]]
        assert installs and installs[-1] < verdicts[0], [agent_log[i] for i in installs[-1:] + verdicts]
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
        assert (r2 / "data" / "f").read_bytes()[2 * BLOCK : 3 * BLOCK] == b"W" * BLOCK

        # Write-free for the quiet time: the read set is every replica again.
        wait_for("the read set to come back", lambda: read_set(cluster) == [str(r1), str(r2)], timeout=QUIET_S + 30)
        wait_for("reads to spread again", lambda: read_sources(fd) == {b"AAAA", b"BBBB"}, timeout=30)

        # Without the controller a write stays held, then fails with ETIMEDOUT; nothing changed.
        cluster.processes["controller"].stop()
        before = [(r / "data" / "f").read_bytes() for r in (r1, r2)]
        size = (node["backing"] / "data" / "f").stat().st_size
        with cluster.redis() as r:
            requests_before = r.xlen(f"lachesis:agent:{HOST}:detours")
        with pytest.raises(OSError) as failed:
            os.pwrite(fd, b"X" * BLOCK, 6 * BLOCK)
        assert failed.value.errno == errno.ETIMEDOUT, failed.value
        assert [(r / "data" / "f").read_bytes() for r in (r1, r2)] == before
        assert (node["backing"] / "data" / "f").stat().st_size == size
        # It was held: its header went out to the controller, and the agent gave up on the
        # verdict at the deadline it was configured with.
        wait_for(
            "the held write's header on the bus",
            lambda: cluster.redis().xlen(f"lachesis:agent:{HOST}:detours") > requests_before,
        )
        timeouts = [
            line
            for line in cluster.processes[f"agent-{HOST}"].text().splitlines()
            if "no verdict from the controller" in line
        ]
        assert len(timeouts) == 1 and f"deadline_ms={DEADLINE_MS}" in timeouts[0], timeouts
    finally:
        os.close(fd)
    print(f"first write held {first_latency * 1000:.0f} ms until the read set was primary-only")
