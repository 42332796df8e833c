"""fio 4 KiB random IO on a lachesis-fs mount vs the backing file system, medians of runs."""

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


def cache_stage(name: str, engine: str, size_bytes: int = 512 << 20) -> dict:
    """A write-through cache stage, 512 MiB unless told (the stage contract: api-schemas,
    #/$defs/stage). bench/loop/priority.py builds its stages with it too."""
    return {
        "kind": "cache",
        "name": name,
        "owner": None,
        "engine": engine,
        "size_bytes": size_bytes,
        "write_mode": "through",
        "eviction": "lru",
        "max_dirty_bytes": 16 << 20,
        "device": None,
        "placement": [],
        "next": None,
    }


def to_stage(name: str, prefix: str, stage: str) -> dict:
    """A rule sending the IO of the files under `prefix` to `stage`."""
    return {
        "name": name,
        "priority": 20,
        "match": {"path_prefix": prefix},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": stage}}],
    }


FLOWS = {
    # flow: (directory in the namespace, rule that routes it or None for passthrough)
    "passthrough": ("pt", None),
    "user-space (endpoint)": (
        "user",
        lambda ep: {
            "name": "user",
            "priority": 10,
            "match": {"path_prefix": "/user"},
            "detours": [{"what": "io", "to": {"kind": "file", "target": str(ep)}}],
        },
    ),
    "cache stage (DRAM engine, write-through)": ("cache", lambda ep: to_stage("cache", "/cache", "cache/dram")),
    "cache stage (flash engine, write-through)": ("flash", lambda ep: to_stage("flash", "/flash", "cache/flash")),
}
# The stages the flows name; the flash one lives on the mount's device (--device).
STAGES = [cache_stage("cache/dram", "dram"), cache_stage("cache/flash", "loc")]


def fio(path: Path, rw: str, args, jobs: int, direct: int = 1) -> tuple[float, float]:
    """(IOPS, p99 latency in microseconds) of one fio run."""
    side = fio_side(path, rw, args, jobs, direct)
    return side["iops"], side["clat_ns"]["percentile"]["99.000000"] / 1000


def fio_side(path: Path, rw: str, args, jobs: int, direct: int = 1) -> dict:
    """fio's JSON for the run's reads or writes (`args.size`, `args.seconds`), all jobs together."""
    p = subprocess.run(
        [
            "fio",
            "--name=b",
            f"--filename={path}",
            f"--size={args.size}",
            f"--rw={rw}",
            "--bs=4k",
            f"--direct={direct}",
            "--ioengine=psync",
            f"--numjobs={jobs}",
            "--group_reporting",
            "--time_based",
            f"--runtime={args.seconds}",
            "--ramp_time=1",
            "--randrepeat=0",
            "--invalidate=0",
            "--output-format=json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    j = json.loads(p.stdout[p.stdout.index("{") :])["jobs"][0]
    return j["read" if "read" in rw else "write"]


# The buffered baseline keeps the page cache warm (fio would drop it at start): the bound of
# any flow served from memory. The switch honours O_DIRECT (fio here asks for it), so the
# user-space flows' backing and endpoint IO compares with the direct baseline.
BASELINES = {"backing, direct": 1, "backing, page cache": 0}


def table(args, jobs: int, mnt: Path, backing: Path) -> None:
    # (flow, op) -> [(iops, p99)]; each run measures every flow and both baselines, so all
    # see the same machine state.
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    total = (len(FLOWS) + len(BASELINES)) * 2 * args.runs
    done = 0
    for run in range(args.runs):
        for op in ("randread", "randwrite"):
            cases = [(f, mnt / d / "f", 1) for f, (d, _) in FLOWS.items()]
            cases += [(b, backing / "direct" / "f", direct) for b, direct in BASELINES.items()]
            for name, path, direct in cases:
                results.setdefault((name, op), []).append(fio(path, op, args, jobs, direct))
                done += 1
                print(
                    f"\r[{done}/{total}] {jobs} job(s), run {run + 1}: {op} {name}" + " " * 20,
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    print(file=sys.stderr)
    med = {k: (statistics.median(i for i, _ in v), statistics.median(p for _, p in v)) for k, v in results.items()}
    print(f"\n### {jobs} fio job(s)\n")
    print(
        f"fio 4 KiB, psync, {jobs} job(s) on one {args.size} file, {args.seconds} s per run (+1 s ramp), median of {args.runs} runs. "
        "Flows on the mount use direct=1; the baselines run on the backing directory without FUSE.\n"
    )
    print("| flow / baseline | op | IOPS | p99 µs | IOPS / backing direct | IOPS / backing page cache |")
    print("|---|---|---:|---:|---:|---:|")
    for op in ("randread", "randwrite"):
        bd, bb = med[("backing, direct", op)][0], med[("backing, page cache", op)][0]
        for name in [*FLOWS, *BASELINES]:
            iops, p99 = med[(name, op)]
            print(f"| {name} | {op} | {iops:,.0f} | {p99:,.0f} | {iops / bd:.2f} | {iops / bb:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--size", default="256M")
    ap.add_argument("--jobs", default="1,2", help="fio numjobs settings, comma-separated")
    ap.add_argument(
        "--fuse-transport",
        choices=("auto", "uring", "dev"),
        default="auto",
        help="lachesis-fs --fuse-transport; uring switches the kernel's enable_uring on for the run",
    )
    args = ap.parse_args()
    uring_param = Path("/sys/module/fuse/parameters/enable_uring")
    uring_was = uring_param.read_text().strip() if uring_param.exists() else None
    if args.fuse_transport == "uring" and uring_was is not None:
        uring_param.write_text("Y")
    print(
        f"FUSE transport: {args.fuse_transport}; load average {os.getloadavg()[0]:.1f} at the start",
        file=sys.stderr,
    )
    work = Path(tempfile.mkdtemp(prefix="lachesis-datapath-", dir="/var/tmp"))
    backing, mnt, ep = work / "backing", work / "mnt", work / "ep"
    for d in (backing, mnt, ep):
        d.mkdir()
    rules = [r(ep) for _, r in FLOWS.values() if r]
    (work / "rules.json").write_text(json.dumps({"rules": rules, "stages": STAGES}))
    log = (work / "fs.log").open("w")
    fs = subprocess.Popen(
        [
            args.fs_bin,
            "mount",
            "--backing",
            str(backing),
            "--mountpoint",
            str(mnt),
            "--rules",
            str(work / "rules.json"),
            "--device",
            f"flash0={work / 'cache.img'}:768MiB",
            "--fuse-transport",
            args.fuse_transport,
        ],
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.time() + 10
        while not os.path.ismount(mnt):
            if fs.poll() is not None or time.time() > deadline:
                sys.exit(f"lachesis-fs did not mount: {(work / 'fs.log').read_text()}")
            time.sleep(0.05)
        (backing / "direct").mkdir()
        for d, _ in FLOWS.values():
            (mnt / d).mkdir()
        for jobs in [int(j) for j in args.jobs.split(",")]:
            table(args, jobs, mnt, backing)
    finally:
        fs.send_signal(signal.SIGTERM)
        try:
            fs.wait(timeout=20)
        except subprocess.TimeoutExpired:
            fs.kill()
        # Unconditionally: after Ctrl-C the daemon may be gone, and ismount() says False
        # for a mount whose daemon died (ENOTCONN), which would leave the mount behind.
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        if uring_was is not None:
            uring_param.write_text(uring_was)
        print(f"load average {os.getloadavg()[0]:.1f} at the end", file=sys.stderr)


if __name__ == "__main__":
    main()
