#!/usr/bin/env python3
"""Moirai §5.5.1 on this machine: a prioritised tenant beside a heavy one.

The tenant `hi` reads its file at random (4 KiB, one job, O_DIRECT, psync) while `lo` reads a
file several times larger at random with several jobs. Two data paths on one `lachesis-fs`
mount each, fresh for every run:

- shared:   both tenants' IO through one DRAM cache stage (the default caching Moirai compares
            with: lo's reads evict hi's blocks);
- isolated: hi's IO through a DRAM cache stage of its own, lo's along its old path (no rule:
            kernel passthrough), as the thesis's §5.3.1 builds it;
- isolated+qos: as isolated, and hi's misses and lo's IO through the switch's IO scheduler,
            hi's in a high-priority class and lo's in a low one (lo's IO then goes to the
            backing file from user space).

For each: hi's file is read once (the cache warms), hi runs alone, then hi runs beside lo.
Reported: hi's IOPS alone and beside, their ratio (Moirai: within 2.3% isolated, a 5x drop
shared), and lo's IOPS. Medians of --runs; the two layouts alternate which goes first.

    python3 bench/loop/priority.py --fs-bin agents/target/release/lachesis-fs
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The stage and rule shapes are the datapath benchmark's.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datapath"))
from bench import cache_stage, to_stage  # noqa: E402


def layouts(cache_bytes: int) -> dict:
    return {
        "shared": {
            "rules": [to_stage("hi", "/hi", "cache/shared"), to_stage("lo", "/lo", "cache/shared")],
            "stages": [cache_stage("cache/shared", "dram", cache_bytes)],
        },
        "isolated": {
            "rules": [to_stage("hi", "/hi", "cache/hi")],
            "stages": [cache_stage("cache/hi", "dram", cache_bytes)],
        },
        # §5.3.1 whole: hi's cache of its own and its IO served first. hi's misses and all of
        # lo's IO go through the switch's scheduler (a qos stage each, high and low); lo's IO
        # takes the user-space path to the backing file. The scheduler is after hi's cache, not
        # before it: in front, every hit waited for a slot held by one of lo's disk reads
        # (hi beside lo 0.15 of alone in a trial, 4 s runs), and a hit needs no device slot.
        "isolated+qos": {
            "rules": [
                chain("hi", "/hi", ["cache/hi", "qos/hi"]),
                chain("lo", "/lo", ["qos/lo"]),
            ],
            "stages": [
                cache_stage("cache/hi", "dram", cache_bytes),
                qos_stage("qos/hi", "high"),
                qos_stage("qos/lo", "low"),
            ],
        },
    }


def qos_stage(name: str, priority: str) -> dict:
    """A qos stage (contract kind `ratelimit`) with a priority only: a class of the switch's IO
    scheduler weighted by it (docs/policies.md, "What enforces each stage kind")."""
    return {
        "kind": "ratelimit",
        "name": name,
        "owner": None,
        "iops": None,
        "bytes_per_s": None,
        "min_bytes_per_s": None,
        "priority": priority,
    }


def chain(name: str, prefix: str, stages: list) -> dict:
    """A rule sending the IO under `prefix` through `stages`, in order."""
    rule = to_stage(name, prefix, stages[0])
    rule["detours"] = [{"what": "io", "to": {"kind": "stage", "target": s}} for s in stages]
    return rule


def fio_args(path: Path, size: str, rw: str, jobs: int, seconds: int) -> list:
    return [
        "fio",
        "--name=b",
        f"--filename={path}",
        f"--size={size}",
        f"--rw={rw}",
        "--bs=4k",
        "--direct=1",
        "--ioengine=psync",
        f"--numjobs={jobs}",
        "--group_reporting",
        "--time_based",
        f"--runtime={seconds}",
        "--randrepeat=0",
        "--invalidate=0",
        "--output-format=json",
    ]


def iops(out: str) -> float:
    return json.loads(out[out.index("{") :])["jobs"][0]["read"]["iops"]


def run_fio(args: list) -> float:
    return iops(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def mount(fs_bin: str, work: Path, layout: dict) -> tuple[subprocess.Popen, Path]:
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    (work / "rules.json").write_text(json.dumps(layout))
    log = (work / "fs.log").open("w")
    fs = subprocess.Popen(
        [fs_bin, "mount", "--backing", str(work / "backing"), "--mountpoint", str(mnt)]
        + ["--rules", str(work / "rules.json")],
        stdout=log,
        stderr=log,
    )
    for _ in range(400):
        if os.path.ismount(mnt):
            return fs, mnt
        if fs.poll() is not None:
            break
        time.sleep(0.05)
    fs.kill()
    sys.exit(f"lachesis-fs did not mount: {(work / 'fs.log').read_text()}")


def unmount(fs: subprocess.Popen, mnt: Path) -> None:
    subprocess.run(["umount", str(mnt)], check=False)
    try:
        fs.wait(timeout=30)
    except subprocess.TimeoutExpired:
        fs.kill()
        fs.wait()


def one(args, work: Path, layout: dict) -> dict:
    fs, mnt = mount(args.fs_bin, work, layout)
    try:
        hi, lo = mnt / "hi" / "f", mnt / "lo" / "f"
        # The cache warms: hi's file read once, in order.
        warm = ["fio", "--name=warm", f"--filename={hi}", f"--size={args.hi_size}", "--rw=read", "--bs=4k"]
        subprocess.run(warm + ["--direct=1", "--output-format=terse"], check=True, capture_output=True)
        alone = run_fio(fio_args(hi, args.hi_size, "randread", 1, args.seconds))
        heavy = subprocess.Popen(
            fio_args(lo, args.lo_size, "randread", args.lo_jobs, args.seconds + 3), stdout=subprocess.PIPE, text=True
        )
        time.sleep(1)  # lo under way before hi starts: a benchmark's pacing, not a test's
        beside = run_fio(fio_args(hi, args.hi_size, "randread", 1, args.seconds))
        out, _ = heavy.communicate()
        return {"alone": alone, "beside": beside, "lo": iops(out)}
    finally:
        unmount(fs, mnt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fs-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--hi-size", default="64M", help="hi's file (its working set)")
    ap.add_argument("--lo-size", default="1G", help="lo's file")
    ap.add_argument("--lo-jobs", type=int, default=4)
    ap.add_argument("--cache-mib", type=int, default=128, help="the DRAM cache stage (shared, or hi's own)")
    ap.add_argument("--json", type=Path, help="also write every run's IOPS here (bench/loop/plot.py priority reads it)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lachesis-priority-", dir="/var/tmp"))
    for d in ("backing/hi", "backing/lo"):
        (work / d).mkdir(parents=True)
    # The files are laid out on the backing directory, not through the mount.
    for name, size in (("hi", args.hi_size), ("lo", args.lo_size)):
        subprocess.run(
            ["fio", "--name=lay", f"--filename={work / 'backing' / name / 'f'}", f"--size={size}", "--rw=write"]
            + ["--bs=1M", "--direct=1", "--output-format=terse"],
            check=True,
            capture_output=True,
        )
    ls = layouts(args.cache_mib << 20)
    results: dict[str, list[dict]] = {k: [] for k in ls}
    try:
        for r in range(args.runs):
            order = list(ls) if r % 2 == 0 else list(reversed(ls))
            for name in order:
                res = one(args, work, ls[name])
                print(f"run {r + 1} {name}: {res}", file=sys.stderr, flush=True)
                results[name].append(res)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average at the end: {open('/proc/loadavg').read().split()[:3]}")
    print(
        f"\nhi: {args.hi_size} randread, 1 job; lo: {args.lo_size} randread, {args.lo_jobs} jobs; "
        f"{args.cache_mib} MiB DRAM cache stage; {args.seconds} s per fio run; medians of {args.runs}\n"
    )
    print("| layout | hi alone IOPS | hi beside lo IOPS | beside / alone | lo IOPS |")
    print("|---|---:|---:|---:|---:|")
    for name, rs in results.items():

        def med(k: str) -> float:
            return statistics.median(x[k] for x in rs)

        ratio = statistics.median(x["beside"] / x["alone"] for x in rs)
        print(f"| {name} | {med('alone'):,.0f} | {med('beside'):,.0f} | {ratio:.2f} | {med('lo'):,.0f} |")
    print(json.dumps(results), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
