"""Two-level caches (Moirai §5.3.5) on the shared traces: one level vs two with the controller's
α split, simulated (LRU caches over the traces' block references; the split is the
controller's own `split_allocation` over a SHARDS-sampled curve, as the agents report them).

Per trace: the host (level 1) has H = 5% of the trace's distinct blocks, the storage server may
give up to S = 20%. Bandwidths: host memory 10 GB/s, network 1.25 GB/s (10 GbE), the server's
store 200 MB/s; no SLA (the best the maxima allow, at the smallest total). Configurations:

- one level: an LRU of H on the host, every miss read from the server's store;
- double caching: H on the host and H at the server, both filled by every read that passes
  (Moirai's "today" baseline);
- two levels, inclusive (what the agents run): a1 on the host, a2 at the server caching the
  host's misses;
- two levels, exclusive (Moirai's global LRU: the server level holds what the host evicted):
  hits of an LRU of a1 at the host, of a1 + a2 in total;
- two levels with demotion (what the agents run with `exclusive: true`, simulated step by
  step as `agents/fs/src/remote/cached_store.rs` and `stage/cache.rs` do it): a host miss is
  a lend read at the server (a hit there takes the block out, a miss fills nothing), the block
  goes into the host's LRU, and the host's clean eviction is demoted into the server's LRU.
  Counted: blocks demoted, server hits on demoted blocks. It matches the global LRU's hits
  exactly when no demotion is lost (the agents drop one only when their queue is full).

Prints the section's table (markdown) and writes an SVG of bytes read from the store.
    python3 bench/apps/two_level.py OUT.svg TRACE...
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))
sys.path.insert(0, str(ROOT / "controller" / "src"))

from miniature import arc_blocks, cloudphysics_blocks  # noqa: E402

from lachesis_controller.allocation import Curve  # noqa: E402
from lachesis_controller.allocation.two_level import TwoLevelSpec, split_allocation  # noqa: E402

BLOCK = 4096
MAX_REFS = 1_000_000
SAMPLE = 0.05
MEMORY, NETWORK, STORAGE = 10e9, 1.25e9, 200e6


def blocks_of(path: Path) -> np.ndarray:
    refs = cloudphysics_blocks(path) if path.suffix == ".csv" else arc_blocks(path)
    return refs[:MAX_REFS]


def sampled_curve(refs: np.ndarray, sizes: np.ndarray) -> Curve:
    """SHARDS (fixed rate): stack distances of the spatially sampled references, scaled."""
    keep = ((refs.astype(np.uint64) * np.uint64(2654435761)) % np.uint64(1 << 32)) < np.uint64(SAMPLE * (1 << 32))
    seq = refs[keep].tolist()
    n = len(seq)
    tree = [0] * (n + 1)

    def add(i: int, v: int) -> None:
        i += 1
        while i <= n:
            tree[i] += v
            i += i & -i

    def total(i: int) -> int:  # sum of [0, i)
        s = 0
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s

    last: dict[int, int] = {}
    dist = np.full(n, np.inf)
    for t, b in enumerate(seq):
        p = last.get(b)
        if p is not None:
            dist[t] = (total(t) - total(p + 1)) / SAMPLE
            add(p, -1)
        add(t, 1)
        last[b] = t
    miss = np.array([(dist >= s).mean() for s in sizes])
    return Curve.from_points(sizes * BLOCK, miss)


def lru(refs: list[int], size: int) -> np.ndarray:
    """Hit (True) per reference of an LRU of `size` blocks."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = np.zeros(len(refs), dtype=bool)
    for i, b in enumerate(refs):
        if b in cache:
            cache.move_to_end(b)
            hits[i] = True
        else:
            cache[b] = None
            if len(cache) > size:
                cache.popitem(last=False)
    return hits


def two_levels(refs: list[int], a1: int, a2: int) -> tuple[int, int]:
    """Hits at level 1 and at level 2 when level 2 caches level 1's misses (inclusive)."""
    l1 = lru(refs, a1) if a1 > 0 else np.zeros(len(refs), dtype=bool)
    misses = [b for b, h in zip(refs, l1.tolist(), strict=True) if not h]
    l2 = lru(misses, a2) if a2 > 0 else np.zeros(len(misses), dtype=bool)
    return int(l1.sum()), int(l2.sum())


def demoting(refs: list[int], a1: int, a2: int) -> tuple[int, int, int, int]:
    """Hits at the host and at the server, blocks demoted and server hits on them, with an
    exclusive server level that takes the host's evictions."""
    host: OrderedDict[int, None] = OrderedDict()
    server: OrderedDict[int, None] = OrderedDict()
    h1 = h2 = demoted = 0
    for b in refs:
        if b in host:
            host.move_to_end(b)
            h1 += 1
            continue
        if b in server:  # a hit moves the block up
            del server[b]
            h2 += 1
        if a1 == 0:
            continue
        host[b] = None
        if len(host) > a1:
            evicted, _ = host.popitem(last=False)
            demoted += 1
            if a2 > 0:
                server[evicted] = None
                if len(server) > a2:
                    server.popitem(last=False)
    # Every server hit is on a demoted block: nothing else fills an exclusive level here.
    return h1, h2, demoted, h2


def run(path: Path) -> dict:
    refs_np = blocks_of(path)
    refs = refs_np.tolist()
    unique = len(np.unique(refs_np))
    h, s = max(1, unique // 20), max(1, unique // 5)
    curve = sampled_curve(refs_np, np.linspace(0, h + s, 201))
    sizes = {"t": float(h * BLOCK)}
    split = split_allocation(sizes, {"t": curve}, {"t": TwoLevelSpec(MEMORY, NETWORK, STORAGE, None, float(s * BLOCK))},
                             epsilon=(h + s) * BLOCK / 200)["t"]
    a1, a2 = int(round(split.hypervisor / BLOCK)), int(round(split.storage / BLOCK))
    n = len(refs)
    one = int(lru(refs, h).sum())
    dbl1, dbl2 = two_levels(refs, h, h)
    inc1, inc2 = two_levels(refs, a1, a2)
    exc1 = int(lru(refs, a1).sum()) if a1 else 0
    exc = int(lru(refs, a1 + a2).sum())
    dem1, dem2, demoted, demotion_hits = demoting(refs, a1, a2)
    rows = {
        "one level (H on the host)": (h, 0, one, 0),
        "double caching (H and H)": (h, h, dbl1, dbl2),
        "two levels, α split, inclusive (ours)": (a1, a2, inc1, inc2),
        "two levels, α split, exclusive (Moirai's global LRU)": (a1, a2, exc1, exc - exc1),
        "two levels, α split, with demotion (ours, exclusive: true)": (a1, a2, dem1, dem2),
    }
    return {"name": path.name.split(".")[0], "refs": n, "unique": unique, "alpha": split.alpha,
            "predicted": split.hit_ratio, "rows": rows, "demoted": demoted, "demotion_hits": demotion_hits}


def svg(results: list[dict], out: Path) -> None:
    configs = list(results[0]["rows"])
    colors = ["#888888", "#d98c3f", "#3f7fd9", "#3fa95a", "#8a3fd9"]
    w, h, left, top, bar = 860, 320, 60, 30, 26
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 120}" font-family="sans-serif" font-size="12">',
             f'<text x="{left}" y="18">Share of references read from the server\'s store (lower is better)</text>']
    group = len(configs) * bar + 30
    for gi, r in enumerate(results):
        for ci, c in enumerate(configs):
            _, _, h1, h2 = r["rows"][c]
            miss = 1 - (h1 + h2) / r["refs"]
            x = left + gi * group + ci * bar
            bh = miss * (h - top - 20)
            parts.append(f'<rect x="{x}" y="{h - 20 - bh:.1f}" width="{bar - 4}" height="{bh:.1f}" fill="{colors[ci]}"/>')
            parts.append(f'<text x="{x}" y="{h - 24 - bh:.1f}" font-size="9">{miss:.2f}</text>')
        parts.append(f'<text x="{left + gi * group}" y="{h - 4}">{r["name"]}</text>')
    for ci, c in enumerate(configs):
        parts.append(f'<rect x="{left}" y="{h + 10 + ci * 18}" width="12" height="12" fill="{colors[ci]}"/>')
        parts.append(f'<text x="{left + 18}" y="{h + 20 + ci * 18}">{c}</text>')
    parts.append("</svg>")
    out.write_text("\n".join(parts) + "\n")


def main() -> None:
    out, traces = Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]
    results = [run(p) for p in traces]
    print("| trace (refs, distinct blocks) | configuration | host blocks | server blocks | hit ratio (host + server) | read from the store |")
    print("|---|---|---|---|---|---|")
    for r in results:
        base = r["refs"] - r["rows"]["one level (H on the host)"][2]
        for c, (a1, a2, h1, h2) in r["rows"].items():
            miss = r["refs"] - h1 - h2
            rel = f"{miss / base:.2f}x one level" if base else "-"
            print(f"| {r['name']} ({r['refs']:,}, {r['unique']:,}) | {c} | {a1:,} | {a2:,} | "
                  f"{(h1 + h2) / r['refs']:.3f} ({h1 / r['refs']:.3f} + {h2 / r['refs']:.3f}) | "
                  f"{miss * BLOCK / 2**20:,.0f} MiB ({rel}) |")
        print(f"| {r['name']} | α = {r['alpha']:.2f}, predicted U(a1 + a2) = {r['predicted']:.3f}; with demotion "
              f"{r['demoted']:,} blocks demoted, {r['demotion_hits']:,} server hits on them | | | | |")
    svg(results, out)


if __name__ == "__main__":
    main()
