"""Plots of the Moirai experiments whose runs are kept as JSON in docs/benchmarks/:

    python bench/loop/plot.py priority docs/benchmarks/loop-priority.json docs/benchmarks/loop-priority.png
    python bench/loop/plot.py global   docs/benchmarks/loop-global.json   docs/benchmarks/loop-global.png

`priority`: `bench/loop/priority.py --json`'s runs, the prioritised tenant's IOPS alone and
beside the heavy one per layout (§5.5.1, Fig. 5.9). `global`: a list of `./lachesis demo
--compare-equal-split -o json` results, each tenant's hit ratio under the equal split and under
the loop (§5.5.2, Fig. 5.10). Medians over the runs, every run's value as a dot.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def bars(ax, groups: list[str], series: dict[str, list[list[float]]], ylabel: str) -> None:
    """One bar per series in each group at its median, the runs as dots."""
    width = 0.8 / len(series)
    for i, (label, per_group) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [statistics.median(v) for v in per_group], width, label=label, alpha=0.7)
        for x, values in zip(xs, per_group, strict=True):
            ax.plot([x] * len(values), values, "k.", ms=3)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def priority(src: Path, out: Path) -> None:
    runs = json.loads(src.read_text())
    layouts = list(runs)
    fig, ax = plt.subplots(figsize=(7, 4))
    bars(
        ax,
        layouts,
        {
            "hi alone": [[r["alone"] for r in runs[n]] for n in layouts],
            "hi beside lo": [[r["beside"] for r in runs[n]] for n in layouts],
        },
        "hi's 4 KiB random reads per second",
    )
    fig.suptitle("A prioritised tenant beside a heavy one (Moirai §5.5.1)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def global_hit(src: Path, out: Path) -> None:
    runs = json.loads(src.read_text())
    names = [t["name"] for t in runs[0]["tenants"]]

    equal = [{t["name"]: t["hit_ratio"] or 0.0 for t in r["equal_split"]["tenants"]} for r in runs]
    loop = [{t["name"]: t["hit_ratio"] or 0.0 for t in r["tenants"]} for r in runs]
    fig, ax = plt.subplots(figsize=(8, 4))
    bars(
        ax,
        [n.removeprefix("demo-") for n in names],
        {
            "equal split": [[e[n] for e in equal] for n in names],
            "allocation loop": [[lp[n] for lp in loop] for n in names],
        },
        "stage hit ratio over the phase",
    )
    ax.set_ylim(0, 1)
    fig.suptitle("Maximising the global hit rate with a log tenant among four (Moirai §5.5.2)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> int:
    if len(sys.argv) != 4 or sys.argv[1] not in ("priority", "global"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, src, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    (priority if kind == "priority" else global_hit)(src, out)
    print(f"plot: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
