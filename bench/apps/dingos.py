"""Turns lachesis-dingos-replay's JSON lines into the DINGOS section of
docs/benchmarks/apps.md (a markdown table on stdout) and an SVG plot: the dispatcher's
cumulative maintenance bytes over the window, planner vs naive scrub, per trace and deadline.
No plotting library: the SVG is written by hand (the bench needs nothing beyond python3)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

THESIS = 0.40  # McAllister's thesis, §6.4.2: up to 40% less maintenance read IO (simulation)
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.0f}"


def table(runs: dict[tuple[str, float], dict[str, dict]]) -> str:
    lines = [
        "| trace | deadline (x trace duration) | declared MiB | foreground reads MiB | naive scrub: read MiB, met | planner: read MiB (foreground-covered MiB), met | maintenance reads saved | thesis |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (trace, window), r in sorted(runs.items()):
        p, n = r["planner"], r["naive"]
        saved = 1 - p["dispatched_bytes"] / n["dispatched_bytes"] if n["dispatched_bytes"] else 0.0
        met = lambda x: "yes" if x["deadline_met"] else f"no ({x['done_at_window']})"  # noqa: E731
        lines.append(
            f"| {trace} | {window:g} | {mib(p['declared_bytes'])} | {mib(p['foreground_read_bytes'])} | "
            f"{mib(n['dispatched_bytes'])}, {met(n)} | {mib(p['dispatched_bytes'])} ({mib(p['foreground_bytes'])}), {met(p)} | "
            f"**{100 * saved:.1f}%** | up to {100 * THESIS:.0f}% |"
        )
    return "\n".join(lines)


def svg(runs: dict[tuple[str, float], dict[str, dict]], path: str) -> None:
    w, h, left, bottom, top, right = 720, 400, 70, 50, 30, 200
    pw, ph = w - left - right, h - top - bottom
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="13">Maintenance bytes read by the dispatcher (share of declared)</text>',
    ]
    for i in range(6):
        y = top + ph - ph * i / 5
        parts.append(f'<line x1="{left}" y1="{y}" x2="{left + pw}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{i * 20}%</text>')
    for i in range(5):
        x = left + pw * i / 4
        parts.append(f'<text x="{x}" y="{top + ph + 16}" text-anchor="middle">{i * 0.5:g}</text>')
    parts.append(f'<text x="{left + pw / 2}" y="{h - 10}" text-anchor="middle">time / deadline</text>')
    parts.append(
        f'<line x1="{left + pw / 2}" y1="{top}" x2="{left + pw / 2}" y2="{top + ph}" stroke="#888" stroke-dasharray="4"/>'
    )
    for k, ((trace, window), r) in enumerate(sorted(runs.items())):
        color = COLORS[k % len(COLORS)]
        for run, dash in (("naive", "6,3"), ("planner", "")):
            d = r[run]
            pts = [(0.0, 0.0)] + [(x, b / d["declared_bytes"]) for x, b in d["series"]]
            path_d = " ".join(f"{left + pw * min(x, 2.0) / 2:.1f},{top + ph - ph * y:.1f}" for x, y in pts)
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="1.6" stroke-dasharray="{dash}" points="{path_d}"/>'
            )
        y = top + 14 * k
        parts.append(
            f'<line x1="{left + pw + 12}" y1="{y}" x2="{left + pw + 32}" y2="{y}" stroke="{color}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{left + pw + 36}" y="{y + 4}">{trace}, deadline {window:g}x</text>')
    y = top + 14 * len(runs) + 10
    parts.append(f'<text x="{left + pw + 12}" y="{y}">solid: planner</text>')
    parts.append(f'<text x="{left + pw + 12}" y="{y + 14}">dashed: naive scrub</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def main() -> None:
    runs: dict[tuple[str, float], dict[str, dict]] = defaultdict(dict)
    with open(sys.argv[1]) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                runs[(r["trace"], r["window_factor"])][r["run"]] = r
    print(table(runs))
    svg(runs, sys.argv[2])


if __name__ == "__main__":
    main()
