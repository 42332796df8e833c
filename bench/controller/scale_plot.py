"""Rollout latency against hosts: an SVG from `scale.py --json` outputs, one per host count.

Each input is what `scale.py --agents N --replicas 1 --json` printed; the plot shows the
rollout p50 and p99 (seconds) of each against N on linear axes, with the issue's goals
(p50 < 1 s at 1,000 hosts, < 5 s at 5,000) as marks. A Markdown table of the same figures goes
to stdout.

  .lachesis/venv/bin/python bench/controller/scale_plot.py -o docs/benchmarks/controller-scale.svg r100.json r1000.json ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

W, H, LEFT, BOTTOM, TOP, RIGHT = 560, 340, 60, 50, 30, 20
GOALS = [(1000, 1.0), (5000, 5.0)]  # (hosts, p50 goal in seconds)


def points(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        for run in json.loads(path.read_text())["runs"]:
            if run.get("rollout_p50_s") is not None and run["replicas"] == 1:
                out.append(run)
    return sorted(out, key=lambda r: r["agents"])


def svg(runs: list[dict]) -> str:
    max_x = max(max(r["agents"] for r in runs), max(g[0] for g in GOALS))
    max_y = max(max(r["rollout_p99_s"] for r in runs), max(g[1] for g in GOALS)) * 1.1
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(v: float) -> float:
        return LEFT + v / max_x * pw

    def y(v: float) -> float:
        return TOP + ph - v / max_y * ph

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
        f'<rect width="{W}" height="{H}" fill="white"/>',
        f'<text x="{W / 2}" y="18" text-anchor="middle">Two-phase rollout latency against hosts (one controller)</text>',
        f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="black"/>',
        f'<text x="{LEFT + pw / 2}" y="{H - 10}" text-anchor="middle">hosts</text>',
        f'<text x="15" y="{TOP + ph / 2}" transform="rotate(-90 15 {TOP + ph / 2})" text-anchor="middle">seconds</text>',
    ]
    for i in range(6):
        hv, sv = max_x * i / 5, max_y * i / 5
        parts.append(f'<text x="{x(hv):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{hv:.0f}</text>')
        parts.append(f'<text x="{LEFT - 6}" y="{y(sv) + 4:.1f}" text-anchor="end">{sv:.1f}</text>')
        parts.append(f'<line x1="{LEFT}" y1="{y(sv):.1f}" x2="{LEFT + pw}" y2="{y(sv):.1f}" stroke="#ddd"/>')
    for key, colour in (("rollout_p50_s", "#1f77b4"), ("rollout_p99_s", "#d62728")):
        line = " ".join(f"{x(r['agents']):.1f},{y(r[key]):.1f}" for r in runs)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{x(r["agents"]):.1f}" cy="{y(r[key]):.1f}" r="3" fill="{colour}"/>' for r in runs]
    for hosts, goal in GOALS:
        parts.append(f'<text x="{x(hosts):.1f}" y="{y(goal) + 4:.1f}" text-anchor="middle" fill="green">×</text>')
    legend = [("#1f77b4", "p50"), ("#d62728", "p99"), ("green", "× p50 goal")]
    for i, (colour, label) in enumerate(legend):
        parts.append(f'<text x="{LEFT + 10}" y="{TOP + 14 + 16 * i}" fill="{colour}">{label}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--out", type=Path, required=True)
    parser.add_argument("inputs", nargs="+", type=Path)
    args = parser.parse_args()
    runs = points(args.inputs)
    if not runs:
        raise SystemExit("scale_plot.py: no measured one-replica run in the inputs")
    args.out.write_text(svg(runs))
    print("| hosts | rollout p50 (s) | rollout p99 (s) | controller CPU s / rollout |")
    print("|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['agents']} | {r['rollout_p50_s']:.2f} | {r['rollout_p99_s']:.2f} "
            f"| {r['controller_cpu_s_per_rollout']:.2f} |"
        )


if __name__ == "__main__":
    main()
