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
# Kangaroo twice: ours, KLog and KSet on their own FDP placement handles (KLog's trimmed
# segments never share a reclaim unit with KSet's pages), and the paper's baseline, Kangaroo on
# a conventional (LBAD) SSD: the same simulated SSD with one handle for everything.
ENGINES = [
    ("kangaroo", dict(engine="kangaroo")),
    ("kangaroo one handle (LBAD)", dict(engine="kangaroo", handles="shared")),
    ("fairywren", dict(engine="fairywren")),
    ("kangaroo log 10%", dict(engine="kangaroo", log_fraction=0.1)),
    ("kangaroo log 10% one handle (LBAD)", dict(engine="kangaroo", log_fraction=0.1, handles="shared")),
    ("fairywren log 10%", dict(engine="fairywren", log_fraction=0.1)),
    ("fairywren 16 KiB sets", dict(engine="fairywren", cold_pages=3)),
    ("fairywren 16 KiB sets log 10%", dict(engine="fairywren", cold_pages=3, log_fraction=0.1)),
]

# The whole cache as the paper runs it (Table 4): a DRAM front, the small-object engine on 10%
# of the flash for objects under 2 KiB (its log 5% of that), the log (LOC) on the other 90% for
# larger ones; sizes `meta-whole` (§6.1's Meta trace: 95.2% of requests under 2 KiB, 60.2% of
# the bytes). The steps of Fig. 18 the engines can run, each a named configuration: Kangaroo on
# LBAD ("Log + Sets": one handle), "+Physical Sep." (the log, KLog and KSet each on their own
# placement handle: our FDP-aware Kangaroo), and FairyWREN (+nest packing +hot-cold) on its own
# handles. The naive "+WREN" port (every write into one log-structured store) and nest packing
# without the hot/cold split are not engines here.
WHOLE = [
    ("Kangaroo on LBAD (Log + Sets)", dict(engine="hybrid", small_engine="kangaroo", handles="shared")),
    (
        "Kangaroo on LBAD without discard",
        dict(engine="hybrid", small_engine="kangaroo", handles="shared", no_discard=""),
    ),
    ("Kangaroo +Physical Sep. (FDP handles)", dict(engine="hybrid", small_engine="kangaroo")),
    ("FairyWREN (+Nest packing +Hot-Cold)", dict(engine="hybrid", small_engine="fairywren")),
    ("FairyWREN one handle", dict(engine="hybrid", small_engine="fairywren", handles="shared")),
]


def ru_for(flash_mib):
    """Reclaim unit (= FairyWREN's erase unit): 1/128 of the flash, at least 64 KiB."""
    return max(64, int(flash_mib * 1024 / 128) // 4 * 4)


def whole_ru_for(flash_mib):
    """The whole cache's reclaim unit: the small-object engine's 10% of the flash is 40 units,
    as the paper's 40 GB of SOC in 1 GB zones (Table 4)."""
    return max(4, int(flash_mib * 1024 * 0.1 / 40) // 4 * 4)


def bench(seed=1, **flags):
    flags.setdefault("ru_kib", ru_for(flags["flash_mib"]))
    cmd = [CACHEBENCH, "--json", "-q", "--seed", str(seed)]
    for k, v in flags.items():
        # A switch (no_discard="") has no value.
        cmd += [f"--{k.replace('_', '-')}"] + ([str(v)] if v != "" else [])
    print("  $ " + " ".join(cmd[1:]), file=sys.stderr)
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    r["writes"] = r["alwa"] * r["dlwa"]
    # Shown relative to the repository (the shared traces are ../shared/traces from there).
    shown = " ".join(cmd[1:]).replace(os.path.join(ROOT, ""), "")
    r["command"] = "lachesis-cachebench " + shown
    return r


def median_run(**flags):
    runs = [bench(seed=s, **flags) for s in range(1, RUNS + 1)]
    med = {
        k: statistics.median(r[k] for r in runs)
        for k in [
            "miss_ratio",
            "alwa",
            "dlwa",
            "writes",
            "media_bytes_per_request",
            "dram_bits_per_object",
            "gets_per_s",
            "sets_per_s",
        ]
    }
    med["command"] = runs[0]["command"].replace(" --seed 1", "")
    med["wrong_values"] = sum(r["wrong_values"] for r in runs)
    return med


def side_by_side(title, engines=ENGINES, **flags):
    print(f"#### {title}\n")
    rows = {label: dict(median_run(**e, **flags), label=label) for label, e in engines}
    print(
        "| engine | miss ratio | ALWA | DLWA | flash writes (ALWA × DLWA) | media B/request | DRAM bits/object | gets/s | sets/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for e, r in rows.items():
        print(
            f"| {e} | {r['miss_ratio']:.4f} | {r['alwa']:.2f} | {r['dlwa']:.2f} | {r['writes']:.2f} | "
            f"{r['media_bytes_per_request']:.0f} | {r['dram_bits_per_object']:.1f} | {r['gets_per_s']:.0f} | {r['sets_per_s']:.0f} |"
        )
    print()
    for label, f in rows.items():
        if not label.lower().startswith("fairywren"):
            continue
        for k in baselines(label, rows):
            print(
                f"- {label} vs {k['label']}: **{fewer(k['writes'], f['writes'])}** written per byte admitted, "
                f"{fewer(k['media_bytes_per_request'], f['media_bytes_per_request']).replace('less', 'fewer')} media bytes per request, "
                f"miss ratio {f['miss_ratio'] - k['miss_ratio']:+.4f} from Kangaroo's"
            )
    print(f"\nWrong values: {sum(r['wrong_values'] for r in rows.values())}. Medians of {RUNS} seeds.\n")
    print("```sh")
    for label, _ in engines:
        print(rows[label]["command"])
    print("```\n")
    return rows


def fewer(kangaroo, fairywren):
    """FairyWREN's figure against Kangaroo's: "N× less" or, when it is larger, "N× more"."""
    return f"{kangaroo / fairywren:.1f}× less" if fairywren <= kangaroo else f"{fairywren / kangaroo:.1f}× more"


def baselines(label, rows):
    """The Kangaroo rows a FairyWREN row is compared with: the same log share, ours (FDP
    handles) and the paper's (LBAD); in the whole cache, every Kangaroo configuration."""
    if "kangaroo" not in rows:
        return [r for l, r in rows.items() if l.startswith("Kangaroo")]
    log = " log 10%" if "log 10%" in label else ""
    return [rows[f"kangaroo{log}"], rows[f"kangaroo{log} one handle (LBAD)"]]


def sweep(name, title, flash_sizes, engines=ENGINES, ru=ru_for, **flags):
    runs = []
    print(f"#### {title}: flash sweep\n")
    print("| flash MiB | engine | miss ratio | flash writes | media B/request |")
    print("|---|---|---|---|---|")
    for mib in flash_sizes:
        for label, e in engines:
            r = bench(flash_mib=mib, ru_kib=ru(mib), **e, **flags)
            r["label"] = f"{label}, {mib} MiB"
            runs.append(r)
            print(
                f"| {mib} | {label} | {r['miss_ratio']:.4f} | {r['writes']:.2f} | {r['media_bytes_per_request']:.0f} |"
            )
    plot(name, title, runs)


def plot(name, title, runs):
    """docs/benchmarks/fairywren-<name>.png: miss ratio vs media bytes per request, a line per
    configuration through its flash sizes."""
    jsonl = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"fairywren-{name}.jsonl")
    with open(jsonl, "w") as f:
        for r in runs:
            f.write(json.dumps(r) + "\n")
    png = os.path.join(ROOT, "docs", "benchmarks", f"fairywren-{name}.png")
    subprocess.run(
        [
            "cargo",
            "bench",
            "-q",
            "-p",
            "lachesis-cache",
            "--bench",
            "tradeoff_plot",
            "--",
            jsonl,
            png,
            title,
            "--by-engine",
        ],
        check=True,
        cwd=os.path.join(ROOT, "agents"),
        stdout=sys.stderr,
    )
    print(f"\n![{title}](fairywren-{name}.png)\n")


def main(sections):
    n, reqs = int(400_000 * SCALE), int(2_000_000 * SCALE)
    flash = max(16, int(128 * SCALE))
    tiny = dict(objects=n, requests=reqs, zipf=0.9, sizes="meta")
    if "tiny" in sections:
        print(
            f"### Synthetic tiny objects\n\n{n} objects, Zipf 0.9, Meta-like sizes, {reqs} look-aside "
            f"requests, first 25% not measured, 100% utilisation, 7% device OP.\n"
        )
        side_by_side(f"{flash} MiB flash", flash_mib=flash, **tiny)
        sweep("tiny", "Synthetic tiny objects", [max(8, int(m * SCALE)) for m in (32, 64, 128, 256)], **tiny)
    if "whole" in sections:
        wf = max(16, int(128 * SCALE))
        whole = dict(tiny, sizes="meta-whole", small_fraction=0.1, log_fraction=0.05)
        print(
            f"### Whole cache: small and large objects (Table 4's layout)\n\n{n} objects, Zipf 0.9, "
            f"sizes `meta-whole` (95.2% of keys Meta-like small objects, 4.8% of 2-64 KiB, median 3 KiB: "
            f"objects under 2 KiB are 95% of requests and 60% of the bytes, as §6.1 gives the Meta trace), "
            f"{reqs} look-aside requests, first 25% not measured. A DRAM front of 1/64 of the flash; the "
            f"small-object engine on 10% of the flash, its log 5% of that; the log of large objects on the "
            f"rest; reclaim unit = 1/40 of the small-object engine's flash (the paper's 40 zones); 100% "
            f"utilisation, 7% device OP.\n"
        )
        wflags = lambda mib: dict(whole, dram_mib=max(1, mib // 64))
        side_by_side(f"{wf} MiB flash", engines=WHOLE, flash_mib=wf, ru_kib=whole_ru_for(wf), **wflags(wf))
        runs = []
        print("#### Whole cache: flash sweep\n")
        print("| flash MiB | configuration | miss ratio | flash writes | media B/request |")
        print("|---|---|---|---|---|")
        for mib in [max(16, int(m * SCALE)) for m in (32, 64, 128, 256)]:
            for label, e in WHOLE:
                r = bench(flash_mib=mib, ru_kib=whole_ru_for(mib), **e, **wflags(mib))
                r["label"] = f"{label}, {mib} MiB"
                runs.append(r)
                print(
                    f"| {mib} | {label} | {r['miss_ratio']:.4f} | {r['writes']:.2f} | {r['media_bytes_per_request']:.0f} |"
                )
        plot("whole", "Whole cache, meta-whole sizes", runs)
    if "trace" in sections:
        traces = os.path.join(ROOT, "..", "shared", "traces")
        for t, limit in [("arc/P3.lis.zst", int(2_000_000 * SCALE)), ("arc/OLTP.lis.zst", 0)]:
            path = os.path.join(traces, t)
            if not os.path.exists(path):
                print(f"`../shared/traces/{t}` absent: skipped.\n")
                continue
            tf = max(16, int(64 * SCALE))
            print(
                f"### Block trace `../shared/traces/{t}`, keys as tiny objects\n\nEach block is an object "
                f"with a Meta-like size drawn from its key{f'; first {limit} references' if limit else ''}.\n"
            )
            flags = dict(trace=path, sizes="meta")
            if limit:
                flags["limit"] = limit
            side_by_side(f"{tf} MiB flash", flash_mib=tf, **flags)
            if t.startswith("arc/P3"):
                sweep("p3", "ARC P3 keys as tiny objects", [max(8, int(m * SCALE)) for m in (16, 32, 64, 128)], **flags)


if __name__ == "__main__":
    main(sys.argv[1:] or ["tiny", "whole", "trace"])
