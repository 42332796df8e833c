"""Runs the demo (equal split, then the loop) several times with a sampler beside it and
reports: aggregate hit ratio of the real stages per phase, per tenant sizes and hit ratios,
how long the loop took from the start of its phase to its first allocation installed, the
replays' throughput in both phases, and measured vs predicted DLWA. Medians over runs."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from lachesis_cli.client import Client
from lachesis_cli.settings import resolve

REGION = 1 << 20


class Sampler(threading.Thread):
    """GET /api/v1/stages every second: (t, stage, allocated, installed, hits, misses)."""

    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.client, self.rows, self.stop = client, [], threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                stages = self.client.get("/api/v1/stages")
            except Exception:  # the deployment may be busy; the next sample will do
                continue
            now = time.time()
            for s in stages:
                for h in s["hosts"]:
                    self.rows.append(
                        (now, s["name"], h["allocated_bytes"], h["installed_bytes"], h["hits"], h["misses"])
                    )


def demo(seconds: float, cache: str) -> dict:
    cli = Path(sys.executable).parent / "lachesis-cli"
    if not cli.exists():
        cli = Path(os.environ["LACHESIS_HOME"]) / "venv" / "bin" / "lachesis-cli"
    out = subprocess.run(
        [str(cli), "demo", "--compare-equal-split", "-o", "json", "--seconds", str(seconds), "--cache-bytes", cache],
        check=True,
        capture_output=True,
        text=True,
    )
    sys.stderr.write(out.stderr)
    return json.loads(out.stdout)


def first_install(rows: list[tuple], stages: list[str], start: float) -> float | None:
    """Seconds from `start` to the first sample where the loop's stages are off the equal
    split and every one is installed at its allocation (to one region)."""
    by_t: dict[float, dict[str, tuple]] = {}
    for t, name, alloc, inst, *_ in rows:
        if name in stages and t >= start:
            by_t.setdefault(t, {})[name] = (alloc, inst)
    for t in sorted(by_t):
        seen = by_t[t]
        if len(seen) < len(stages) or any(a is None or i is None for a, i in seen.values()):
            continue
        sizes = [a for a, _ in seen.values()]
        if max(sizes) - min(sizes) > REGION and all(abs(a - i) <= REGION for a, i in seen.values()):
            return t - start
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--cache", default="32MiB")
    ap.add_argument("--plot", type=Path)
    a = ap.parse_args()
    client = Client(resolve())
    runs = []
    for r in range(a.runs):
        print(f"bench/loop: run {r + 1}/{a.runs}", file=sys.stderr, flush=True)
        sampler = Sampler(client)
        sampler.start()
        began = time.time()
        result = demo(a.seconds, a.cache)
        sampler.stop.set()
        sampler.join()
        loop_stages = sorted({n for _, n, *_ in sampler.rows if n.endswith("-loop")})
        loop_start = min((t for t, n, *_ in sampler.rows if n in loop_stages), default=None)
        reaction = first_install(sampler.rows, loop_stages, loop_start) if loop_start else None
        runs.append({"result": result, "rows": sampler.rows, "began": began, "reaction_s": reaction})
    report(a, runs)
    if a.plot:
        plot(a.plot, runs[-1])


def report(a: argparse.Namespace, runs: list[dict]) -> None:
    med = statistics.median
    eq = [r["result"]["equal_split"]["hit_ratio"] for r in runs]
    lp = [r["result"]["loop"]["hit_ratio"] for r in runs]
    load = os.getloadavg()[0]
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    print(
        f"`bench/loop/run.sh` (RUNS={a.runs} PHASE_S={a.seconds:g} CACHE={a.cache}), {os.cpu_count()} cores ({cpu}), "
        f"load {load:.1f} at the end, {time.strftime('%Y-%m-%d')}.\n"
    )
    print(
        "| run | equal split hit ratio | loop hit ratio | loop / equal | first allocation installed after | requests equal / loop |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(runs):
        res = r["result"]
        req_eq = sum(t["requests"] for t in res["equal_split"]["tenants"])
        req_lp = sum(t["requests"] for t in res["tenants"])
        re = "-" if r["reaction_s"] is None else f"{r['reaction_s']:.0f} s"
        print(f"| {i + 1} | {eq[i]:.3f} | {lp[i]:.3f} | {lp[i] / eq[i]:.3f} | {re} | {req_eq:,} / {req_lp:,} |")
    print(f"| median | {med(eq):.3f} | {med(lp):.3f} | {med(lp) / med(eq):.3f} | | |\n")
    last = runs[-1]["result"]
    print(
        "Last run, per tenant (allocated and installed MiB, the stage's measured hit ratio, the curve's prediction):\n"
    )
    print("| phase | tenant | requests | allocated | installed | hit ratio | predicted |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for phase, tenants in (("equal", last["equal_split"]["tenants"]), ("loop", last["tenants"])):
        for t in tenants:
            p = "-" if t["predicted_hit_ratio"] is None else f"{t['predicted_hit_ratio']:.3f}"
            h = "-" if t["hit_ratio"] is None else f"{t['hit_ratio']:.3f}"
            print(
                f"| {phase} | {t['name']} | {t['requests']:,} | {t['allocated_bytes'] / 2**20:.1f} | "
                f"{t['installed_bytes'] / 2**20:.1f} | {h} | {p} |"
            )
    print("\nDevices (last run):\n")
    print("| device | kind | handles | host bytes | media bytes | DLWA measured | DLWA predicted |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for d in last["devices"]:
        m = "-" if d["dlwa"] is None else f"{d['dlwa']:.3f}"
        p = "-" if d["predicted_dlwa"] is None else f"{d['predicted_dlwa']:.3f}"
        print(
            f"| {d['host']}/{d['name']} | {d['kind']} | {d['placement_handles']} | {d['host_bytes_written']:,} | "
            f"{d['media_bytes_written']:,} | {m} | {p} |"
        )


def plot(path: Path, run: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = run["rows"]
    t0 = run["began"]
    names = sorted({n for _, n, *_ in rows})
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for name in names:
        pts = [(t - t0, a, i, h, m) for t, n, a, i, h, m in rows if n == name]
        if len(pts) < 2:
            continue
        xs = [p[0] for p in pts[1:]]
        ratios = []
        for (t, _, _, h0, m0), (_, _, _, h1, m1) in zip(pts, pts[1:]):
            dh, dm = (h1 or 0) - (h0 or 0), (m1 or 0) - (m0 or 0)
            ratios.append(dh / (dh + dm) if dh + dm > 0 else float("nan"))
        style = "--" if name.endswith("-equal") else "-"
        ax1.plot(xs, ratios, style, label=name.removeprefix("cache/"))
        ax2.step(
            [p[0] for p in pts],
            [(p[1] or 0) / 2**20 for p in pts],
            style,
            where="post",
            label=name.removeprefix("cache/"),
        )
    ax1.set_ylabel("stage hit ratio per second")
    ax1.set_ylim(0, 1)
    ax2.set_ylabel("allocated MiB")
    ax2.set_xlabel("seconds since the demo started (equal split, then the loop)")
    ax1.legend(fontsize=7, ncol=2)
    fig.suptitle("Real flash cache stages: equal split (dashed) vs the allocation loop (solid)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
