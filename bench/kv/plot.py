"""Plots bench/kv/kv.py's kvload reports: one panel per section that ran.

    python plot.py kv.json OUT.png

throughput: ops/s per server and client thread count, each run a dot and the median a bar
(the machine is shared: the spread says how far to trust the median); tiny: miss ratio of
memcached vs Lachesis at equal DRAM; fdp: DLWA with separate vs shared handles beside the FDP
paper's figures.
"""

from __future__ import annotations

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"memcached": "#888888", "lachesis": "#1f77b4"}


def kind(r: dict) -> str:
    return "memcached" if r["server_name"] == "memcached" else "lachesis"


def throughput(ax, rs: list[dict]) -> None:
    x = 0
    ticks, labels = [], []
    for threads in (1, 2):
        for server in ("memcached", "lachesis"):
            ops = [r["ops_per_s"] for r in rs if r["threads"] == threads and kind(r) == server]
            if not ops:
                continue
            ax.bar(x, statistics.median(ops), color=COLORS[server], alpha=0.7)
            ax.plot([x] * len(ops), ops, "k.", ms=4)
            ticks.append(x)
            labels.append(f"{server}\n{threads} thr")
            x += 1
        x += 0.5
    ax.set_xticks(ticks, labels, fontsize=7)
    ax.set_ylabel("ops/s (gets + sets)")
    ax.set_title("DRAM-resident, 90% gets")


def tiny(ax, rs: list[dict]) -> None:
    names = [kind(r) for r in rs]
    ax.bar(names, [r["miss_ratio"] for r in rs], color=[COLORS[n] for n in names])
    ax.set_ylabel("miss ratio")
    ax.set_title("Tiny objects, working set 20x DRAM")


def fdp(ax, rs: list[dict]) -> None:
    labels = [r["section"].removeprefix("fdp-") for r in rs]
    vals = [r.get("dlwa") or 0 for r in rs]
    ax.bar(labels, vals, color=COLORS["lachesis"], alpha=0.8, label="measured")
    ax.axhline(1.03, color="green", ls="--", lw=1, label="paper, separate (1.03)")
    ax.axhline(3.5, color="red", ls=":", lw=1, label="paper, one handle (up to 3.5)")
    ax.set_ylabel("DLWA (media / host bytes)")
    ax.set_title("FDP: two tenants, 100% utilisation")
    ax.legend(fontsize=7)


def main() -> None:
    runs = json.load(open(sys.argv[1]))
    panels = [
        (throughput, [r for r in runs if r["section"] == "throughput"]),
        (tiny, [r for r in runs if r["section"] == "tiny"]),
        (fdp, [r for r in runs if r["section"].startswith("fdp-")]),
    ]
    panels = [(f, rs) for f, rs in panels if rs]
    if not panels:
        print("plot: no results", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8), squeeze=False)
    for ax, (f, rs) in zip(axes[0], panels):
        f(ax, rs)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
