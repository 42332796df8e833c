"""Plots bench.py's JSON: allocation time against tenants, hit ratio against cache size."""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

data = json.load(open(sys.argv[1]))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
t = data["timing"]
n = [r["tenants"] for r in t]
for key, label in (
    ("literal_s", "literal Alg. 5.3.1"),
    ("waterfill_s", "water-filling (heap)"),
    ("optimal_s", "optimal (hull + DP)"),
):
    ax1.plot(n, [r[key] for r in t], marker="o", label=label)
ax1.axhline(15, color="grey", ls="--", lw=1, label="Moirai, 5,000 VMs: < 15 s")
ax1.axhline(0.1, color="grey", ls=":", lw=1, label="goal: 0.1 s")
ax1.set(
    xscale="log",
    yscale="log",
    xlabel="tenants (1,000 curve points each)",
    ylabel="seconds (median)",
    title="Allocation time, ε = 0.001·C",
)
ax1.legend(fontsize=8)
g = data["gains"]
x = [100 * r["fraction"] for r in g]
for key, label in (("equal", "equal split"), ("waterfill", "water-filling"), ("optimal", "optimal")):
    ax2.plot(x, [r[key] for r in g], marker="o", label=label)
ax2.set(
    xlabel="cache size, % of the tenants' working sets",
    ylabel="hit ratio of the mix",
    title="4 tenants, exact LRU curves of real traces",
)
ax2.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
