"""Consistent rollouts on the real data path: three agents each mount the FUSE sSwitch
(`lachesis-agent run --mount BACKING:MOUNTPOINT`); a rule change moves the flow of `/data`
from endpoint A to endpoint B while a writer (sequence-numbered records) and a reader run on
node-1's mount. Every agent logs quiesce, drain, install, resume in that order, and the reader
never reads a record older than the last one the writer had been acknowledged for.

That no IO of the flow got through between node-1's drain and its resume is shown by
counters, not clocks: the agent logs the flow's admitted-IO count at both steps (equal: none
admitted in between) and how many IOs the resume released. To be sure the writer was held,
node-3's agent is stopped (SIGSTOP) before the move, so the rollout waits for it after
node-1 drained, until node-1's gate logs that it holds IO of the flow.

Needs root and /dev/fuse (under CI=true a missing one fails). The agent binary is
LACHESIS_AGENT_BIN, default agents/target/release/lachesis-agent.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import AGENT_BIN, Cluster, require, wait_for

HOSTS = ["node-1", "node-2", "node-3"]
STEPS = ["quiesce", "drain", "install", "resume"]
RECORD = 64
SLOTS = 16
BIN = Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN))


def rule(endpoint: Path) -> dict:
    return {
        "name": "data-flow",
        "priority": 10,
        "match": {"path_prefix": "/data"},
        "detours": [{"what": "io", "to": {"kind": "file", "target": str(endpoint)}}],
    }


def record(seq: int) -> bytes:
    return f"seq={seq:020d};".encode().ljust(RECORD, b".")


def steps(cluster: Cluster, host: str, rollout_id: str) -> list[str]:
    found = []
    for line in cluster.processes[f"agent-{host}"].text().splitlines():
        m = re.search(r"\s(quiesce|drain|install|resume)\s.*rollout_id=(\S+)", line)
        if m and m.group(2) == rollout_id:
            found.append(m.group(1))
    return found


def step_line(lines: list[str], step: str, rollout_id: str) -> int | None:
    """The index of the agent's log line of `step` of the rollout."""
    return next(
        (i for i, line in enumerate(lines) if re.search(rf"\s{step}\s.*rollout_id={rollout_id}(\s|$)", line)), None
    )


def held_after_drain(cluster: Cluster, host: str, rollout_id: str) -> bool:
    """Whether the agent drained the rollout's flows and, after its quiesce, held IO of them."""
    lines = cluster.processes[f"agent-{host}"].text().splitlines()
    quiesce, drain = step_line(lines, "quiesce", rollout_id), step_line(lines, "drain", rollout_id)
    return (
        quiesce is not None
        and drain is not None
        and any("IO held at the quiesced flow" in line for line in lines[quiesce:])
    )


def counter(line: str, name: str) -> int:
    m = re.search(rf"\s{name}=(\d+)", line)
    assert m, f"no {name}= in {line!r}"
    return int(m.group(1))


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


@pytest.fixture
def mounts(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    require(os.path.exists("/dev/fuse"), "/dev/fuse (modprobe fuse)")
    require(os.geteuid() == 0, "root (the agents mount FUSE namespaces)")
    require(BIN.exists(), f"{BIN} (cd agents && cargo build --release -p lachesis-agent)")
    points = {}
    for host in HOSTS:
        (cluster.tmp / host / "backing" / "data").mkdir(parents=True)
        (cluster.tmp / host / "mnt").mkdir()
        points[host] = cluster.tmp / host / "mnt"
    # The test holds a rollout open by stopping an agent: neither the rollout's deadline nor
    # the stopped agent's heartbeat may run out while it waits (only a hang would take that long).
    monkeypatch.setenv("LACHESIS_ROLLOUT_TIMEOUT_S", "300")
    cluster.start_redis()
    cluster.start_controller()
    for host in HOSTS:
        cluster._add(
            f"agent-{host}",
            [
                str(BIN),
                "run",
                "--host-id",
                host,
                "--redis-url",
                cluster.enroll(host),
                "--no-ebpf",
                "--mount",
                f"{cluster.tmp / host / 'backing'}:{points[host]}",
                "--endpoint-root",
                str(cluster.tmp),
                "--heartbeat-interval-ms",
                "500",
                "--heartbeat-ttl-s",
                "300",
            ],
            {"RUST_LOG": "info"},
        ).start()
    try:
        for host in HOSTS:
            wait_for(
                f"{host} to register and ack",
                lambda h=host: (x := cluster.host(h)) and x["acked_generation"] >= 1,
                timeout=30,
            )
            wait_for(f"{host}'s FUSE mount", lambda h=host: mounted(points[h]), timeout=30)
        yield points
    finally:
        cluster.stop_all()
        for p in points.values():
            if mounted(p):
                subprocess.run(["umount", "-l", str(p)], check=False)


def test_moving_a_flow_under_io_keeps_reads_fresh_and_runs_the_phases_in_order(cluster: Cluster, mounts) -> None:
    ep_a, ep_b = cluster.tmp / "endpoint-a", cluster.tmp / "endpoint-b"
    ep_a.mkdir()
    ep_b.mkdir()
    with cluster.api() as api:
        created = api.post("/api/v1/rules", json=rule(ep_a))
        assert created.status_code == 201, created.text
    assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=30)["state"] == "succeeded"

    target = mounts["node-1"] / "data" / "log"
    # Opened after the rule exists, so its IO goes through the switch (no passthrough).
    wfd = os.open(target, os.O_RDWR | os.O_CREAT, 0o644)
    rfd = os.open(target, os.O_RDONLY)
    acked = -1
    errors: list[str] = []
    stop = threading.Event()
    reads = 0

    def writer() -> None:
        nonlocal acked
        seq = 0
        while not stop.is_set():
            os.pwrite(wfd, record(seq), (seq % SLOTS) * RECORD)
            acked = seq  # the write returned: acknowledged
            seq += 1

    def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            last = acked
            if last < 0:
                continue
            got = os.pread(rfd, RECORD, (last % SLOTS) * RECORD)
            m = re.match(rb"seq=(\d{20});", got)
            if not m or int(m.group(1)) < last:
                errors.append(f"read {got[:30]!r} at slot {last % SLOTS} after write {last} was acked")
                return
            reads += 1

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    node_3 = cluster.processes["agent-node-3"].popen
    assert node_3 is not None
    try:
        wait_for("the writer to start", lambda: acked > 100, timeout=30)
        before_move = acked
        # With node-3 stopped the rollout cannot get past the quiesce phase: node-1 stays
        # drained and quiesced until node-3 goes on, so the writer surely runs into the gate.
        os.kill(node_3.pid, signal.SIGSTOP)
        try:
            with cluster.api() as api:
                moved = api.put("/api/v1/rules/data-flow", json=rule(ep_b))
                assert moved.status_code == 200, moved.text
            rollout_id = moved.json()["rollout_id"]
            wait_for(
                "node-1 to drain the flow and hold the writer",
                lambda: held_after_drain(cluster, "node-1", rollout_id),
                timeout=60,
            )
        finally:
            os.kill(node_3.pid, signal.SIGCONT)
        done = cluster.wait_rollout_done(rollout_id, timeout=60)
        after_move = acked
        wait_for("writes after the move", lambda: acked > after_move + 10, timeout=30)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        os.close(wfd)
        os.close(rfd)
    assert not errors, errors
    assert done["state"] == "succeeded", done
    assert all(t["status"] == "applied" and t["drained_at"] for t in done["targets"]), done
    for host in HOSTS:
        assert wait_for(f"{host}'s log", lambda h=host: steps(cluster, h, rollout_id) == STEPS, timeout=30)
    # The flow was held at node-1's mount: as many IOs of it admitted at the resume as at the
    # drain (none got through in between, and none was in flight at the drain), and the
    # resume released the IO waiting at the gate, the writer's among it.
    lines = cluster.processes["agent-node-1"].text().splitlines()
    drain, resume = (lines[step_line(lines, s, rollout_id)] for s in ("drain", "resume"))
    assert counter(drain, "admitted") > 100, drain  # the writer's IO before the move
    assert counter(resume, "admitted") == counter(drain, "admitted"), (drain, resume)
    assert counter(resume, "released") >= 1, resume
    # IO ran before and after the move, and the moved flow's bytes landed at each endpoint.
    assert before_move > 100 and acked > after_move >= before_move, (before_move, after_move, acked)
    assert reads > 100
    assert (ep_a / "data" / "log").stat().st_size > 0
    assert (ep_b / "data" / "log").stat().st_size > 0
    # The namespace shows the newest records wherever they live.
    final = (mounts["node-1"] / "data" / "log").read_bytes()
    assert final[(acked % SLOTS) * RECORD :][:RECORD] == record(acked)


def test_a_bad_mount_argument_exits_2_naming_it(tmp_path: Path) -> None:
    require(BIN.exists(), f"{BIN} (cd agents && cargo build --release -p lachesis-agent)")
    r = subprocess.run(
        [str(BIN), "run", "--host-id", "h", "--mount", f"{tmp_path}:{tmp_path / 'nope'}"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert r.returncode == 2
    assert "mountpoint" in r.stderr and "nope" in r.stderr, r.stderr
