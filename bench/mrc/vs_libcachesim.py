#!/usr/bin/env python3
"""lachesis-mrc against libCacheSim, same traces, same run.

For each trace, every curve is drawn over the same cache sizes (by objects,
spread linearly over the working set) by:

- libCacheSim (the PyPI package `libcachesim`): its exact simulation of LRU,
  FIFO and S3FIFO, one cache per size (`process_trace`), which is the
  reference every MAE is taken against; and its own sampled simulation (the
  reader's spatial sampler at rate R, caches scaled by R, no correction);
- lachesis-mrc (the CLI, one process per curve): exact LRU, SHARDS
  fixed-rate and fixed-size, the full simulation of each policy and the
  miniature one at rate R (the default estimator, the one without the rate
  measured on keys, and the mean of --samples samples).

Both read the same libCacheSim oracleGeneral file: the CloudPhysics trace
as it is shipped, the ARC traces converted once (each line expanded into its
blocks, as both tools' ARC readers do) into a work directory outside the
repository. Times are wall clock and CPU, end to end from that file
(reading and decoding included, for both), medians over --reps runs
(--sim-reps for the unsampled simulations, the slow ones); refs/s
is references over the time to draw the whole curve (libCacheSim simulates
one size per pass over the trace, lachesis-mrc all sizes in one pass).

    bench/mrc/vs_libcachesim.sh        # builds the CLI, runs this under uv

Prints markdown tables on stdout and progress on stderr; --json keeps every
number, --plot draws the curves (SVG). Never passes or fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"

# name -> (file under ../shared/traces, format of that file, title)
TRACE_FILES = {
    "cloudphysics": ("cloudPhysicsIO.oracleGeneral.bin", "oracle", "CloudPhysics"),
    "oltp": ("arc/OLTP.lis.zst", "arc", "ARC OLTP"),
    "p3": ("arc/P3.lis.zst", "arc", "ARC P3"),
}
POLICIES = ["lru", "fifo", "s3fifo"]
RECORD = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
assert RECORD.itemsize == 24


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------
# traces


@dataclass
class Trace:
    name: str
    title: str
    source: Path
    path: Path  # oracleGeneral, read by both tools
    references: int
    working_set: int


def arc_blocks(path: Path) -> np.ndarray:
    """Block numbers of an ARC trace (`start n ignore reqno` per line, each
    line `n` references `start..start+n`)."""
    text = subprocess.run(["zstd", "-dcq", str(path)], check=True, capture_output=True).stdout
    fields = np.array(text.split(), dtype=np.int64)
    if fields.size % 4:
        raise SystemExit(f"{path}: lines of 4 fields expected")
    rows = fields.reshape(-1, 4)
    start, n = rows[:, 0], rows[:, 1]
    total = int(n.sum())
    first = np.repeat(start, n)
    # Offset of each reference within its line.
    ends = np.cumsum(n)
    offset = np.arange(total, dtype=np.int64) - np.repeat(ends - n, n)
    return (first + offset).astype(np.uint64)


def prepare(name: str, workdir: Path) -> Trace:
    rel, fmt, title = TRACE_FILES[name]
    source = TRACES / rel
    if fmt == "oracle":
        path = source
        ids = np.fromfile(source, dtype=RECORD)["id"]
    else:
        path = workdir / (Path(rel).name.split(".")[0] + ".oracleGeneral.bin")
        if path.exists() and path.stat().st_mtime >= source.stat().st_mtime:
            ids = np.fromfile(path, dtype=RECORD)["id"]
        else:
            log(f"converting {source} -> {path}")
            ids = arc_blocks(source)
            rec = np.zeros(ids.size, dtype=RECORD)
            rec["id"] = ids
            rec["size"] = 512
            rec["next"] = -1
            tmp = path.with_suffix(".tmp")
            rec.tofile(tmp)
            tmp.rename(path)
    return Trace(name, title, source, path, int(ids.size), int(np.unique(ids).size))


def linear_sizes(working_set: int, n: int) -> list[int]:
    """lachesis_mrc::curve::sizes_over(.., Linear)."""
    sizes = sorted({max(1, working_set * i // n) for i in range(1, n + 1)})
    return sizes


# --------------------------------------------------------------------------
# measurements


@dataclass
class Result:
    tool: str
    label: str
    policy: str  # curve it is compared with
    sizes: list[int]
    miss_ratio: list[float]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    notes: str = ""

    def mae(self, ref: "Result") -> float:
        pairs = [(a, b) for a, b in zip(self.miss_ratio, ref.miss_ratio) if not math.isnan(a)]
        return sum(abs(a - b) for a, b in pairs) / len(pairs)

    def max_err(self, ref: "Result") -> float:
        return max(abs(a - b) for a, b in zip(self.miss_ratio, ref.miss_ratio) if not math.isnan(a))


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_cli(
    cli: str, trace: Trace, sizes: list[int], extra: list[str], reps: int
) -> tuple[list[dict], list[float], list[float]]:
    cmd = [cli, str(trace.path), "-f", "oracle", "-q", "--cache-sizes", ",".join(map(str, sizes)), *extra]
    walls, cpus, curves = [], [], None
    for _ in range(reps):
        c0, t0 = children_cpu(), time.perf_counter()
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        walls.append(time.perf_counter() - t0)
        cpus.append(children_cpu() - c0)
        got = json.loads(out)["curves"]
        if curves is not None and [c["miss_ratio"] for c in got] != [c["miss_ratio"] for c in curves]:
            raise SystemExit(f"{cmd}: curves differ between runs")
        curves = got
    return curves, walls, cpus


def lachesis_runs(
    cli: str, trace: Trace, sizes: list[int], rate: float | None, smax: int, reps: int, samples: int, sim_reps: int
) -> list[Result]:
    """rate None: the curves that do not sample; else the sampled ones."""
    out: list[Result] = []

    def add(label: str, policy: str, extra: list[str], notes: str = "") -> None:
        log(f"  lachesis-mrc {label}")
        n = sim_reps if label.startswith("full simulation") else reps
        curves, walls, cpus = run_cli(cli, trace, sizes, extra, n)
        (c,) = curves
        out.append(Result("lachesis-mrc", label, policy, sizes, c["miss_ratio"], walls, cpus, notes))

    if rate is None:
        add("exact LRU", "lru", ["-a", "exact"])
        for p in POLICIES:
            add(f"full simulation {p}", p, ["-a", "full-sim", "--policy", p])
        return out
    add(f"SHARDS fixed-rate R={rate}", "lru", ["-a", "shards-fixed-rate", "--rate", str(rate)])
    add(f"SHARDS fixed-size Smax={smax}", "lru", ["-a", "shards-fixed-size", "--smax", str(smax)])
    for p in POLICIES:
        mini = ["-a", "minisim", "--policy", p, "--rate", str(rate)]
        add(f"minisim {p} R={rate}", p, mini)
        add(f"minisim {p} R={rate}, rate not from keys", p, [*mini, "--key-rate", "off"])
        if samples > 1:
            add(f"minisim {p} R={rate}, mean of {samples} samples", p, [*mini, "--samples", str(samples)])
    return out


def lcs_reader(lcs, trace: Trace, rate: float | None):
    """A reader by objects (sizes ignored), sampled at `rate` if given. The
    sampler is returned too: the reader holds only a raw pointer to it, so
    it must outlive the reader (else a segfault)."""
    sampler = None
    if rate is not None:
        from libcachesim.libcachesim_python import Sampler  # not re-exported by the package

        sampler = Sampler(rate, lcs.SamplerType.SPATIAL_SAMPLER)
    params = lcs.ReaderInitParam(ignore_obj_size=True, sampler=sampler)
    return lcs.TraceReader(str(trace.path), lcs.TraceType.ORACLE_GENERAL_TRACE, params), sampler


LCS_CLASSES = {"lru": "LRU", "fifo": "FIFO", "s3fifo": "S3FIFO"}
# libCacheSim's S3FIFO aborts below 10 objects (its small queue would be empty).
LCS_MIN_SIZE = {"lru": 1, "fifo": 1, "s3fifo": 10}


def hashpower(size: int) -> int:
    """libCacheSim's hash table sized to the cache (it grows when full):
    the package's default, 2^24 buckets, costs more to allocate and clear
    than simulating these traces."""
    return min(24, max(12, math.ceil(math.log2(size + 1))))


def libcachesim_runs(trace: Trace, sizes: list[int], rate: float | None, reps: int) -> list[Result]:
    """rate None: the exact simulations; else the spatially sampled ones."""
    import libcachesim as lcs

    out: list[Result] = []
    reader, _sampler = lcs_reader(lcs, trace, rate)
    for p in POLICIES:
        cls = getattr(lcs, LCS_CLASSES[p])
        label = f"spatial sampling {p} R={rate}" if rate else f"exact simulation {p}"
        log(f"  libCacheSim {label}")
        walls, cpus, curve = [], [], None
        for _ in range(reps):
            mr = []
            t0, c0 = time.perf_counter(), time.process_time()
            for c in sizes:
                size = max(1, round(c * rate)) if rate else c
                if size < LCS_MIN_SIZE[p]:
                    mr.append(float("nan"))
                    continue
                cache = cls(size, default_ttl=0, hashpower=hashpower(size))
                mr.append(cache.process_trace(reader)[0])
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            curve = mr
        notes = "no correction; caches of round(C R) objects" if rate else ""
        out.append(Result("libCacheSim", label, p, sizes, curve, walls, cpus, notes))
    return out


# --------------------------------------------------------------------------
# report


def machine() -> str:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = open("/proc/loadavg").read().split()[:3]
    return f"{os.cpu_count()} cores, {model}, {platform.platform()}, {time.strftime('%Y-%m-%d', time.gmtime())}, load {' '.join(load)}"


def fmt_rate(refs: int, secs: list[float]) -> str:
    return f"{refs / statistics.median(secs) / 1e6:.2f}" if secs else ""


def table(trace: Trace, rate: float, results: list[Result], refs_by: dict[str, Result]) -> str:
    lines = [
        f"### {trace.title} (`{trace.source.name}`), R = {rate}: {trace.references} references, {trace.working_set} distinct keys, {len(results[0].sizes)} sizes",
        "",
        "| tool | curve | M refs/s (wall) | M refs/s (CPU) | MAE vs libCacheSim exact | max error |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        ref = refs_by[r.policy]
        mae = "(reference)" if r is ref else f"{r.mae(ref):.4f}"
        mx = "" if r is ref else f"{r.max_err(ref):.4f}"
        lines.append(
            f"| {r.tool} | {r.label} | {fmt_rate(trace.references, r.wall)} | {fmt_rate(trace.references, r.cpu)} | {mae} | {mx} |"
        )
    return "\n".join(lines)


COLORS = {"lru": "#1f77b4", "fifo": "#d62728", "s3fifo": "#2ca02c"}


def svg_plot(path: Path, panels: list[tuple[Trace, float, list[Result]]]) -> None:
    """One panel per trace: libCacheSim exact (solid), lachesis-mrc full
    simulation (circles), lachesis-mrc minisim (dashed), libCacheSim
    spatial sampling (dotted), per policy."""
    w, h, pad = 420, 300, 48
    cols = min(2, len(panels))
    rows = (len(panels) + cols - 1) // cols
    total_w, total_h = w * cols, h * rows + 80
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{total_w}" height="{total_h}" fill="white"/>',
    ]
    for i, (trace, rate, results) in enumerate(panels):
        x0, y0 = (i % cols) * w, (i // cols) * h
        ws = trace.working_set

        def X(s: float) -> float:
            return x0 + pad + (w - pad - 12) * s / ws

        def Y(m: float) -> float:
            return y0 + 20 + (h - 20 - pad) * (1 - m)

        parts.append(
            f'<text x="{x0 + w / 2}" y="{y0 + 14}" text-anchor="middle" font-weight="bold">{trace.title}, R = {rate}</text>'
        )
        parts.append(
            f'<rect x="{x0 + pad}" y="{y0 + 20}" width="{w - pad - 12}" height="{h - 20 - pad}" fill="none" stroke="#888"/>'
        )
        for t in range(0, 11, 2):
            y = Y(t / 10)
            parts.append(f'<text x="{x0 + pad - 4}" y="{y + 4}" text-anchor="end">{t / 10:.1f}</text>')
            parts.append(f'<line x1="{x0 + pad}" x2="{x0 + w - 12}" y1="{y}" y2="{y}" stroke="#eee"/>')
        for t in range(0, 5):
            s = ws * t / 4
            parts.append(f'<text x="{X(s)}" y="{y0 + h - pad + 14}" text-anchor="middle">{s / 1000:.0f}K</text>')
        parts.append(f'<text x="{x0 + w / 2}" y="{y0 + h - pad + 30}" text-anchor="middle">cache size (objects)</text>')
        if i % cols == 0:
            parts.append(
                f'<text x="12" y="{y0 + h / 2}" transform="rotate(-90 12 {y0 + h / 2})" text-anchor="middle">miss ratio</text>'
            )
        for r in results:
            style = None
            if r.tool == "libCacheSim" and r.label.startswith("exact"):
                style = 'stroke-width="2"'
            elif r.tool == "libCacheSim":
                style = 'stroke-width="1.2" stroke-dasharray="1,3"'
            elif r.label == f"minisim {r.policy} R={rate}":
                style = 'stroke-width="1.2" stroke-dasharray="6,3"'
            elif r.label.startswith("full simulation"):
                for s, m in zip(r.sizes, r.miss_ratio):
                    parts.append(
                        f'<circle cx="{X(s):.1f}" cy="{Y(m):.1f}" r="2.5" fill="none" stroke="{COLORS[r.policy]}"/>'
                    )
                continue
            if style is None:
                continue
            pts = " ".join(f"{X(s):.1f},{Y(m):.1f}" for s, m in zip(r.sizes, r.miss_ratio) if not math.isnan(m))
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[r.policy]}" {style}/>')
    # legend
    y = h * rows + 20
    x = 10
    for p, c in COLORS.items():
        parts.append(
            f'<line x1="{x}" x2="{x + 20}" y1="{y}" y2="{y}" stroke="{c}" stroke-width="2"/><text x="{x + 24}" y="{y + 4}">{p}</text>'
        )
        x += 80
    legend = [
        ('stroke-width="2"', "libCacheSim exact"),
        (None, "lachesis-mrc full simulation"),
        ('stroke-dasharray="6,3"', "lachesis-mrc minisim (one sample, default)"),
        ('stroke-dasharray="1,3"', "libCacheSim spatial sampling"),
    ]
    for j, (style, text) in enumerate(legend):
        x = 10 + (j % 2) * w
        ly = y + 18 * (1 + j // 2)
        if style is None:
            parts.append(f'<circle cx="{x + 10}" cy="{ly}" r="2.5" fill="none" stroke="black"/>')
        else:
            parts.append(f'<line x1="{x}" x2="{x + 20}" y1="{ly}" y2="{ly}" stroke="black" {style}/>')
        parts.append(f'<text x="{x + 24}" y="{ly + 4}">{text}</text>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--cli",
        default=str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "agents" / "target")) / "release" / "lachesis-mrc"),
    )
    ap.add_argument("--traces", default="cloudphysics,cloudphysics@0.1,oltp,p3", help="name[@rate],... (rate: --rate)")
    ap.add_argument("--rate", type=float, default=0.01)
    ap.add_argument("--smax", type=int, default=8192)
    ap.add_argument("--sizes", type=int, default=24)
    ap.add_argument(
        "--reps", type=int, default=5, help="runs of every lachesis-mrc curve and of libCacheSim's sampled ones"
    )
    ap.add_argument("--sim-reps", type=int, default=1, help="runs of the unsampled simulations, both tools' (slow)")
    ap.add_argument("--samples", type=int, default=4, help="also minisim as the mean of this many samples (0/1: not)")
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "lachesis-bench-mrc"))
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--plot", help="draw the curves into this SVG")
    args = ap.parse_args()

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    import libcachesim

    print(f"# machine: {machine()}")
    print(f"# libcachesim {libcachesim.__version__}; lachesis-mrc {args.cli}")
    print(f"# command: {' '.join(sys.argv)}")
    print()
    panels, dump = [], []
    exact: dict[str, tuple[Trace, list[int], list[Result]]] = {}
    for spec in args.traces.split(","):
        name, _, r = spec.partition("@")
        rate = float(r) if r else args.rate
        first = name not in exact
        if first:
            trace = prepare(name, workdir)
            sizes = linear_sizes(trace.working_set, args.sizes)
            log(
                f"{trace.title}: {trace.references} references, {trace.working_set} keys, sizes {sizes[0]}..{sizes[-1]}"
            )
            base = libcachesim_runs(trace, sizes, None, args.sim_reps)
            base += lachesis_runs(args.cli, trace, sizes, None, args.smax, args.reps, args.samples, args.sim_reps)
            exact[name] = (trace, sizes, base)
        trace, sizes, base = exact[name]
        log(f"{trace.title}, R={rate}")
        sampled = libcachesim_runs(trace, sizes, rate, args.reps)
        sampled += lachesis_runs(args.cli, trace, sizes, rate, args.smax, args.reps, args.samples, args.sim_reps)
        refs_by = {r.policy: r for r in base if r.tool == "libCacheSim"}
        results = (base if first else []) + sampled
        print(table(trace, rate, results, refs_by))
        print(flush=True)
        panels.append((trace, rate, base + sampled))
        dump.append(
            {
                "trace": trace.name,
                "rate": rate,
                "references": trace.references,
                "working_set": trace.working_set,
                "sizes": sizes,
                "results": [
                    {
                        "tool": r.tool,
                        "label": r.label,
                        "policy": r.policy,
                        "miss_ratio": r.miss_ratio,
                        "wall_s": r.wall,
                        "cpu_s": r.cpu,
                        "mae": None if r is refs_by[r.policy] else r.mae(refs_by[r.policy]),
                    }
                    for r in base + sampled
                ],
            }
        )
    print(f"# load at the end: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    if args.json:
        Path(args.json).write_text(json.dumps(dump, indent=1) + "\n")
    if args.plot:
        svg_plot(Path(args.plot), panels)
        log(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
