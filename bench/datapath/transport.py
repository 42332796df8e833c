"""What the FUSE transport costs per request: `/dev/fuse` against FUSE over io_uring.

Mounts `fusering-probe` (agents/fusering: one file whose bytes are computed, writes dropped, no
IO behind it) once per transport and runs the same fio jobs on it, the transports alternating
within each run (the first one swaps from run to run), so what differs is the path a request
takes between the kernel and the daemon. Needs root, fio, and a kernel with FUSE over io_uring
(6.14+); sets /sys/module/fuse/parameters/enable_uring to Y for the run and puts it back.

    python3 bench/datapath/transport.py --probe-bin agents/target/release/fusering-probe \\
        --runs 3 --seconds 4 --jobs 1,4 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import fio_side  # noqa: E402

PARAM = Path("/sys/module/fuse/parameters/enable_uring")
TRANSPORTS = ("dev", "uring")
OPS = ("randread", "randwrite")


def mounted_run(args, transport: str, jobs_list: list[int]) -> tuple[dict, dict]:
    """fio results {(op, jobs): side} on a probe mounted with `transport`, and its counters."""
    with tempfile.TemporaryDirectory(prefix="fusering-") as mnt:
        probe = subprocess.Popen(
            [args.probe_bin, "--mountpoint", mnt, "--transport", transport, "--size", str(args.file_bytes)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert probe.stdout is not None
            if probe.stdout.readline().strip() != "ready":
                raise SystemExit(f"fusering-probe ({transport}) did not mount")
            results = {}
            for op in OPS:
                for jobs in jobs_list:
                    results[(op, jobs)] = fio_side(Path(mnt) / "data", op, args, jobs)
        finally:
            probe.send_signal(signal.SIGTERM)
            out, _ = probe.communicate(timeout=30)
        counters = json.loads(out.strip().splitlines()[-1])
    if transport == "uring" and (counters["ring_error"] or counters["dev_requests"] > counters["ring_requests"]):
        raise SystemExit(f"io_uring was not the path: {counters}")
    return results, counters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--jobs", default="1,4")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of Markdown")
    args = ap.parse_args()
    args.size = "256M"  # the span fio's random offsets cover
    args.file_bytes = 1 << 30
    jobs_list = [int(j) for j in args.jobs.split(",")]
    if not PARAM.exists():
        raise SystemExit(f"{PARAM} is missing: this kernel has no FUSE over io_uring")
    old = PARAM.read_text().strip()
    PARAM.write_text("Y")
    load_start = os.getloadavg()[0]
    samples: dict[tuple[str, str, int], list[dict]] = {}
    try:
        for run in range(args.runs):
            order = TRANSPORTS if run % 2 == 0 else TRANSPORTS[::-1]
            for t in order:
                print(f"run {run + 1}/{args.runs}: {t}", file=sys.stderr)
                results, _ = mounted_run(args, t, jobs_list)
                for (op, jobs), side in results.items():
                    samples.setdefault((t, op, jobs), []).append(side)
    finally:
        PARAM.write_text(old)
    load_end = os.getloadavg()[0]

    def med(t: str, op: str, jobs: int, f) -> float:
        return statistics.median(f(s) for s in samples[(t, op, jobs)])

    rows = []
    for op in OPS:
        for jobs in jobs_list:
            row = {"op": op, "jobs": jobs}
            for t in TRANSPORTS:
                row[f"{t}_iops"] = med(t, op, jobs, lambda s: s["iops"])
                row[f"{t}_mean_us"] = med(t, op, jobs, lambda s: s["clat_ns"]["mean"] / 1000)
                row[f"{t}_p99_us"] = med(t, op, jobs, lambda s: s["clat_ns"]["percentile"]["99.000000"] / 1000)
            row["uring_over_dev"] = row["uring_iops"] / row["dev_iops"]
            rows.append(row)
    if args.json:
        print(json.dumps({"runs": args.runs, "seconds": args.seconds, "load": [load_start, load_end], "rows": rows}))
        return
    print(
        f"fio 4 KiB psync O_DIRECT on `fusering-probe`, {args.seconds} s per run (+1 s ramp), "
        f"medians of {args.runs} runs, transports alternating; load average {load_start:.1f} → {load_end:.1f}\n"
    )
    print(
        "| op | jobs | /dev/fuse IOPS | io_uring IOPS | io_uring / dev | mean µs dev | mean µs io_uring | p99 µs dev | p99 µs io_uring |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['op']} | {r['jobs']} | {r['dev_iops']:,.0f} | {r['uring_iops']:,.0f} | {r['uring_over_dev']:.2f} "
            f"| {r['dev_mean_us']:.1f} | {r['uring_mean_us']:.1f} | {r['dev_p99_us']:.0f} | {r['uring_p99_us']:.0f} |"
        )


if __name__ == "__main__":
    main()
