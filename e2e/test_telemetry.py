"""eBPF telemetry end to end: a real agent with the BPF programs attached counts a tenant's
O_DIRECT IO in its cgroup, and the controller's telemetry API shows that tenant's bytes and
miss-ratio curve, whose references are the block IO the kernel's own per-task accounting
counted for the tenant's processes. Needs root, kernel BTF, a cgroup2 mount and /proc/PID/io
(CI runs as root: there a missing one fails instead of skipping)."""

from __future__ import annotations

import ctypes
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from conftest import AGENT_BIN, HOST, Cluster, require, wait_for

INTERVAL_MS = 500
BLOCK = 4096
# 8 MiB: every block written once, then read once. LRU misses every reference below a cache
# of BLOCKS blocks and only the first (cold) half from there on.
BLOCKS = 2048
# What dd's dynamic loader and locale code read from regular files besides the data.
LOADER_READ_SLACK = 256 * 1024


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"]:
            return Path(left.split()[4])
    return None


@pytest.fixture
def ebpf_host() -> Iterator[tuple[Path, Path]]:
    """(a fresh cgroup v2 directory, a bpffs mount for the agent's pins), removed afterwards."""
    require(os.geteuid() == 0, "root (to load BPF programs)")
    require(Path("/sys/kernel/btf/vmlinux").exists(), "kernel BTF (/sys/kernel/btf/vmlinux)")
    mount = cgroup2_mount()
    require(mount is not None, "a cgroup2 mount")
    require(shutil.which("dd") is not None, "dd")
    assert mount is not None
    cgroup = mount / f"lachesis-e2e-{os.getpid()}"
    cgroup.mkdir()
    pins = Path(tempfile.mkdtemp(prefix="lachesis-bpffs-"))
    libc = ctypes.CDLL(None, use_errno=True)
    mounted = libc.mount(b"bpf", str(pins).encode(), b"bpf", 0, None) == 0
    try:
        require(mounted, f"a bpf filesystem (mount -t bpf: errno {ctypes.get_errno()})")
        yield cgroup, pins / "lachesis"
    finally:
        if mounted:
            libc.umount2(str(pins).encode(), 2)  # MNT_DETACH
        shutil.rmtree(pins, ignore_errors=True)
        cgroup.rmdir()


@pytest.fixture
def fast_telemetry(monkeypatch: pytest.MonkeyPatch, ebpf_host: tuple[Path, Path]) -> tuple[Path, Path]:
    """Before `running` starts the agent: report every INTERVAL_MS, pin into the test's bpffs."""
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", str(INTERVAL_MS))
    monkeypatch.setenv("LACHESIS_BPF_PIN_DIR", str(ebpf_host[1]))
    return ebpf_host


def in_cgroup(cgroup: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    # The shell joins the cgroup, then becomes dd; stderr is a pipe so dd's summary is no
    # file IO of the tenant.
    script = f'echo $$ > {cgroup}/cgroup.procs && exec "$@"'
    return subprocess.run(["sh", "-c", script, "sh", *argv], capture_output=True, text=True, timeout=120, check=True)


# Joins the cgroup, runs each command (argv per line of stdin, JSON) as its child and prints
# its own IO accounting (/proc/self/io: the process and its reaped children) before joining,
# right after, and at the end. Everything is imported before it joins.
ACCOUNTED = r"""
import json, os, subprocess, sys

def io():
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f.read().splitlines())}

commands = [json.loads(line) for line in sys.stdin]
before = io()
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
joined = io()
for argv in commands:
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
print(json.dumps({"before": before, "joined": joined, "end": io()}))
"""


def accounted_in_cgroup(cgroup: Path, *commands: list[str]) -> dict[str, dict[str, int]]:
    """Runs the commands one after the other in the cgroup; the kernel's IO accounting of the
    process that ran them (/proc/PID/io) before it joined, once it had, and at the end."""
    out = subprocess.run(
        [sys.executable, "-c", ACCOUNTED, str(cgroup)],
        input="".join(json.dumps(c) + "\n" for c in commands),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def telemetry(cluster: Cluster, tenant: str) -> dict:
    with cluster.api() as api:
        r = api.get(f"/api/v1/tenants/{tenant}/telemetry")
        assert r.status_code == 200, r.text
        return r.json()


def totals(body: dict) -> dict[str, float]:
    """Bytes and ops over the whole series: each point's rate times its interval (the first
    point's interval is unknown, so the tenant must have been idle then)."""
    out = {"read_bytes": 0.0, "write_bytes": 0.0, "read_ops": 0.0, "write_ops": 0.0}
    series = body["series"]
    assert series and series[0]["read_iops"] == 0 and series[0]["write_iops"] == 0, series[:1]
    for prev, p in zip(series, series[1:]):
        dt = (datetime.fromisoformat(p["at"]) - datetime.fromisoformat(prev["at"])).total_seconds()
        out["read_bytes"] += p["read_bytes_per_s"] * dt
        out["write_bytes"] += p["write_bytes_per_s"] * dt
        out["read_ops"] += p["read_iops"] * dt
        out["write_ops"] += p["write_iops"] * dt
    return out


def test_ebpf_telemetry_reaches_the_controller(fast_telemetry: tuple[Path, Path], running: Cluster) -> None:
    cgroup, pins = fast_telemetry
    require(Path("/proc/self/io").exists(), "per-task IO accounting (/proc/PID/io, CONFIG_TASK_IO_ACCOUNTING)")
    agent_log = running.processes[f"agent-{HOST}"].text
    assert "eBPF metrics engine attached" in agent_log(), agent_log()[-3000:]

    tenant = {"name": "ddjob", "classifiers": [{"kind": "cgroup", "value": "/" + cgroup.name}]}
    with running.api() as api:
        r = api.post("/api/v1/tenants", json=tenant)
        assert r.status_code == 201, r.text
        running.wait_rollout_done(r.json()["rollout_id"], timeout=30)
    # The tenant is mapped and reported (idle) before any IO, so the series starts at zero.
    wait_for("an idle report of the tenant", lambda: len(telemetry(running, "ddjob")["series"]) >= 2, timeout=30)

    data_dir = Path(os.environ.get("LACHESIS_TEST_DIR", "/var/tmp"))
    data = data_dir / f"lachesis-e2e-{os.getpid()}.dat"
    try:
        io = accounted_in_cgroup(
            cgroup,
            ["dd", "if=/dev/zero", f"of={data}", f"bs={BLOCK}", f"count={BLOCKS}", "oflag=direct"],
            ["dd", f"if={data}", "of=/dev/null", f"bs={BLOCK}", f"count={BLOCKS}", "iflag=direct"],
        )
    finally:
        data.unlink(missing_ok=True)

    def settled() -> dict | None:
        body = telemetry(running, "ddjob")
        done = body["series"][-1]["read_iops"] == 0 and totals(body)["read_bytes"] > 0
        return body if done else None

    body = wait_for("the tenant's IO to be reported and go idle again", settled, timeout=30)
    t = totals(body)
    assert t["write_bytes"] == pytest.approx(BLOCKS * BLOCK, rel=1e-6)
    assert t["write_ops"] == pytest.approx(BLOCKS, rel=1e-6)
    assert BLOCKS * BLOCK <= t["read_bytes"] + 1 <= BLOCKS * BLOCK + LOADER_READ_SLACK, t

    curve = body["curve"]
    assert curve is not None and curve["policy"] == "lru" and curve["unit"] == "bytes"
    # The curve counts every 4 KiB block the tenant's bios touched. Its writes are dd's
    # O_DIRECT ones (dd dirties no file's pages; the filesystem's metadata is no tenant's). Its
    # reads are every read bio its processes submitted, which the kernel's own per-task IO
    # accounting counts too (read_bytes): dd's O_DIRECT reads, and what dd's start and the file's
    # creation read that was not cached: dd and its locale data paged in, the filesystem's
    # inode table and bitmaps (tens of blocks on a fresh or busy host, none on a warm one).
    # Blocks read between the reads of /proc/PID/io around the cgroup join fall on either side.
    read = {k: io["end"]["read_bytes"] - io[k]["read_bytes"] for k in ("joined", "before")}
    assert read["joined"] >= BLOCKS * BLOCK, io
    kernel = (BLOCKS + read["joined"] // BLOCK, BLOCKS + math.ceil(read["before"] / BLOCK))
    assert kernel[0] <= curve["references"] <= kernel[1], (
        f"{curve['references']} references, the kernel counted {kernel}: {io}"
    )
    # The other reads are of blocks of their own: wherever they fall, they add at most a miss each.
    extra = curve["references"] - 2 * BLOCKS
    miss = {p["size_bytes"]: p["miss_ratio"] for p in curve["points"]}
    below = [m for size, m in miss.items() if size < BLOCKS * BLOCK]
    assert below and all(m == pytest.approx(1.0, abs=0.02) for m in below), miss
    # Above BLOCKS blocks only the cold half of dd's references misses, and at most the others
    # (the agent cuts the flat tail after the first such point); at BLOCKS itself the
    # estimator's distance histogram blurs the step.
    cold = (BLOCKS / (2 * BLOCKS + extra), (BLOCKS + extra) / (2 * BLOCKS + extra))
    above = [m for size, m in miss.items() if size > BLOCKS * BLOCK]
    assert above and all(cold[0] - 0.02 <= m <= cold[1] + 0.02 for m in above), (cold, miss)
    assert cold[0] - 0.02 <= miss[BLOCKS * BLOCK] <= 1.0, (cold, miss)

    with running.api() as api:
        summary = api.get("/api/v1/telemetry/summary").json()
    assert [x["name"] for x in summary["tenants"]] == ["ddjob"]

    # `lachesis-agent top` reads the running agent's pinned maps.
    top = subprocess.run(
        [str(AGENT_BIN), "top", "--pin-dir", str(pins), "--count", "1", "--interval-ms", "200"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert top.returncode == 0, top.stderr
    assert "ddjob" in top.stdout, top.stdout


def test_a_bad_telemetry_message_is_dropped_and_changes_nothing(
    fast_telemetry: tuple[Path, Path], running: Cluster
) -> None:
    cgroup, _ = fast_telemetry
    tenant = {"name": "quiet", "classifiers": [{"kind": "cgroup", "value": "/" + cgroup.name}]}
    with running.api() as api:
        r = api.post("/api/v1/tenants", json=tenant)
        assert r.status_code == 201, r.text
    before = wait_for("reports of the tenant", lambda: (b := telemetry(running, "quiet"))["series"] and b, timeout=30)
    # Claims huge IO for the tenant, but its curve has one miss ratio for two sizes.
    at = (datetime.now().astimezone() + timedelta(seconds=0.2)).isoformat()
    bad = {
        "schema": "lachesis.telemetry/v1",
        "host_id": HOST,
        "sent_at": at,
        "interval_s": 0.5,
        "tenants": [
            {
                "name": "quiet",
                "ops_read": 10**9,
                "ops_written": 0,
                "bytes_read": 10**12,
                "bytes_written": 0,
                "latency_us_p99": None,
                "curve": {
                    "policy": "lru",
                    "algorithm": "shards-fixed-size",
                    "unit": "bytes",
                    "sizes": [4096, 8192],
                    "miss_ratios": [0.5],
                    "references": 7,
                },
            }
        ],
        "devices": [],
    }
    running.redis().xadd(f"lachesis:agent:{HOST}:telemetry", {"msg": json.dumps(bad)})
    controller_log = running.processes["controller"].text
    wait_for(
        "the controller to log the dropped message",
        lambda: f"lachesis:agent:{HOST}:telemetry" in controller_log()
        and "dropped invalid message" in controller_log(),
    )
    # Two more agent reports after it: no rate jumped, no curve of 7 references appeared.
    n = len(before["series"])
    after = wait_for(
        "two more reports", lambda: len((b := telemetry(running, "quiet"))["series"]) >= n + 2 and b, timeout=30
    )
    assert all(p["read_bytes_per_s"] < 10**9 for p in after["series"]), after["series"]
    assert after["curve"] is None or after["curve"]["references"] != 7
