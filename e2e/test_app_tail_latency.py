"""Tail-latency routing end to end (sRoute §6.5.1): an agent with a FUSE mount sends a
tenant's IO to a remote endpoint E (a `lachesis-fs serve`); a second `serve` F stands by.
E is made slow by its test delay hook: the agent's latency monitor reports it, the
controller forwards the tenant's writes into a log on F (the bytes reach F, not E, and read
back through the mount from F's log), the controller is restarted (the new one ships the
same forwarding: the data stays in the log), E is made fast again: the controller reclaims
the log to E and takes it out of the route. The data on E afterwards equals what was written,
the log counted exactly the forwarded bytes and is cut to nothing once reclaimed.

Counts and data, never durations: every wait is a counted poll of the controller's view
(`GET /api/v1/apps/tail-latency`) or of the files.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import AGENT_BIN, ROOT, Cluster, free_port, mounted, require, wait_for

BLOCK = 4096
BLOCKS = 256  # the file: 1 MiB
AGENT = Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN))
FS = Path(os.environ.get("LACHESIS_FS_BIN", ROOT / "agents" / "target" / "release" / "lachesis-fs"))
SLOW_US = 20_000  # per request on E while slow: far above a loopback round trip


def policy(e: int, f: int) -> str:
    return f"""apiVersion: lachesis.dev/v1
kind: Policy
metadata: {{name: db-tail}}
spec:
  tenants:
    - name: db
      classifiers: [{{kind: uid, value: "0"}}]
  stages:
    - name: route/db
      kind: tail_latency
      owner: db
      servers: ["tcp://127.0.0.1:{e}/store", "tcp://127.0.0.1:{f}/spill"]
      alpha: 3
      reclaim_bytes_per_s: 262144
  rules:
    - name: db-routed
      priority: 10
      match: {{tenant: db, path_prefix: /db}}
      detours: [{{what: io, to: {{kind: stage, target: route/db}}}}]
"""


@pytest.fixture
def world(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict]:
    require(os.path.exists("/dev/fuse"), "/dev/fuse (modprobe fuse)")
    require(os.geteuid() == 0, "root (the agent mounts a FUSE namespace)")
    require(AGENT.exists(), f"{AGENT} (cd agents && cargo build --release -p lachesis-agent)")
    require(FS.exists(), f"{FS} (cd agents && cargo build --release -p lachesis-fs)")
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    monkeypatch.setenv("LACHESIS_RECONCILE_INTERVAL_S", "0.3")
    backing, mnt = cluster.tmp / "backing", cluster.tmp / "mnt"
    e_root, f_root, delay = cluster.tmp / "e", cluster.tmp / "f", cluster.tmp / "e-delay-us"
    for d in (backing, mnt, e_root, f_root):
        d.mkdir(parents=True)
    e, f = free_port(), free_port()
    cluster.start_redis()
    cluster.start_controller()
    cluster._add(
        "serve-e",
        [str(FS), "serve", "--listen", f"127.0.0.1:{e}", "--root", str(e_root), "--test-delay-file", str(delay)],
        {"RUST_LOG": "info"},
    ).start()
    cluster._add(
        "serve-f", [str(FS), "serve", "--listen", f"127.0.0.1:{f}", "--root", str(f_root)], {"RUST_LOG": "info"}
    ).start()
    cluster._add(
        "agent-node-1",
        [
            str(AGENT),
            "run",
            "--host-id",
            "node-1",
            "--redis-url",
            cluster.enroll("node-1"),
            "--no-ebpf",
            "--mount",
            f"{backing}:{mnt}",
            "--endpoint-root",
            str(cluster.tmp),
            "--heartbeat-interval-ms",
            "500",
            "--heartbeat-ttl-s",
            "30",
        ],
        {"RUST_LOG": "info"},
    ).start()
    try:
        wait_for(
            "node-1 to register and ack",
            lambda: (x := cluster.host("node-1")) and x["acked_generation"] >= 1,
            timeout=30,
        )
        wait_for("node-1's FUSE mount", lambda: mounted(mnt), timeout=30)
        yield {"mnt": mnt, "e": e, "f": f, "e_root": e_root, "f_root": f_root, "delay": delay}
    finally:
        cluster.stop_all()
        if mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def app(cluster: Cluster) -> dict:
    with cluster.api() as api:
        (s,) = api.get("/api/v1/apps/tail-latency").json()["stages"]
    return s


def write_blocks(path: Path, blocks: range, fill: int) -> None:
    """O_DIRECT 4 KiB writes (each one IO through the switch), block b filled with (fill + b) % 256."""
    buf = mmap.mmap(-1, BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    try:
        for b in blocks:
            buf[:] = bytes([(fill + b) % 256]) * BLOCK
            assert os.pwritev(fd, [buf], b * BLOCK) == BLOCK
    finally:
        os.close(fd)


def read_all(path: Path) -> bytes:
    buf = mmap.mmap(-1, BLOCKS * BLOCK)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.preadv(fd, [buf], 0) == BLOCKS * BLOCK
    finally:
        os.close(fd)
    return bytes(buf)


def test_a_slow_endpoints_writes_are_forwarded_read_back_and_reclaimed(cluster: Cluster, world: dict) -> None:
    with cluster.api() as api:
        r = api.post(
            "/api/v1/policies", content=policy(world["e"], world["f"]), headers={"content-type": "application/yaml"}
        )
        assert r.status_code == 201, r.text
    assert cluster.wait_rollout_done(r.json()["rollout_id"], timeout=60)["state"] == "succeeded"
    f = world["mnt"] / "db" / "v"
    f.parent.mkdir()
    f.touch()
    # A fast baseline: the whole file written to E, several windows of requests.
    write_blocks(f, range(BLOCKS), 0)
    on_e = world["e_root"] / "store" / "db" / "v"
    assert on_e.read_bytes() == read_all(f)
    wait_for(
        "the controller to see E's baseline",
        lambda: (s := app(cluster))["requests"] and s["requests"] >= BLOCKS,
        timeout=60,
    )
    assert app(cluster)["state"] == "normal"

    # E slow: writes keep going until the controller forwards (each write then waits 20 ms).
    world["delay"].write_text(str(SLOW_US))
    n = 0

    def forwarding() -> bool:
        nonlocal n
        if app(cluster)["state"] == "forwarding":
            return True
        write_blocks(f, range(n % 8, n % 8 + 1), 0)
        n += 1
        return False

    wait_for("the controller to forward the slow endpoint's writes", forwarding, timeout=120)
    s = app(cluster)
    assert (s["forwards"], s["forwarded_to"], s["slow"]) == (1, f"tcp://127.0.0.1:{world['f']}/spill", True)
    e_before = on_e.read_bytes()

    # Forwarded: the new bytes land in F's log, E keeps the old ones; reads come from the log.
    forwarded = range(64, 128)
    write_blocks(f, forwarded, 7)
    assert on_e.read_bytes() == e_before
    log = world["f_root"] / "lachesis-forward" / "route-db" / "stage.log"
    assert log.stat().st_size > len(forwarded) * BLOCK
    want = bytearray(e_before)
    for b in forwarded:
        want[b * BLOCK : (b + 1) * BLOCK] = bytes([(7 + b) % 256]) * BLOCK
    assert read_all(f) == bytes(want)
    wait_for("the log's counters", lambda: (app(cluster)["forwarded_bytes"] or 0) >= len(forwarded) * BLOCK, timeout=60)

    # The controller restarts while forwarding. A rollout of something else, made before the
    # new one's loop has seen any report, ships the route with the log still in it (the
    # forwarding is in the database), so the data stays in the log (E unchanged, nothing
    # reclaimed); the loop resumes the same forwarding.
    cluster.processes["controller"].stop()
    cluster.start_controller()
    with cluster.api() as api:
        r = api.post("/api/v1/tenants", json={"name": "bystander", "classifiers": [{"kind": "uid", "value": "4242"}]})
        assert r.status_code == 201, r.text
    assert cluster.wait_rollout_done(r.json()["rollout_id"], timeout=60)["state"] == "succeeded"
    assert on_e.read_bytes() == e_before
    wait_for(
        "the new controller to resume the forwarding", lambda: app(cluster)["forwarded_to"] is not None, timeout=60
    )
    wait_for("the log's counters after the restart", lambda: app(cluster)["held_bytes"] is not None, timeout=60)
    s = app(cluster)
    assert (s["state"], s["forwards"], s["forwarded_to"]) == ("forwarding", 1, f"tcp://127.0.0.1:{world['f']}/spill")
    # Counted: the log took exactly the forwarded writes' bytes and holds them all.
    n = len(forwarded) * BLOCK
    assert (s["forwarded_bytes"], s["held_bytes"], s["reclaimed_bytes"]) == (n, n, 0)
    assert read_all(f) == bytes(want)

    # E fast again: reads of the unforwarded ranges go to E and refill its window; the
    # controller reclaims the log to E and takes it out of the route.
    world["delay"].unlink()

    def reclaimed() -> bool:
        s = app(cluster)
        if s["state"] == "normal" and s["reclaims"] == 1:
            return True
        read_all(f)
        return False

    wait_for("the reclaim to finish", reclaimed, timeout=180)
    s = app(cluster)
    assert (s["forwards"], s["reclaims"], s["forwarded_to"]) == (1, 1, None)
    # Nothing lost: E holds what was written, the mount reads the same; everything left the
    # log (a forwarding log that holds nothing is cut to nothing).
    assert hashlib.sha256(on_e.read_bytes()).hexdigest() == hashlib.sha256(bytes(want)).hexdigest()
    assert read_all(f) == bytes(want)
    assert log.stat().st_size == 0
    # Out of the route: new writes go to E, the log does not grow.
    size = log.stat().st_size
    write_blocks(f, range(0, 1), 9)
    assert on_e.read_bytes()[:BLOCK] == bytes([9]) * BLOCK and log.stat().st_size == size
