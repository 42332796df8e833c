"""Plots bench/datapath/bench.py's --json: IOPS as a ratio of direct IO on the backing
directory, per flow, FUSE over io_uring and /dev/fuse side by side, one panel per fio job count
and operation, each run a dot and the median a bar, the issue's goal a tick.

    python plot.py datapath.json OUT.png
"""

from __future__ import annotations

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: E402

COLORS = {"dev": "#888888", "uring": "#1f77b4", "auto": "#2ca02c"}
# Issue 33's goals, as ratios of direct IO (reads and writes alike).
GOALS = {
    "passthrough": 0.97,
    "user-space (endpoint)": 0.9,
    "cache stage (DRAM engine, hits)": 5.0,
    "cache stage (flash engine, hits)": 2.0,
    "cache stage (flash engine, misses)": 0.85,
}
SHORT = {
    "passthrough": "passthrough",
    "user-space (endpoint)": "user-space",
    "cache stage (DRAM engine, hits)": "DRAM hits",
    "cache stage (flash engine, hits)": "flash hits",
    "cache stage (flash engine, misses)": "flash misses",
}


def ratios(samples: list[dict], jobs: int, op: str, transport: str, flow: str) -> list[float]:
    """Per run: the flow's IOPS over the same run's direct baseline."""
    base = {s["run"]: s["iops"] for s in samples if (s["jobs"], s["op"], s["flow"]) == (jobs, op, "backing, direct")}
    return [
        s["iops"] / base[s["run"]]
        for s in samples
        if (s["jobs"], s["op"], s["transport"], s["flow"]) == (jobs, op, transport, flow) and base.get(s["run"])
    ]


def main() -> None:
    data = json.load(open(sys.argv[1]))
    samples, transports = data["samples"], data["transports"]
    jobs_list = data["args"]["jobs"]
    flows = [f for f in GOALS if any(s["flow"] == f for s in samples)]
    fig, axes = plt.subplots(len(jobs_list), 2, figsize=(12, 3.6 * len(jobs_list)), squeeze=False)
    width = 0.8 / len(transports)
    for row, jobs in enumerate(jobs_list):
        loads = [s["load1"] for s in samples if s["jobs"] == jobs]
        for col, op in enumerate(("randread", "randwrite")):
            ax = axes[row][col]
            for i, flow in enumerate(flows):
                for k, t in enumerate(transports):
                    r = ratios(samples, jobs, op, t, flow)
                    if not r:
                        continue
                    x = i + (k - (len(transports) - 1) / 2) * width
                    ax.bar(
                        x,
                        statistics.median(r),
                        width * 0.9,
                        color=COLORS.get(t, "#d62728"),
                        label=t if i == 0 else None,
                    )
                    ax.plot([x] * len(r), r, "k.", ms=3)
                ax.plot([i - 0.4, i + 0.4], [GOALS[flow]] * 2, "r-", lw=1.5, label="goal" if i == 0 else None)
            ax.axhline(1.0, color="k", lw=0.5, ls="--")
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(ScalarFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            ax.set_yticks([0.25, 0.5, 1, 2, 5])
            ax.set_xticks(range(len(flows)), [SHORT[f] for f in flows], fontsize=8)
            ax.set_ylabel("IOPS / direct IO on the backing dir")
            ax.set_title(f"4 KiB {op}, {jobs} fio job(s), load {min(loads):.1f}-{max(loads):.1f}", fontsize=9)
            ax.legend(fontsize=7)
    where = data["args"].get("cache_device_dir") or "the backing disk"
    fig.suptitle(
        f"lachesis-fs flows, FUSE transports side by side ({data['machine']['nproc']} CPUs, "
        f"kernel {data['machine']['kernel']}; flash stages' device on {where})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
