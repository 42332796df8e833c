#!/usr/bin/env python3
"""fio 4 KiB random read/write IOPS through a `tcp://` remote endpoint over a veth pair between
two network namespaces (`lachesis-fs serve` in one, the mount in the other), against a local
endpoint flow on the same mount and the backing file system without FUSE, all in the same run;
medians of RUNS. Markdown on stdout, progress on stderr. Needs root, ip, nsenter, fio, /dev/fuse.

    python3 agents/fs/bench/remote_iops.py --fs-bin /work/target-fs/release/lachesis-fs
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER_IP, CLIENT_IP, PORT = "10.231.78.1", "10.231.78.2", 7071


def sh(*a: str) -> None:
    subprocess.run(a, check=True, capture_output=True)


def fio(path: Path, op: str, secs: int, size: str, extra: list[str]) -> tuple[float, float]:
    out = subprocess.run(
        [
            "fio",
            "--name=b",
            f"--filename={path}",
            f"--rw={op}",
            "--bs=4k",
            f"--size={size}",
            "--ioengine=psync",
            "--time_based",
            f"--runtime={secs}",
            "--ramp_time=1",
            "--output-format=json",
            *extra,
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    j = json.loads(out)["jobs"][0]["read" if op == "randread" else "write"]
    return j["iops"], j["clat_ns"]["percentile"]["99.000000"] / 1000


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--size", default="64M")
    a = ap.parse_args()
    for tool in ("ip", "nsenter", "fio"):
        if not shutil.which(tool):
            print(f"remote_iops: {tool} is not installed", file=sys.stderr)
            return 2
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        print("remote_iops: needs root and /dev/fuse", file=sys.stderr)
        return 2
    base = Path(tempfile.mkdtemp(prefix="lfs-remote-bench-", dir="/var/tmp"))
    ns_s, ns_c = "lfsb-srv", "lfsb-cli"
    procs: list[subprocess.Popen] = []
    mnt = base / "mnt"
    try:
        for ns in (ns_s, ns_c):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", "lfsbs", "netns", ns_s, "type", "veth", "peer", "name", "lfsbc", "netns", ns_c)
        for ns, dev, ip in ((ns_s, "lfsbs", SERVER_IP), (ns_c, "lfsbc", CLIENT_IP)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        backing, remote_root, local_ep = base / "backing", base / "remote-root", base / "local-ep"
        for d in (backing, remote_root, local_ep, mnt, backing / "remote", backing / "local", backing / "bare"):
            d.mkdir()
        rules = [
            {
                "name": "remote",
                "priority": 1,
                "match": {"path_prefix": "/remote"},
                "detours": [{"what": "io", "to": {"kind": "file", "target": f"tcp://{SERVER_IP}:{PORT}/ep"}}],
            },
            {
                "name": "local",
                "priority": 2,
                "match": {"path_prefix": "/local"},
                "detours": [{"what": "io", "to": {"kind": "file", "target": str(local_ep)}}],
            },
        ]
        (base / "rules.json").write_text(json.dumps(rules))
        log = (base / "log").open("ab")
        procs.append(
            subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    ns_s,
                    a.fs_bin,
                    "serve",
                    "--listen",
                    f"{SERVER_IP}:{PORT}",
                    "--root",
                    str(remote_root),
                ],
                stdout=log,
                stderr=log,
            )
        )
        procs.append(
            subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/run/netns/{ns_c}",
                    a.fs_bin,
                    "mount",
                    "--backing",
                    str(backing),
                    "--mountpoint",
                    str(mnt),
                    "--rules",
                    str(base / "rules.json"),
                ],
                stdout=log,
                stderr=log,
            )
        )
        t0 = time.monotonic()
        while not os.path.ismount(mnt):
            if time.monotonic() - t0 > 10:
                raise SystemExit("remote_iops: the mount did not come up: " + (base / "log").read_text())
            time.sleep(0.05)
        flows = [
            ("remote endpoint (tcp over veth)", mnt / "remote" / "f", ["--direct=1"]),
            ("local endpoint (same mount)", mnt / "local" / "f", ["--direct=1"]),
            ("backing, direct", backing / "bare" / "f", ["--direct=1"]),
            (
                "backing, pwrite + fdatasync each write (what serve does)",
                backing / "bare" / "f",
                ["--direct=0", "--fdatasync=1"],
            ),
        ]
        results: dict[tuple[str, str], list[tuple[float, float]]] = {}
        total = a.runs * len(flows) * 2
        step = 0
        for _ in range(a.runs):
            for op in ("randread", "randwrite"):
                for name, path, extra in flows:
                    if op == "randread" and "fdatasync" in name:
                        step += 1
                        continue
                    step += 1
                    print(f"[{step}/{total}] {name} {op}", file=sys.stderr, flush=True)
                    results.setdefault((name, op), []).append(fio(path, op, a.seconds, a.size, extra))
        print(
            f"fio 4 KiB, psync, 1 job on one {a.size} file, {a.seconds} s per run (+1 s ramp), median of {a.runs} runs, load average {os.getloadavg()[0]:.1f}.\n"
        )
        print("| flow / baseline | op | IOPS | p99 µs | IOPS / local endpoint | IOPS / backing direct |")
        print("|---|---|---:|---:|---:|---:|")
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in results.items()}
        for op in ("randread", "randwrite"):
            for name, _, _ in flows:
                if (name, op) not in med:
                    continue
                iops, p99 = med[(name, op)]
                print(
                    f"| {name} | {op} | {iops:,.0f} | {p99:,.0f} | {iops / med[('local endpoint (same mount)', op)][0]:.2f} | {iops / med[('backing, direct', op)][0]:.2f} |"
                )
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)])
        for ns in (ns_s, ns_c):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
