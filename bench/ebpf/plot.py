"""Plots lachesis-ebpf-bench's per-round JSON: IOPS attached / detached per round and engine.

    python plot.py OUT.png LABEL=runs.json [LABEL=runs.json ...]

One panel per engine; per configuration (all layers, block only) the paired ratio of each
round as dots and their median as a bar, against the goal of 0.97. The per-round dots are
there because the machine is shared: the spread says how far to trust the median.
"""

from __future__ import annotations

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def paired_ratios(runs: list[dict], engine: str) -> list[float]:
    by_round: dict[int, dict[bool, float]] = {}
    for r in runs:
        if r["engine"] == engine:
            by_round.setdefault(r["round"], {})[r["attached"]] = r["iops"]
    return [p[True] / p[False] for p in by_round.values() if True in p and False in p and p[False] > 0]


out, specs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
sets = [(label, json.load(open(path))) for label, path in specs]
engines = sorted({r["engine"] for _, runs in sets for r in runs}, key=lambda e: e != "psync")
fig, axes = plt.subplots(1, len(engines), figsize=(5 * len(engines), 4), sharey=True, squeeze=False)
for ax, engine in zip(axes[0], engines):
    for x, (label, runs) in enumerate(sets):
        ratios = paired_ratios(runs, engine)
        if not ratios:
            continue
        ax.bar(x, statistics.median(ratios), width=0.6, alpha=0.4, label="median" if x == 0 else None)
        ax.scatter(
            [x] * len(ratios), ratios, color="black", s=12, zorder=3, label="one round (paired)" if x == 0 else None
        )
    ax.axhline(0.97, color="red", ls="--", lw=1, label="goal 0.97")
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    ax.set_xticks(range(len(sets)), [label for label, _ in sets])
    ax.set(title=f"fio 4 KiB randread O_DIRECT, {engine}", ylabel="IOPS attached / detached")
    ax.set_ylim(min(0.7, ax.get_ylim()[0]), max(1.2, ax.get_ylim()[1]))
    ax.legend(fontsize=8, loc="lower right")
fig.tight_layout()
fig.savefig(out, dpi=110)
