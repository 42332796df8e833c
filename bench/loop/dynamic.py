"""Moirai §5.5.5 (dynamic workloads) on this machine: half the tenants go idle, then come back.

Four tenants (synthetic Zipf traces made here, a new seed per run, or the traces given) replay
open loop, each at its trace's share of the demo's 4,000 references/s, through their own flash
cache stages with the allocation loop on (`./lachesis demo`'s tenants, stages and replayers).
Three phases of --seconds each: all active; the second half of the tenants stop (idle); they
come back. A sampler reads every stage's size and counters each second. Reported per run: the
aggregate and per-tenant hit ratios and sizes of each phase, and how long after the stop (the
return) the loop moved the space, in seconds and in reaction times (Moirai reacts in one
reaction time, 15-30 s; the goal is within two). The plot is the thesis's Fig. 5.13: sizes
stacked, the active tenants' hit ratio over time.

    flock -o /tmp/lachesis-bench.lock .lachesis/venv/bin/python bench/loop/dynamic.py \\
        --runs 3 --seconds 60 --plot docs/benchmarks/loop-dynamic.png

Needs a running deployment (`./lachesis up --detach`); the reaction time is the controller's
(LACHESIS_ALLOCATION_REACTION_S, default 15 s), given here as --reaction-s for the report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from lachesis_cli.client import Client
from lachesis_cli.demo.run import Demo
from lachesis_cli.settings import resolve

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import trace, write  # noqa: E402  (bench/loop/synth.py: the same generator the docs use)

MIB = 1 << 20


class Sampler(threading.Thread):
    """Every second: each demo stage's (allocated, installed, hits, misses), by tenant."""

    def __init__(self, client: Client, demo: Demo) -> None:
        super().__init__(daemon=True)
        self.client, self.demo = client, demo
        self.rows: list[tuple[float, str, int, int, int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            try:
                stages = self.demo.stage_counters()
            except Exception:  # a busy controller: the next sample will do
                continue
            now = time.time()
            for name, s in stages.items():
                self.rows.append(
                    (
                        now,
                        name,
                        s.get("allocated_bytes") or 0,
                        s.get("installed_bytes") or 0,
                        s.get("hits") or 0,
                        s.get("misses") or 0,
                    )
                )


def make_traces(folder: Path, seed: int) -> list[Path]:
    """Four Zipf tenants whose miniatures each want more than an equal quarter of the cache:
    space freed by idle tenants raises the others' hit ratios."""
    paths = []
    for i, alpha in enumerate((0.8, 0.9, 0.9, 1.0)):
        keys = trace("zipf", 16_000 + 2_000 * i, 400_000, alpha, seed * 10 + i)
        path = folder / f"zipf{i}-a{alpha:g}-s{seed}.lis"
        write(path, keys)
        paths.append(path)
    return paths


def latest(rows: list[tuple], t: float) -> dict[str, tuple]:
    """Each tenant's last sample at or before `t`: (at, name, allocated, installed, hits, misses)."""
    return {row[1]: row for row in rows if row[0] <= t}


def sizes_at(rows: list[tuple], t: float) -> dict[str, int]:
    """Each tenant's allocated bytes in its last sample at or before `t`."""
    return {name: row[2] for name, row in latest(rows, t).items()}


def counters_at(rows: list[tuple], t: float) -> dict[str, tuple[int, int]]:
    """Each tenant's (hits, misses) in its last sample at or before `t`."""
    return {name: (row[4], row[5]) for name, row in latest(rows, t).items()}


def first_change(rows: list[tuple], after: float, names: list[str], moved) -> float | None:
    """Seconds from `after` to the first sample in which `moved(sizes)` holds."""
    times = sorted({r[0] for r in rows if r[0] > after})
    for t in times:
        sizes = sizes_at(rows, t)
        if all(n in sizes for n in names) and moved(sizes):
            return t - after
    return None


def phase_stats(rows: list[tuple], start: float, end: float, names: list[str]) -> dict:
    a, b = counters_at(rows, start), counters_at(rows, end)
    per = {}
    for n in names:
        h = b.get(n, (0, 0))[0] - a.get(n, (0, 0))[0]
        m = b.get(n, (0, 0))[1] - a.get(n, (0, 0))[1]
        per[n] = {"hits": h, "misses": m, "hit_ratio": h / (h + m) if h + m else None}
    hits = sum(p["hits"] for p in per.values())
    total = hits + sum(p["misses"] for p in per.values())
    return {
        "hit_ratio": hits / total if total else None,
        "tenants": per,
        "sizes_mib": {n: s / MIB for n, s in sizes_at(rows, end).items() if n in names},
    }


def one_run(client: Client, home: Path, paths: list[Path], seconds: float, cache: int) -> dict:
    # The miniatures are scaled for one pass over the three phases.
    demo = Demo(client, home, 3 * seconds, cache)
    demo.prepare(paths)
    names = [t.name for t in demo.tenants]
    half = names[len(names) // 2 :]
    rest = names[: len(names) // 2]
    sampler = Sampler(client, demo)
    try:
        demo.start_phase("dynamic", equal=False)
        sampler.start()
        t0 = time.time()
        with demo.replaying(paced=True) as everyone:
            time.sleep(seconds)
            everyone()
            t_idle = time.time()
            for n in half:
                everyone.stop(n)
            time.sleep(seconds)
            everyone()
            t_back = time.time()
            with demo.replaying(half, paced=True) as back:
                time.sleep(seconds)
                back()
                everyone()
            t_end = time.time()
        # The agent's reports of the last seconds.
        time.sleep(3)
    finally:
        sampler.stop.set()
        sampler.join()
        demo.clean_up()
    rows = sampler.rows
    before_idle = sizes_at(rows, t_idle)
    before_back = sizes_at(rows, t_back)
    idle_move = first_change(
        rows,
        t_idle,
        names,
        lambda s: all(s[n] < before_idle.get(n, 0) for n in half) and all(s[n] > before_idle.get(n, 0) for n in rest),
    )
    back_move = first_change(rows, t_back, names, lambda s: all(s[n] > before_back.get(n, 0) for n in half))
    return {
        "tenants": names,
        "idle": half,
        "phases": {
            "all": phase_stats(rows, t0, t_idle, names),
            "half_idle": phase_stats(rows, t_idle, t_back, rest),
            # Once the space has moved: what the freed space buys the tenants still active.
            "half_idle_after_move": None if idle_move is None else phase_stats(rows, t_idle + idle_move, t_back, rest),
            "back": phase_stats(rows, t_back, t_end, names),
        },
        "space_moved_after_idle_s": idle_move,
        "space_moved_after_return_s": back_move,
        "rows": [(t - t0, *r) for t, *r in rows],
        "marks": {"idle": t_idle - t0, "back": t_back - t0, "end": t_end - t0},
    }


def report(a: argparse.Namespace, runs: list[dict], loads: list[tuple[float, float]]) -> None:
    rt = a.reaction_s
    print(
        f"`bench/loop/dynamic.py --runs {a.runs} --seconds {a.seconds:g} --cache-mib {a.cache_mib} --seed {a.seed}`, "
        f"reaction time {rt:g} s, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n"
    )
    print(
        "| run | load start / end | all active: hit ratio | half idle: active tenants' hit ratio "
        "| the same once the space moved | all back: hit ratio | space moved after idle | after return |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")

    def moved(s: float | None) -> str:
        return "never" if s is None else f"{s:.0f} s ({s / rt:.1f} reaction times)"

    def hr(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for i, (r, load) in enumerate(zip(runs, loads, strict=True)):
        p = r["phases"]
        moved_ph = p["half_idle_after_move"]
        print(
            f"| {i + 1} | {load[0]:.1f} / {load[1]:.1f} | {hr(p['all']['hit_ratio'])} | {hr(p['half_idle']['hit_ratio'])} "
            f"| {hr(moved_ph['hit_ratio'] if moved_ph else None)} | {hr(p['back']['hit_ratio'])} | {moved(r['space_moved_after_idle_s'])} "
            f"| {moved(r['space_moved_after_return_s'])} |"
        )
    med = statistics.median
    for key in ("space_moved_after_idle_s", "space_moved_after_return_s"):
        got = [r[key] for r in runs if r[key] is not None]
        if got:
            print(
                f"\nmedian {key}: {med(got):.1f} s = {med(got) / rt:.2f} reaction times ({len(got)} of {len(runs)} runs)"
            )
    last = runs[-1]
    print("\nLast run, per tenant (MiB at the end of each phase; hit ratio over the phase):\n")
    print("| tenant | all active | half idle | all back |")
    print("|---|---:|---:|---:|")
    for n in last["tenants"]:
        cells = []
        for ph in ("all", "half_idle", "back"):
            st = last["phases"][ph]
            size = st["sizes_mib"].get(n)
            t = st["tenants"].get(n)
            cells.append("idle" if t is None else f"{size:g} MiB, {hr(t['hit_ratio'])}")
        print(f"| {n} | {' | '.join(cells)} |")


def plot(path: Path, run: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, names = run["rows"], run["tenants"]
    times = sorted({r[0] for r in rows})
    fig, ax1 = plt.subplots(figsize=(9, 4.5))
    stacks = []
    for n in names:
        by_t = {}
        for t, name, alloc, *_ in rows:
            if name == n:
                by_t[t] = alloc / MIB
        last, col = 0.0, []
        for t in times:
            last = by_t.get(t, last)
            col.append(last)
        stacks.append(col)
    ax1.stackplot(times, np.array(stacks), labels=names, alpha=0.6, step="post")
    ax1.set_xlabel("seconds")
    ax1.set_ylabel("allocated MiB (stacked)")
    ax2 = ax1.twinx()
    xs, ys = [], []
    prev: dict[str, tuple[int, int]] = {}
    for t in times:
        cur = {name: (h, m) for at, name, _, _, h, m in rows if at == t}
        dh = sum(cur[n][0] - prev[n][0] for n in cur if n in prev)
        dm = sum(cur[n][1] - prev[n][1] for n in cur if n in prev)
        prev.update(cur)
        if dh + dm > 0:
            xs.append(t)
            ys.append(dh / (dh + dm))
    ax2.plot(xs, ys, "k-", lw=1, label="hit ratio (all tenants, per second)")
    ax2.set_ylim(0, 1)
    ax2.set_ylabel("hit ratio")
    for key, label in (("idle", "half idle"), ("back", "all back")):
        ax1.axvline(run["marks"][key], color="grey", ls="--")
        ax1.text(run["marks"][key], ax1.get_ylim()[1] * 0.95, f" {label}", fontsize=8)
    ax1.legend(loc="lower left", fontsize=7)
    ax2.legend(loc="lower right", fontsize=7)
    fig.suptitle("Half the tenants go idle and come back (Moirai §5.5.5): sizes and hit ratio")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path, help="four or more traces (default: Zipf traces made per run)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60, help="length of each of the three phases")
    ap.add_argument("--cache-mib", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1, help="first run's trace seed (run i uses seed + i)")
    ap.add_argument("--reaction-s", type=float, default=float(os.environ.get("LACHESIS_ALLOCATION_REACTION_S", "15")))
    ap.add_argument("--plot", type=Path)
    ap.add_argument("--json", type=Path, help="also write the runs (without samples) here")
    a = ap.parse_args()
    if a.traces and len(a.traces) < 4:
        ap.error("give four or more traces (half of them go idle)")
    client = Client(resolve())
    home = Path(os.environ.get("LACHESIS_HOME", Path(__file__).resolve().parents[2] / ".lachesis"))
    runs, loads = [], []
    for r in range(a.runs):
        print(f"bench/loop/dynamic: run {r + 1}/{a.runs}", file=sys.stderr, flush=True)
        start_load = os.getloadavg()[0]
        with tempfile.TemporaryDirectory(prefix="lachesis-dynamic-") as tmp:
            paths = a.traces or make_traces(Path(tmp), a.seed + r)
            runs.append(one_run(client, home, paths, a.seconds, a.cache_mib * MIB))
        loads.append((start_load, os.getloadavg()[0]))
    report(a, runs, loads)
    if a.json:
        a.json.write_text(json.dumps([{k: v for k, v in r.items() if k != "rows"} for r in runs], indent=1))
    if a.plot:
        plot(a.plot, runs[-1])


if __name__ == "__main__":
    main()
