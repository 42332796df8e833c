#!/usr/bin/env python3
"""FairyWREN vs Kangaroo on the simulated FDP SSD: the same workload, flash and device for
both, through lachesis-cachebench. Prints Markdown on stdout (progress on stderr) and draws
docs/benchmarks/fairywren-<name>.png (miss ratio vs flash writes over a sweep of flash sizes).

Total flash writes are media bytes per byte of objects admitted: ALWA (engine bytes written /
application bytes set) × DLWA (the simulator's media / host bytes).

Environment: CACHEBENCH (the binary), ROOT (the repository), SCALE (default 1), RUNS
(repetitions per headline row, medians reported; default 3).
"""
import json
import os
import statistics
import subprocess
import sys

CACHEBENCH = os.environ["CACHEBENCH"]
ROOT = os.environ["ROOT"]
SCALE = float(os.environ.get("SCALE", "1"))
RUNS = int(os.environ.get("RUNS", "3"))
# (label, cachebench flags): both engines with the papers' parameters (log 5% of flash,
# threshold 2, FairyWREN sets 4 KiB hot + 4 KiB cold), both with a 10% log (same flags for
# both), and FairyWREN with §5.4.4's 16 KiB sets (4 KiB hot + 12 KiB cold) at 5% and 10%.
ENGINES = [("kangaroo", dict(engine="kangaroo")), ("fairywren", dict(engine="fairywren")),
           ("kangaroo log 10%", dict(engine="kangaroo", log_fraction=0.1)),
           ("fairywren log 10%", dict(engine="fairywren", log_fraction=0.1)),
           ("fairywren 16 KiB sets", dict(engine="fairywren", cold_pages=3)),
           ("fairywren 16 KiB sets log 10%", dict(engine="fairywren", cold_pages=3, log_fraction=0.1))]


def ru_for(flash_mib):
    """Reclaim unit (= FairyWREN's erase unit): 1/128 of the flash, at least 64 KiB."""
    return max(64, int(flash_mib * 1024 / 128) // 4 * 4)


def bench(seed=1, **flags):
    flags.setdefault("ru_kib", ru_for(flags["flash_mib"]))
    cmd = [CACHEBENCH, "--json", "-q", "--seed", str(seed)]
    for k, v in flags.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    print("  $ " + " ".join(cmd[1:]), file=sys.stderr)
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    r["writes"] = r["alwa"] * r["dlwa"]
    # Shown relative to the repository (the shared traces are ../shared/traces from there).
    shown = " ".join(cmd[1:]).replace(os.path.join(ROOT, ""), "")
    r["command"] = "lachesis-cachebench " + shown
    return r


def median_run(**flags):
    runs = [bench(seed=s, **flags) for s in range(1, RUNS + 1)]
    med = {k: statistics.median(r[k] for r in runs) for k in
           ["miss_ratio", "alwa", "dlwa", "writes", "media_bytes_per_request", "dram_bits_per_object",
            "gets_per_s", "sets_per_s"]}
    med["command"] = runs[0]["command"].replace(" --seed 1", "")
    med["wrong_values"] = sum(r["wrong_values"] for r in runs)
    return med


def side_by_side(title, **flags):
    print(f"#### {title}\n")
    rows = {label: dict(median_run(**e, **flags), label=label) for label, e in ENGINES}
    print("| engine | miss ratio | ALWA | DLWA | flash writes (ALWA × DLWA) | media B/request | DRAM bits/object | gets/s | sets/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for e, r in rows.items():
        print(f"| {e} | {r['miss_ratio']:.4f} | {r['alwa']:.2f} | {r['dlwa']:.2f} | {r['writes']:.2f} | "
              f"{r['media_bytes_per_request']:.0f} | {r['dram_bits_per_object']:.1f} | {r['gets_per_s']:.0f} | {r['sets_per_s']:.0f} |")
    print()
    for label, f in rows.items():
        if label.startswith("fairywren"):
            k = rows["kangaroo log 10%" if "log 10%" in label else "kangaroo"]
            print(f"- {label} vs {k['label']}: **{k['writes'] / f['writes']:.1f}× less** written per byte admitted, "
                  f"{k['media_bytes_per_request'] / f['media_bytes_per_request']:.1f}× fewer media bytes per request, "
                  f"miss ratio {f['miss_ratio'] - k['miss_ratio']:+.4f} from Kangaroo's")
    print(f"\nWrong values: {sum(r['wrong_values'] for r in rows.values())}. Medians of {RUNS} seeds.\n")
    print("```sh")
    for label, _ in ENGINES:
        print(rows[label]["command"])
    print("```\n")
    return rows


def sweep(name, title, flash_sizes, **flags):
    runs = []
    print(f"#### {title}: flash sweep\n")
    print("| flash MiB | engine | miss ratio | flash writes | media B/request |")
    print("|---|---|---|---|---|")
    for mib in flash_sizes:
        for label, e in ENGINES:
            r = bench(flash_mib=mib, **e, **flags)
            r["label"] = f"{label}, {mib} MiB"
            runs.append(r)
            print(f"| {mib} | {label} | {r['miss_ratio']:.4f} | {r['writes']:.2f} | {r['media_bytes_per_request']:.0f} |")
    jsonl = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairywren-{name}.jsonl")
    with open(jsonl, "w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    png = os.path.join(ROOT, "docs", "benchmarks", f"fairywren-{name}.png")
    subprocess.run(["cargo", "bench", "-q", "-p", "lachesis-cache", "--bench", "tradeoff_plot", "--",
                    jsonl, png, title, "--by-engine"], check=True, cwd=os.path.join(ROOT, "agents"), stdout=sys.stderr)
    print(f"\n![{title}](fairywren-{name}.png)\n")


def main(sections):
    n, reqs = int(400_000 * SCALE), int(2_000_000 * SCALE)
    flash = max(16, int(128 * SCALE))
    tiny = dict(objects=n, requests=reqs, zipf=0.9, sizes="meta")
    if "tiny" in sections:
        print(f"### Synthetic tiny objects\n\n{n} objects, Zipf 0.9, Meta-like sizes, {reqs} look-aside "
              f"requests, first 25% not measured, 100% utilisation, 7% device OP.\n")
        side_by_side(f"{flash} MiB flash", flash_mib=flash, **tiny)
        sweep("tiny", "Synthetic tiny objects", [max(8, int(m * SCALE)) for m in (32, 64, 128, 256)], **tiny)
    if "trace" in sections:
        traces = os.path.join(ROOT, "..", "shared", "traces")
        for t, limit in [("arc/P3.lis.zst", int(2_000_000 * SCALE)), ("arc/OLTP.lis.zst", 0)]:
            path = os.path.join(traces, t)
            if not os.path.exists(path):
                print(f"`../shared/traces/{t}` absent: skipped.\n")
                continue
            tf = max(16, int(64 * SCALE))
            print(f"### Block trace `../shared/traces/{t}`, keys as tiny objects\n\nEach block is an object "
                  f"with a Meta-like size drawn from its key{f'; first {limit} references' if limit else ''}.\n")
            flags = dict(trace=path, sizes="meta")
            if limit:
                flags["limit"] = limit
            side_by_side(f"{tf} MiB flash", flash_mib=tf, **flags)
            if t.startswith("arc/P3"):
                sweep("p3", "ARC P3 keys as tiny objects", [max(8, int(m * SCALE)) for m in (16, 32, 64, 128)], **flags)


if __name__ == "__main__":
    main(sys.argv[1:] or ["tiny", "trace"])
