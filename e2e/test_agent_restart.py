"""An agent that comes back after kill -9: over its own dead FUSE mount,
running the generation it had acknowledged before the controller is reachable.

The agent with a mount routes /data to a file endpoint; it is killed with SIGKILL, which
leaves its FUSE mount dead (ENOTCONN). Redis is stopped too, so the restarted agent cannot
resync: it must detach the dead mount itself, mount again, and route IO by the rules it had
acked, restored from its state file. Redis then comes back and the agent acks the same
generation again and reports it in its heartbeat. No durations: order comes from the agent's
log and the ack stream, and waits are counted polls that only turn a hang into a failure.

Needs root and /dev/fuse (under CI=true a missing one fails).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import HOST, Cluster, mounted, wait_for


def data_rule(endpoint: Path) -> dict:
    return {
        "name": "data-to-endpoint",
        "priority": 10,
        "match": {"path_prefix": "/data"},
        "detours": [{"what": "io", "to": {"kind": "file", "target": str(endpoint)}}],
    }


ACKS = f"lachesis:agent:{HOST}:acks"


def acks_of(cluster: Cluster, generation: int, after: str = "-") -> list[dict]:
    """The agent's acks of `generation` in its ack stream after entry `after`. The controller
    deletes the entries it handled but the newest, so the newest ack stays to be seen."""
    start = f"({after}" if after != "-" else "-"
    return [
        a for _, f in cluster.redis().xrange(ACKS, min=start) if (a := json.loads(f["msg"]))["generation"] == generation
    ]


def newest_entry(cluster: Cluster) -> str:
    last = cluster.redis().xrevrange(ACKS, count=1)
    return last[0][0] if last else "0-0"


def since_last_start(cluster: Cluster) -> list[str]:
    """The agent's log lines since its latest start."""
    text = cluster.processes[f"agent-{HOST}"].text()
    return text[text.rindex("--- start") :].splitlines()


def write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_killed_agent_comes_back_over_its_dead_mount_with_its_acked_rules(
    cluster: Cluster, confined_home: Path
) -> None:
    endpoint = cluster.tmp / "endpoints" / "a"
    mnt = confined_home / "mnt"
    with cluster.api() as api:
        created = api.post("/api/v1/rules", json=data_rule(endpoint))
        assert created.status_code == 201, created.text
    assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)["state"] == "succeeded"
    acked = cluster.host(HOST)["acked_generation"]
    assert acked >= 2
    wait_for("the FUSE mount", lambda: mounted(mnt), timeout=60)
    (mnt / "data").mkdir()
    write(mnt / "data" / "before", b"written before the crash")
    assert (endpoint / "data" / "before").read_bytes() == b"written before the crash"

    # The state the agent keeps for its restart is private.
    state = confined_home / "data" / ".lachesis-fs" / "agent"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "applied-state.json").stat().st_mode) == 0o600
    assert json.loads((state / "applied-state.json").read_text())["generation"] == acked

    mark = newest_entry(cluster)
    cluster.processes[f"agent-{HOST}"].kill9()
    with pytest.raises(OSError) as dead:
        os.stat(mnt)
    assert dead.value.errno == errno.ENOTCONN, "kill -9 leaves the FUSE mount dead"
    # No controller to resync with: what the agent runs now comes from its own disk.
    cluster.processes["redis"].stop()

    cluster.start_agent(HOST)
    wait_for("the restarted agent's FUSE mount", lambda: mounted(mnt) and (mnt / "data").is_dir(), timeout=60)
    lines = since_last_start(cluster)
    detached = next(i for i, line in enumerate(lines) if "detached the dead FUSE mount" in line)
    restored = next(i for i, line in enumerate(lines) if "restored the last acknowledged state" in line)
    mounted_at = next(i for i, line in enumerate(lines) if "FUSE switch mounted" in line)
    assert f"generation={acked} " in lines[restored], lines[restored]
    assert detached < mounted_at, "the dead mount is detached before the new one"
    assert not any("registered with the controller" in line for line in lines), "Redis is down"

    # Its rules are in force: IO through the mount goes where the rule says.
    write(mnt / "data" / "after", b"written after the restart")
    assert (endpoint / "data" / "after").read_bytes() == b"written after the restart"
    assert (mnt / "data" / "before").read_bytes() == b"written before the crash"

    cluster.start_redis()
    wait_for("the agent to ack its generation again", lambda: acks_of(cluster, acked, after=mark), timeout=60)
    again = acks_of(cluster, acked, after=mark)[-1]
    assert again["status"] == "applied", again
    lines = since_last_start(cluster)
    registered = next(i for i, line in enumerate(lines) if "registered with the controller" in line)
    assert restored < registered
    assert any("generation already applied, acked again" in line for line in lines[registered:])
    assert not any(" install " in line for line in lines), "the resync installs nothing new"
    heartbeat = wait_for("the heartbeat", lambda: cluster.redis().get(f"lachesis:agent:{HOST}:heartbeat"))
    assert json.loads(heartbeat)["generation"] == acked
    wait_for(
        "the controller to see the agent at its generation",
        lambda: (h := cluster.host(HOST)) and h["acked_generation"] == acked,
        timeout=60,
    )


def test_an_agent_refuses_to_mount_over_a_live_fuse_mount(cluster: Cluster, confined_home: Path) -> None:
    mnt = confined_home / "mnt"
    wait_for("the FUSE mount", lambda: mounted(mnt), timeout=60)
    second = subprocess.run(
        [
            cluster.processes[f"agent-{HOST}"].argv[0],
            "run",
            "--host-id",
            "host-b",
            "--no-ebpf",
            "--redis-url",
            cluster.redis_url,
            "--mount",
            f"{confined_home / 'data'}:{mnt}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 2, second.stderr
    assert f"mountpoint {mnt} is a live FUSE mount" in second.stderr, second.stderr
    assert cluster.processes[f"agent-{HOST}"].running and (mnt / ".").stat()
