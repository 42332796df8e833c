"""Two-level caches end to end (Moirai §5.3.5): an agent with a FUSE mount forwards a tenant's
reads to a remote endpoint (tcp://) served by a second agent (--serve-listen/--serve-root). A
replay of the shared CloudPhysics trace runs twice under one level (a cache on the host), then
twice under two levels (the same host cache, plus the server level the storage agent runs in
front of its store), then twice with that server level exclusive (level 1 demotes its clean
evictions to it). Measured on each second, warm pass, from the agents' stage counters: both
levels count hits, the bytes read from the server's store are fewer with two levels, and
fewer again with demotion (level 1 demoted blocks, the server level hit them).

The α split: with a two_level declaration and an allocation in force, the agent reports the
tenant's curve from the FUSE switch (no eBPF), the loop splits its share, and the sizes the
agents install are the a1 and a2 the controller reports.

Counts, never durations: a pass is waited for by the level-1 stage's read count reaching the
pass's references, and the server level's reads reaching level 1's misses (counted polls of
the telemetry the controller serves).
"""

from __future__ import annotations

import mmap
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import AGENT_BIN, ROOT, Cluster, free_port, mounted, require, wait_for

BLOCK = 4096
BLOCKS = 1024  # the file: 4 MiB
REFS = 6000  # references of one pass
L1_BYTES = 1 << 20  # 256 blocks
L2_BYTES = 3 << 20  # 765 blocks: with level 1's 255, about the trace's distinct blocks
SPLIT_CAPACITY = 1 << 20  # the allocation's capacity: the most level 1 may get (a1)
SERVER_MAX = 3 << 20
BIN = Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN))
TRACE = ROOT / ".." / "shared" / "traces" / "cloudPhysicsIO.csv"


def trace_blocks() -> np.ndarray:
    """The first REFS reads of the CloudPhysics trace as blocks of the file (lbn in 512 B
    sectors -> 4 KiB blocks, folded onto the file's BLOCKS)."""
    rows = np.genfromtxt(TRACE, delimiter=",", names=True, dtype=None, encoding="ascii", max_rows=40_000)
    reads = rows[np.isin(np.char.lower(rows["op"].astype(str)), ["28", "88"])]
    return (reads["lbn"].astype(np.int64) * 512 // BLOCK % BLOCKS)[:REFS]


def policy(port: int, levels: int, exclusive: bool = False, two_level: bool = False) -> str:
    l1_parent = "      parent: cache/media-l2\n" if levels == 2 else ""
    if two_level:
        l1_parent += (
            "      two_level: {memory_bytes_per_s: 10000000000, network_bytes_per_s: 1250000000,"
            f" storage_bytes_per_s: 200000000, server_max_bytes: {SERVER_MAX}}}\n"
        )
    l2 = (
        (
            f"    - {{name: cache/media-l2, kind: cache, owner: media, level: 2, engine: dram, size_bytes: {L2_BYTES},"
            f" serves: [store], hosts: [storage-1]{', exclusive: true' if exclusive else ''}}}\n"
        )
        if levels == 2
        else ""
    )
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
            [
                str(BIN),
                "run",
                "--host-id",
                host,
                "--redis-url",
                cluster.enroll(host),
                "--no-ebpf",
                *extra,
                "--heartbeat-interval-ms",
                "500",
                "--heartbeat-ttl-s",
                "30",
            ],
            {"RUST_LOG": "info"},
        ).start()
    try:
        for host in agents:
            wait_for(
                f"{host} to register and ack",
                lambda h=host: (x := cluster.host(h)) and x["acked_generation"] >= 1,
                timeout=30,
            )
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


def media_file(world: dict) -> Path:
    """The tenant's file: its data on the server only (each block starts with its number);
    the host's namespace has the file, of its size, empty."""
    stored = world["serve_root"] / "store" / "media" / "f"
    stored.parent.mkdir()
    stored.write_bytes(b"".join(b.to_bytes(8, "little").ljust(BLOCK, b".") for b in range(BLOCKS)))
    f = world["mnt"] / "media" / "f"
    f.parent.mkdir()
    with f.open("wb") as out:
        out.truncate(BLOCKS * BLOCK)
    return f


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
        seen = (
            (l1.get("hits") or 0)
            + (l1.get("misses") or 0)
            - (l1_before.get("hits") or 0)
            - (l1_before.get("misses") or 0)
        )
        return now if seen >= len(blocks) else None

    now = wait_for("level 1 to report the pass's reads", after, timeout=60)
    delta = {s: {k: (now[s].get(k) or 0) - (before[s].get(k) or 0) for k in COUNTERS} for s in stages}
    if "cache/media-l2" in stages:
        # Every block level 1 missed is one read at the server level (a hit or a miss there).
        def server_after() -> dict[str, dict] | None:
            l2, l2_before = stats(cluster, "cache/media-l2", "storage-1"), before["cache/media-l2"]
            seen = sum((l2.get(k) or 0) - (l2_before.get(k) or 0) for k in ("hits", "misses"))
            if seen < delta["cache/media-l1"]["misses"]:
                return None
            return {k: (l2.get(k) or 0) - (l2_before.get(k) or 0) for k in COUNTERS}

        delta["cache/media-l2"] = wait_for("the server level to report level 1's misses", server_after, timeout=60)
    return delta


COUNTERS = ("hits", "misses", "bytes_read_miss", "demoted_blocks", "demotion_hits")


def test_two_levels_count_hits_at_both_and_read_less_from_the_servers_store(cluster: Cluster, world: dict) -> None:
    blocks = trace_blocks()
    assert len(blocks) == REFS and len(np.unique(blocks)) > L1_BYTES // BLOCK  # level 1 alone cannot hold it
    apply(cluster, policy(world["port"], levels=1))
    f = media_file(world)

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
    assert (double["cache/media-l1"]["demoted_blocks"], double["cache/media-l2"]["demoted_blocks"]) == (0, 0)

    # The same server level, exclusive: level 1 demotes what it evicts, the server level holds
    # that instead of what level 1 already has (Moirai's global LRU).
    apply(cluster, policy(world["port"], levels=2, exclusive=True))
    # Warm. The server-level stage was rebuilt (exclusive is not a resize): its counters start
    # again from zero, so the measured pass starts from a report of the new stage that counts
    # every read level 1 missed in the warm pass.
    warm = measured_pass(cluster, f, blocks, one)["cache/media-l1"]["misses"]

    def rebuilt_level_reported() -> bool:
        l2 = stats(cluster, "cache/media-l2", "storage-1")
        return (l2.get("hits") or 0) + (l2.get("misses") or 0) >= warm and (l2.get("demoted_blocks") or 0) > 0

    wait_for("the exclusive server level to report the warm pass", rebuilt_level_reported, timeout=60)
    demoting = measured_pass(cluster, f, blocks, two)
    assert demoting["cache/media-l1"]["demoted_blocks"] > 0, demoting
    assert demoting["cache/media-l2"]["demoted_blocks"] > 0 and demoting["cache/media-l2"]["demotion_hits"] > 0, (
        demoting
    )
    from_store_demoting = demoting["cache/media-l2"]["bytes_read_miss"]
    assert from_store_demoting < from_store_two, (double, demoting)
    l2 = stats(cluster, "cache/media-l2", "storage-1")
    assert (l2["allocated_bytes"], l2["installed_bytes"]) == (L2_BYTES, L2_BYTES)
    print(
        f"bytes from the store per warm pass: one level {from_store_one}, two levels {from_store_two}, "
        f"with demotion {from_store_demoting}"
    )


def split_in_force(cluster: Cluster) -> dict:
    """Proposes an allocation from the tenant's curve (once it shows reuse), then waits for the
    loop's split to be recorded, shipped and installed at both levels; returns the tenant's
    /apps/two-level entry then."""

    # The tenant's reads go through the FUSE switch to the remote endpoint and the agent runs
    # without eBPF: its curve is the switch's.
    def curve() -> dict | None:
        with cluster.api() as api:
            c = api.get("/api/v1/tenants/media/telemetry").json()["curve"]
        if not c or min(p["miss_ratio"] for p in c["points"]) > 0.9:
            return None
        return {"sizes": [p["size_bytes"] for p in c["points"]], "miss_ratios": [p["miss_ratio"] for p in c["points"]]}

    measured = wait_for("media's curve from node-1's switch", curve, timeout=120)
    with cluster.api() as api:
        r = api.post(
            "/api/v1/allocations/proposals", json={"capacity_bytes": SPLIT_CAPACITY, "curves": {"media": measured}}
        )
        assert r.status_code == 200, r.text

    def installed() -> tuple[dict, dict, dict] | None:
        with cluster.api() as api:
            (t,) = api.get("/api/v1/apps/two-level").json()["tenants"]
        if t["alpha"] is None or not t["host_bytes"]:
            return None  # no split yet (the first allocation may come before the tenant's IO)
        host, server = t["levels"]
        shipped = (host["shipped_bytes"], server["shipped_bytes"])
        if shipped != (round(t["host_bytes"]), round(t["server_bytes"])):
            return None  # the split is recorded; its rollout is still on its way
        if (host["installed_bytes"], server["installed_bytes"]) != shipped:
            return None  # the agents have not reported the new sizes yet
        rows = stats(cluster, "cache/media-l1", "node-1"), stats(cluster, "cache/media-l2", "storage-1")
        if [(r.get("allocated_bytes"), r.get("installed_bytes")) for r in rows] != [(s, s) for s in shipped]:
            return None  # read a moment after a new split: look again
        return t, *rows

    return wait_for("the split installed at both levels", installed, timeout=180)


@pytest.fixture
def split_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The allocation loop every second, reacting within 5 s: the first allocation may come
    before the tenant's first read (it then gets nothing), the next once it reads."""
    monkeypatch.setenv("LACHESIS_ALLOCATION_INTERVAL_S", "1")
    monkeypatch.setenv("LACHESIS_ALLOCATION_REACTION_S", "5")


def test_the_installed_sizes_are_the_split_the_controller_reports(
    split_loop: None, cluster: Cluster, world: dict
) -> None:
    blocks = trace_blocks()
    apply(cluster, policy(world["port"], levels=2, exclusive=True, two_level=True))
    f = media_file(world)
    with cluster.api() as api:
        (t,) = api.get("/api/v1/apps/two-level").json()["tenants"]
    assert (t["tenant"], t["alpha"]) == ("media", None)  # no allocation yet: the declared sizes

    # The tenant reads on while the loop allocates (an allocation weighs tenants by their
    # request rate: a silent tenant would get nothing).
    stop, failed = threading.Event(), []

    def read_on() -> None:
        try:
            while not stop.is_set():
                replay(f, blocks)
        except Exception as e:  # reported below: a wrong block must fail the test
            failed.append(e)

    reader = threading.Thread(target=read_on, daemon=True)
    reader.start()
    try:
        t, l1, l2 = split_in_force(cluster)
    finally:
        stop.set()
        reader.join()
    assert not failed, failed
    host, server = t["levels"]
    a1, a2 = round(t["host_bytes"]), round(t["server_bytes"])
    assert 0 < a1 <= SPLIT_CAPACITY and 0 < a2 <= SERVER_MAX, t
    assert t["alpha"] == pytest.approx(t["host_bytes"] / (t["host_bytes"] + t["server_bytes"]))
    assert (host["hosts"], server["hosts"], server["exclusive"]) == (["node-1"], ["storage-1"], True)
    # The same moment's telemetry, per host: each level's stage shipped and installed at its
    # part of the split, and serving at it (hits at both levels, level 1 demoting).
    assert (l1["allocated_bytes"], l1["installed_bytes"], l2["allocated_bytes"], l2["installed_bytes"]) == (
        a1,
        a1,
        a2,
        a2,
    )
    assert l1["hits"] > 0 and l2["hits"] > 0, (l1, l2)
