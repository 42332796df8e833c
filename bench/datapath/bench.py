"""fio 4 KiB random IO on lachesis-fs mounts vs the backing file system, medians of runs.

Each FUSE transport asked for (`--fuse-transport dev,uring`) gets its own mount, and every run
measures every flow on every mount and both baselines in turn, so the transports are compared
under the same machine state. `--json FILE` keeps every sample (with the machine's load average
and the stage's hit ratio over that sample) for `plot.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Flow:
    directory: str  # in the mount's namespace
    rule: object = None  # (endpoint dir) -> rule, or None for passthrough
    stage: str | None = None  # the stage whose hit ratio the flow reports


FLOWS = {
    "passthrough": Flow("pt"),
    "user-space (endpoint)": Flow(
        "user",
        lambda ep: {
            "name": "user",
            "priority": 10,
            "match": {"path_prefix": "/user"},
            "detours": [{"what": "io", "to": {"kind": "file", "target": str(ep)}}],
        },
    ),
    # The file (--size) fits in the 512 MiB stages: fio lays it out through the mount, so the
    # write-through stage holds it and reads are hits.
    "cache stage (DRAM engine, hits)": Flow(
        "cache", lambda ep: to_stage("cache", "/cache", "cache/dram"), "cache/dram"
    ),
    "cache stage (flash engine, hits)": Flow(
        "flash", lambda ep: to_stage("flash", "/flash", "cache/flash"), "cache/flash"
    ),
    # A 16 MiB stage in front of the same file: nearly every read misses (and is admitted).
    "cache stage (flash engine, misses)": Flow(
        "miss", lambda ep: to_stage("miss", "/miss", "cache/miss"), "cache/miss"
    ),
}
# The stages the flows name; the flash ones live on the mount's device (--device).
STAGES = [
    cache_stage("cache/dram", "dram"),
    cache_stage("cache/flash", "loc"),
    cache_stage("cache/miss", "loc", 16 << 20),
]


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


def fio(path: Path, rw: str, args, jobs: int, direct: int = 1) -> tuple[float, float]:
    """(IOPS, p99 latency in microseconds) of one fio run."""
    side = fio_side(path, rw, args, jobs, direct)
    return side["iops"], side["clat_ns"]["percentile"]["99.000000"] / 1000


# The buffered baseline keeps the page cache warm (fio would drop it at start): the bound of
# any flow served from memory. The switch honours O_DIRECT (fio here asks for it), so the
# user-space flows' backing and endpoint IO compares with the direct baseline.
BASELINES = {"backing, direct": 1, "backing, page cache": 0}


@dataclass
class Mount:
    """One lachesis-fs daemon with its own backing directory, endpoint and flash device."""

    transport: str
    work: Path
    # Where the flash stages' device file lives (default: beside the backing directory).
    cache_dir: Path | None = None
    proc: subprocess.Popen | None = None
    log: object = None

    @property
    def mnt(self) -> Path:
        return self.work / "mnt"

    @property
    def stats_file(self) -> Path:
        return self.work / "stats.json"

    def start(self, fs_bin: str) -> None:
        backing, ep = self.work / "backing", self.work / "ep"
        for d in (backing, self.mnt, ep):
            d.mkdir(parents=True)
        rules = [f.rule(ep) for f in FLOWS.values() if f.rule]
        (self.work / "rules.json").write_text(json.dumps({"rules": rules, "stages": STAGES}))
        self.log = (self.work / "fs.log").open("w")
        self.proc = subprocess.Popen(
            [
                fs_bin,
                "mount",
                "--backing",
                str(backing),
                "--mountpoint",
                str(self.mnt),
                "--rules",
                str(self.work / "rules.json"),
                "--device",
                f"flash0={(self.cache_dir or self.work) / f'cache-{self.transport}.img'}:768MiB",
                "--fuse-transport",
                self.transport,
                "--stats",
                str(self.stats_file),
            ],
            stdout=self.log,
            stderr=self.log,
        )
        deadline = time.time() + 20
        while not os.path.ismount(self.mnt) or not self.stats_file.exists():
            if self.proc.poll() is not None or time.time() > deadline:
                sys.exit(f"lachesis-fs ({self.transport}) did not mount: {(self.work / 'fs.log').read_text()}")
            time.sleep(0.05)
        for f in FLOWS.values():
            (self.mnt / f.directory).mkdir()
        got = self.stats()["fuse"]["transport"]
        if got != self.transport:
            sys.exit(f"asked for FUSE transport {self.transport}, the mount runs {got}")

    def stats(self) -> dict:
        return json.loads(self.stats_file.read_text())

    def stage_counts(self) -> dict[str, tuple[int, int]]:
        """(hits, misses) per stage, from a snapshot taken after this call began: the daemon
        writes snapshot n + 2 only after a reader saw n."""
        first = self.stats()["snapshot"]
        while (s := self.stats())["snapshot"] < first + 2:
            time.sleep(0.05)
        return {st["name"]: (st["stats"]["hits"], st["stats"]["misses"]) for st in s["stages"]}

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        # Unconditionally: after Ctrl-C the daemon may be gone, and ismount() says False
        # for a mount whose daemon died (ENOTCONN), which would leave the mount behind.
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], check=False, stderr=subprocess.DEVNULL)


@dataclass
class Sample:
    jobs: int
    run: int
    transport: str  # "-" for the baselines
    flow: str
    op: str
    iops: float
    p99_us: float
    load1: float  # the machine's 1-minute load average when the sample started
    hit_ratio: float | None = None  # the flow's stage over this sample


@dataclass
class Results:
    samples: list[Sample] = field(default_factory=list)

    def median(self, jobs: int, transport: str, flow: str, op: str) -> tuple[float, float]:
        s = [x for x in self.samples if (x.jobs, x.transport, x.flow, x.op) == (jobs, transport, flow, op)]
        return statistics.median(x.iops for x in s), statistics.median(x.p99_us for x in s)

    def hit_ratio(self, jobs: int, transport: str, flow: str, op: str) -> float | None:
        s = [x.hit_ratio for x in self.samples if (x.jobs, x.transport, x.flow, x.op) == (jobs, transport, flow, op)]
        s = [h for h in s if h is not None]
        return statistics.median(s) if s else None


def measure(args, jobs: int, mounts: list[Mount], results: Results) -> None:
    cases: list[tuple[str, str, Path, int, Mount | None]] = []
    for f_name, f in FLOWS.items():
        for m in mounts:
            cases.append((m.transport, f_name, m.mnt / f.directory / "f", 1, m))
    backing = mounts[0].work / "backing" / "direct"
    backing.mkdir(exist_ok=True)
    cases += [("-", b, backing / "f", direct, None) for b, direct in BASELINES.items()]
    total = len(cases) * 2 * args.runs
    done = 0
    for run in range(args.runs):
        for op in ("randread", "randwrite"):
            for transport, name, path, direct, m in cases:
                stage = FLOWS[name].stage if name in FLOWS else None
                before = m.stage_counts() if (m and stage) else None
                load1 = os.getloadavg()[0]
                iops, p99 = fio(path, op, args, jobs, direct)
                hit_ratio = None
                if before is not None and op == "randread":
                    after = m.stage_counts()
                    h = after[stage][0] - before[stage][0]
                    n = h + after[stage][1] - before[stage][1]
                    hit_ratio = h / n if n else None
                results.samples.append(Sample(jobs, run, transport, name, op, iops, p99, load1, hit_ratio))
                done += 1
                print(
                    f"\r[{done}/{total}] {jobs} job(s), run {run + 1}: {op} {name} {transport}" + " " * 20,
                    end="",
                    file=sys.stderr,
                    flush=True,
                )
    print(file=sys.stderr)


def table(args, jobs: int, transports: list[str], results: Results) -> None:
    loads = [x.load1 for x in results.samples if x.jobs == jobs]
    print(f"\n### {jobs} fio job(s)\n")
    print(
        f"fio 4 KiB, psync, {jobs} job(s) on one {args.size} file, {args.seconds} s per run (+1 s ramp), "
        f"median of {args.runs} runs; 1-minute load average {min(loads):.1f}-{max(loads):.1f} over the samples. "
        "Flows on the mount use direct=1; the baselines run on the backing directory without FUSE. "
        "Ratios are IOPS / `backing, direct` of the same table; hit ratio is the flow's stage over its read samples.\n"
    )
    cols = " | ".join(f"{t} IOPS | {t} p99 µs | {t} / direct" for t in transports)
    print(f"| flow | op | {cols} | hit ratio |")
    print("|---|---|" + "---:|---:|---:|" * len(transports) + "---:|")
    for op in ("randread", "randwrite"):
        bd = results.median(jobs, "-", "backing, direct", op)[0]
        for name in FLOWS:
            cells = []
            for t in transports:
                iops, p99 = results.median(jobs, t, name, op)
                cells.append(f"{iops:,.0f} | {p99:,.0f} | {iops / bd:.2f}")
            hrs = [results.hit_ratio(jobs, t, name, op) for t in transports]
            hr = "/".join(f"{h:.2f}" for h in hrs if h is not None) or "-"
            print(f"| {name} | {op} | {' | '.join(cells)} | {hr} |")
        for name in BASELINES:
            iops, p99 = results.median(jobs, "-", name, op)
            cells = [f"{iops:,.0f} | {p99:,.0f} | {iops / bd:.2f}"] + ["| |"] * (len(transports) - 1)
            print(f"| {name} | {op} | {' | '.join(cells)} | - |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fs-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--size", default="256M")
    ap.add_argument("--jobs", default="1,4", help="fio numjobs settings, comma-separated")
    ap.add_argument(
        "--fuse-transport",
        default="dev,uring",
        help="comma-separated lachesis-fs --fuse-transport values (auto, uring, dev), one mount each; "
        "uring switches the kernel's enable_uring on for the run and puts it back after",
    )
    ap.add_argument("--json", type=Path, help="write every sample here, for plot.py")
    ap.add_argument(
        "--cache-device-dir",
        type=Path,
        help="directory for the flash stages' device files (default: the backing directory's disk); "
        "a faster medium models a flash cache in front of slower storage",
    )
    args = ap.parse_args()
    transports = args.fuse_transport.split(",")
    bad = [t for t in transports if t not in ("auto", "uring", "dev")]
    if bad or len(set(transports)) != len(transports):
        ap.error(f"--fuse-transport: {args.fuse_transport!r}: each of auto, uring, dev at most once")
    uring_param = Path("/sys/module/fuse/parameters/enable_uring")
    uring_was = uring_param.read_text().strip() if uring_param.exists() else None
    if "uring" in transports:
        if uring_was is None:
            sys.exit(f"--fuse-transport uring: {uring_param} is missing (kernel without FUSE over io_uring)")
        uring_param.write_text("Y")
    load_start = os.getloadavg()[0]
    print(f"FUSE transports: {', '.join(transports)}; load average {load_start:.1f} at the start", file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="lachesis-datapath-", dir="/var/tmp"))
    if args.cache_device_dir and not args.cache_device_dir.is_dir():
        ap.error(f"--cache-device-dir: {args.cache_device_dir} is not a directory")
    mounts = [Mount(t, work / t, args.cache_device_dir) for t in transports]
    results = Results()
    jobs_list = [int(j) for j in args.jobs.split(",")]
    try:
        for m in mounts:
            m.start(args.fs_bin)
        for jobs in jobs_list:
            measure(args, jobs, mounts, results)
            table(args, jobs, transports, results)
    finally:
        for m in mounts:
            m.stop()
        shutil.rmtree(work, ignore_errors=True)
        if args.cache_device_dir:
            for m in mounts:
                (args.cache_device_dir / f"cache-{m.transport}.img").unlink(missing_ok=True)
        if uring_was is not None:
            uring_param.write_text(uring_was)
        print(f"load average {os.getloadavg()[0]:.1f} at the end", file=sys.stderr)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": {"nproc": os.cpu_count(), "kernel": platform.release()},
                    "args": {
                        "runs": args.runs,
                        "seconds": args.seconds,
                        "size": args.size,
                        "jobs": jobs_list,
                        "cache_device_dir": str(args.cache_device_dir) if args.cache_device_dir else None,
                    },
                    "transports": transports,
                    "samples": [s.__dict__ for s in results.samples],
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
