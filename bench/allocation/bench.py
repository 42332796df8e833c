"""Cache allocation benchmark: allocation time for 100, 1,000 and 5,000 tenants with 1,000
curve points each (ε = 0.001·C), and the hit-rate gain over an equal split on exact LRU curves
of the real traces. Markdown on stdout, figures as JSON for plot.py, progress on stderr.

    .lachesis/venv/bin/python bench/allocation/bench.py --json /tmp/allocation.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from lachesis_controller.allocation import Curve, TenantDemand, allocate, equal_split, weighted_hit_rate

REPO = Path(__file__).resolve().parents[2]
TRACES = [
    ("cloudphysics", "../shared/traces/cloudPhysicsIO.csv", []),
    ("oltp", "../shared/traces/arc/OLTP.lis.zst", []),
    ("p3", "../shared/traces/arc/P3.lis.zst", []),
    ("oltp-reads", "../shared/traces/arc/OLTP.lis.zst", ["--reads-only"]),
]


def progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def synthetic(n: int, points: int, capacity: float, rng: np.random.Generator) -> dict[str, TenantDemand]:
    """Half concave (exponential decay), half with a cliff (a loop that hits only once it
    fits), working sets from 0.1% to 10% of the cache, request rates 1-100 per second."""
    demands = {}
    for i in range(n):
        ws = capacity * rng.uniform(0.001, 0.1)
        sizes = np.linspace(0, ws, points)
        if i % 2:
            misses = np.exp(-sizes / (ws * rng.uniform(0.05, 0.5)))
        else:
            cliff = rng.uniform(0.2, 0.9)
            misses = np.where(sizes < cliff * ws, 1.0 - 0.1 * sizes / ws, rng.uniform(0.05, 0.5))
        demands[f"t{i}"] = TenantDemand(Curve.from_points(sizes, misses), weight=float(rng.uniform(1, 100)))
    return demands


def literal_alg_531(demands: dict[str, TenantDemand], capacity: float) -> dict[str, float]:
    """Alg. 5.3.1 as written: every increment evaluates every tenant's gain U_i(a_i + ε) − U_i(a_i)
    from its curve (vectorised over tenants: one np.interp of 2n points per increment)."""
    names = sorted(demands)
    curves = [demands[n].curve for n in names]
    w = np.array([demands[n].weight for n in names])
    n = len(names)
    span = max(float(c.sizes[-1]) for c in curves) * 1.0001 + capacity + 1.0
    xp = np.concatenate([c.sizes + i * span for i, c in enumerate(curves)])
    fp = np.concatenate([c.miss_ratios for c in curves])
    lasts = np.array([c.sizes[-1] for c in curves])
    offsets = np.arange(n) * span
    eps = 0.001 * capacity
    a = np.zeros(n)
    left = capacity
    while left > 1e-9 * capacity:
        step = min(eps, left)
        m0 = np.interp(np.minimum(a, lasts) + offsets, xp, fp)
        m1 = np.interp(np.minimum(a + step, lasts) + offsets, xp, fp)
        j = int(np.argmax(w * (m0 - m1)))
        a[j] += step
        left -= step
    return dict(zip(names, a, strict=True))


def timed(fn, runs: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median wall-clock and median CPU seconds (the machine is shared: CPU time is what the
    allocator itself costs, wall-clock what a caller waited)."""
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def timing(runs: int) -> list[dict]:
    rows = []
    rng = np.random.default_rng(42)
    capacity = 1e12
    for n in (100, 1000, 5000):
        progress(f"timing {n} tenants")
        demands = synthetic(n, 1000, capacity, rng)
        wf = timed(lambda d=demands: allocate(d, capacity, method="waterfill"), runs)
        opt = timed(lambda d=demands: allocate(d, capacity, method="optimal"), runs)
        lit = timed(lambda d=demands: literal_alg_531(d, capacity), max(1, runs // 2 + 1) if n >= 5000 else runs)
        a_opt = allocate(demands, capacity)
        a_wf = allocate(demands, capacity, method="waterfill")
        rows.append(
            {
                "tenants": n,
                "points": 1000,
                "runs": runs,
                "literal_s": lit[0],
                "waterfill_s": wf[0],
                "optimal_s": opt[0],
                "literal_cpu": lit[1],
                "waterfill_cpu": wf[1],
                "optimal_cpu": opt[1],
                "optimal_utility": a_opt.utility,
                "waterfill_utility": a_wf.utility,
                "bound": a_opt.upper_bound,
                "optimal_exact": a_opt.optimal,
            }
        )
    return rows


def trace_curves(mrc: Path) -> dict[str, dict]:
    out = {}
    for name, path, extra in TRACES:
        progress(f"exact LRU curve of {name}")
        text = subprocess.run(
            [str(mrc), str(REPO / path), "-q", "--sizes", "1000", "--spacing", "linear", "-o", "json", *extra],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout
        doc = json.loads(text)
        curve = doc["curves"][0]
        out[name] = {
            "references": doc["references"],
            "working_set": doc["working_set"],
            "sizes": curve["sizes"],
            "miss_ratio": curve["miss_ratio"],
        }
    return out


def gains(curves: dict[str, dict]) -> list[dict]:
    total_refs = sum(c["references"] for c in curves.values())
    # Weight: the tenant's share of all references, so utility = the mix's overall hit ratio.
    demands = {
        n: TenantDemand(Curve.from_points(c["sizes"], c["miss_ratio"]), weight=c["references"] / total_refs)
        for n, c in curves.items()
    }
    footprint = sum(c["working_set"] for c in curves.values())
    rows = []
    for frac in (0.02, 0.05, 0.1, 0.2, 0.4):
        capacity = frac * footprint
        eq = weighted_hit_rate(demands, equal_split(demands, capacity))
        wf = allocate(demands, capacity, method="waterfill")
        opt = allocate(demands, capacity)
        rows.append(
            {
                "fraction": frac,
                "capacity_blocks": capacity,
                "equal": eq,
                "waterfill": wf.utility,
                "optimal": opt.utility,
                "bound": opt.upper_bound,
                "exact": opt.optimal,
                "sizes": {n: s / capacity for n, s in opt.sizes.items()},
            }
        )
    return rows


def placement() -> list[dict]:
    """Two tenants × (set-associative 2% of the device + LOC log 48%), a quarter of the writes
    each, 3 handles: the broker's grouping against CacheLib's first-come fallback, and the
    prediction (simulator at 64-page RUs; closed form) against the full device (256-page RUs,
    another seed, longer run)."""
    from lachesis_controller.placement import Geometry, Stream, devsim, naive, predict

    rows = []
    for op, trim in ((0.10, True), (0.10, False), (0.07, False), (0.03, False)):
        progress(f"placement at {100 * op:.0f}% OP, {'trimmed' if trim else 'untrimmed'} logs")
        streams = [
            s
            for t in ("a", "b")
            for s in (Stream(t, "set-assoc", 0.02, 0.25), Stream(t, "loc", 0.48, 0.25, trimmed=trim))
        ]
        p = predict(streams, Geometry(handles=3, overprovisioning=op))
        full = Geometry(reclaim_units=1024, pages_per_ru=256, overprovisioning=op, handles=3)

        def measure(handles: dict[str, int], streams: list[Stream] = streams, full: Geometry = full) -> float:
            body = devsim.request(streams, handles, full, seed=7, warmup_turns=3, measure_turns=6)
            return float(devsim.run(body)["dlwa"])

        rows.append(
            {
                "op": op,
                "trim": trim,
                "broker": measure(p.placement.handles),
                "naive": measure(naive(streams, 3, op).handles),
                "predicted": p.predicted_dlwa,
                "model": p.model_dlwa,
                "groups": sorted(sorted(g) for g in _groups_of(p.placement.handles)),
            }
        )
    return rows


def _groups_of(handles: dict[str, int]) -> list[list[str]]:
    by: dict[int, list[str]] = {}
    for name, h in handles.items():
        by.setdefault(h, []).append(name)
    return list(by.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", type=Path, required=True)
    ap.add_argument("--mrc", type=Path, default=REPO / "agents/target/release/lachesis-mrc")
    ap.add_argument("--parts", default="timing,traces,placement")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    result: dict = {}
    if "placement" in parts:
        rows = placement()
        result["placement"] = rows
        print("## Placement: 2 tenants × (small + large objects), 3 handles\n")
        print(
            "| OP | logs | broker (measured) | naive (measured) | predicted (simulator) | error | closed form | error |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(
                f"| {100 * r['op']:.0f}% | {'trimmed' if r['trim'] else 'untrimmed'} | {r['broker']:.3f} | "
                f"{r['naive']:.3f} | {r['predicted']:.3f} | {100 * (r['predicted'] / r['broker'] - 1):+.1f}% | "
                f"{r['model']:.3f} | {100 * (r['model'] / r['broker'] - 1):+.1f}% |"
            )
        print("\nBroker groups: " + "; ".join(" + ".join(g) for g in rows[0]["groups"]) + "\n")
    if not parts & {"timing", "traces"}:
        args.json.write_text(json.dumps(result, indent=1))
        return
    t = timing(args.runs)
    print("## Allocation time\n")
    print(
        f"1,000 curve points per tenant, ε = 0.001·C (1,000 increments), median of {args.runs} runs "
        "(of 3 for the literal Alg. 5.3.1 at 5,000). Curves: half concave, half with a cliff.\n"
    )
    print("Wall-clock seconds, CPU seconds in brackets.\n")
    print(
        "| tenants | literal Alg. 5.3.1 | water-filling (heap) | optimal (hull + DP) | literal / optimal | "
        "optimal vs water-filling utility | optimality |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in t:
        print(
            f"| {r['tenants']:,} | {r['literal_s']:.3f} ({r['literal_cpu']:.3f}) | "
            f"{r['waterfill_s']:.3f} ({r['waterfill_cpu']:.3f}) | {r['optimal_s']:.3f} ({r['optimal_cpu']:.3f}) | "
            f"{r['literal_s'] / r['optimal_s']:.1f}× | {100 * (r['optimal_utility'] / r['waterfill_utility'] - 1):+.2f}% | "
            f"{'exact' if r['optimal_exact'] else 'within %.3f%% of the hull bound' % (100 * (1 - r['optimal_utility'] / r['bound']))} |"
        )
    c = trace_curves(args.mrc)
    g = gains(c)
    print("\n## Hit rate over an equal split, exact LRU curves of the traces\n")
    print(
        "Tenants: "
        + ", ".join(f"{n} ({v['references']:,} refs, working set {v['working_set']:,} blocks)" for n, v in c.items())
        + ". Utility: overall hit ratio of the mix.\n"
    )
    print("| cache / Σ working sets | equal split | water-filling | optimal | optimal vs equal | shares (optimal) |")
    print("|---|---|---|---|---|---|")
    for r in g:
        shares = ", ".join(f"{n} {100 * s:.0f}%" for n, s in r["sizes"].items())
        print(
            f"| {100 * r['fraction']:.0f}% | {r['equal']:.4f} | {r['waterfill']:.4f} | {r['optimal']:.4f} | "
            f"{100 * (r['optimal'] / r['equal'] - 1):+.1f}% | {shares} |"
        )
    result.update({"timing": t, "gains": g})
    args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
