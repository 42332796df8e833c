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
  step as `agents/stages/src/serve/cached_store.rs` and `stage/cache.rs` do it): a host miss is
  a lend read at the server (a hit there takes the block out, a miss fills nothing), the block
  goes into the host's LRU, and the host's clean eviction is demoted into the server's LRU.
  Counted: blocks demoted, server hits on demoted blocks. It matches the global LRU's hits
  exactly when no demotion is lost (the agents drop one only when their queue is full).

Measured with real processes too (`REAL=TRACE-NAME,...`, default the CloudPhysics trace; as
root, with /dev/fuse): the release `lachesis-fs serve` runs the server level from its flags
(`--cache-bytes a2 --cache-serves store`, with `--cache-exclusive` for demotion) in front of a
sparse file of the trace's distinct blocks, and `lachesis-fs mount` runs level 1 (a DRAM stage
of a1 in front of `tcp://` to it); the trace's references are read once, cold, with O_DIRECT
through the mount. Counted from the two stats files (no clock): each level's hits, what
reached the store, blocks demoted and the server level's hits on them.

Prints the section's tables (markdown) and writes an SVG of bytes read from the store.
    python3 bench/apps/two_level.py OUT.svg TRACE...
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import subprocess
import sys
import tempfile
import time
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
# A DRAM stage counts each block's 16-byte key with it.
DRAM_BLOCK = BLOCK + 16
FS_BIN = Path(os.environ.get("LACHESIS_FS_BIN", ROOT / "agents" / "target" / "release" / "lachesis-fs"))
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
    split = split_allocation(
        sizes,
        {"t": curve},
        {"t": TwoLevelSpec(MEMORY, NETWORK, STORAGE, None, float(s * BLOCK))},
        epsilon=(h + s) * BLOCK / 200,
    )["t"]
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
    out = {
        "name": path.name.split(".")[0],
        "refs": n,
        "unique": unique,
        "alpha": split.alpha,
        "predicted": split.hit_ratio,
        "rows": rows,
        "demoted": demoted,
        "demotion_hits": demotion_hits,
    }
    if out["name"] in os.environ.get("REAL", "cloudPhysicsIO").split(","):
        dense = np.unique(refs_np, return_inverse=True)[1]
        out["real"] = {
            mode: measured(dense, unique, h if mode == "one" else a1, a2, mode)
            for mode in ("one", "inclusive", "exclusive")
        }
        out["real_sizes"] = (h, a1, a2)
    return out


def _stats(path: Path, after: int | None = None, tries: int = 4000) -> dict:
    """The stats file's first snapshot taken after snapshot `after` was seen (two past it)."""
    for _ in range(tries):
        try:
            v = json.loads(path.read_text())
            if after is None or v["snapshot"] >= after + 2:
                return v
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no stats snapshot in {path}")


def _free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def measured(dense: np.ndarray, blocks: int, a1: int, a2: int, mode: str) -> dict:
    """One cold read of the trace through a real mount (level 1: a1 blocks) and a real serve
    (mode one: no server level; inclusive or exclusive: a2 blocks)."""
    with tempfile.TemporaryDirectory(prefix="two-level-bench-") as tmp:
        t = Path(tmp)
        root, backing, mnt = t / "root", t / "backing", t / "mnt"
        for d in (root / "store", backing, mnt):
            d.mkdir(parents=True)
        for f in (root / "store" / "f", backing / "f"):
            with f.open("wb") as out:
                out.truncate(blocks * BLOCK)
        addr = _free_addr()
        level2 = [] if mode == "one" else ["--cache-bytes", str(a2 * DRAM_BLOCK), "--cache-serves", "store"]
        if mode == "exclusive":
            level2.append("--cache-exclusive")
        serve = subprocess.Popen(
            [str(FS_BIN), "serve", "--listen", addr, "--root", str(root), *level2, "--stats", str(t / "serve.json")],
            stderr=subprocess.DEVNULL,
        )
        rules = {
            "rules": [
                {
                    "name": "r",
                    "priority": 1,
                    "match": {"tenant": "t", "ops": ["read"]},
                    "detours": [
                        {"what": "io", "to": {"kind": "stage", "target": "cache/t-l1"}},
                        {"what": "io", "to": {"kind": "file", "target": f"tcp://{addr}/store"}},
                    ],
                }
            ],
            "stages": [
                {
                    "kind": "cache",
                    "name": "cache/t-l1",
                    "owner": "t",
                    "engine": "dram",
                    "size_bytes": a1 * DRAM_BLOCK,
                    "write_mode": "through",
                    "eviction": "lru",
                    "max_dirty_bytes": 1 << 20,
                    "device": None,
                    "placement": [],
                    "next": None,
                }
            ],
        }
        (t / "rules.json").write_text(json.dumps(rules))
        mount = subprocess.Popen(
            [
                str(FS_BIN),
                "mount",
                "--backing",
                str(backing),
                "--mountpoint",
                str(mnt),
                "--rules",
                str(t / "rules.json"),
                "--tenant",
                f"t=uid:{os.geteuid()}",
                "--stats",
                str(t / "mount.json"),
                "--no-passthrough",
            ],
            stderr=subprocess.DEVNULL,
        )
        try:
            _stats(t / "serve.json")
            _stats(t / "mount.json")
            buf = mmap.mmap(-1, BLOCK)
            fd = os.open(mnt / "f", os.O_RDONLY | os.O_DIRECT)
            try:
                for b in dense.tolist():
                    os.preadv(fd, [buf], b * BLOCK)
            finally:
                os.close(fd)
            # Counted: level 1 reported every read, and the server level answered every
            # demotion level 1 queued.
            for _ in range(400):
                m = _stats(t / "mount.json", _stats(t / "mount.json")["snapshot"])
                sv = _stats(t / "serve.json", _stats(t / "serve.json")["snapshot"])
                l1 = next(x["stats"] for x in m["stages"] if x["target"] == "cache/t-l1")
                l2 = sv["stages"].get("cache/serve", {})
                answered = l2.get("demoted_blocks", 0) + sv["store"].get("demotions_refused", 0)
                if l1["hits"] + l1["misses"] >= len(dense) and answered >= l1.get("demoted_blocks", 0) * (
                    mode == "exclusive"
                ):
                    break
            else:
                raise RuntimeError(f"{mode}: the stats never showed every read (and demotion) counted")
            return {
                "host_hits": l1["hits"],
                "server_hits": l2.get("hits", 0),
                "store_bytes": sv["store"]["bytes_read"],
                "demoted": l1.get("demoted_blocks", 0),
                "taken": l2.get("demoted_blocks", 0),
                "demotion_hits": l2.get("demotion_hits", 0),
                "refused": sv["store"].get("demotions_refused", 0),
            }
        finally:
            mount.terminate()
            mount.wait()
            serve.kill()
            serve.wait()


def svg(results: list[dict], out: Path) -> None:
    configs = list(results[0]["rows"])
    colors = ["#888888", "#d98c3f", "#3f7fd9", "#3fa95a", "#8a3fd9"]
    w, h, left, top, bar = 860, 320, 60, 30, 26
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h + 120}" font-family="sans-serif" font-size="12">',
        f'<text x="{left}" y="18">Share of references read from the server\'s store (lower is better)</text>',
    ]
    group = len(configs) * bar + 30
    for gi, r in enumerate(results):
        for ci, c in enumerate(configs):
            _, _, h1, h2 = r["rows"][c]
            miss = 1 - (h1 + h2) / r["refs"]
            x = left + gi * group + ci * bar
            bh = miss * (h - top - 20)
            parts.append(
                f'<rect x="{x}" y="{h - 20 - bh:.1f}" width="{bar - 4}" height="{bh:.1f}" fill="{colors[ci]}"/>'
            )
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
    print(
        "| trace (refs, distinct blocks) | configuration | host blocks | server blocks | hit ratio (host + server) | read from the store |"
    )
    print("|---|---|---|---|---|---|")
    for r in results:
        base = r["refs"] - r["rows"]["one level (H on the host)"][2]
        for c, (a1, a2, h1, h2) in r["rows"].items():
            miss = r["refs"] - h1 - h2
            rel = f"{miss / base:.2f}x one level" if base else "-"
            print(
                f"| {r['name']} ({r['refs']:,}, {r['unique']:,}) | {c} | {a1:,} | {a2:,} | "
                f"{(h1 + h2) / r['refs']:.3f} ({h1 / r['refs']:.3f} + {h2 / r['refs']:.3f}) | "
                f"{miss * BLOCK / 2**20:,.0f} MiB ({rel}) |"
            )
        print(
            f"| {r['name']} | α = {r['alpha']:.2f}, predicted U(a1 + a2) = {r['predicted']:.3f}; with demotion "
            f"{r['demoted']:,} blocks demoted, {r['demotion_hits']:,} server hits on them | | | | |"
        )
    real = [r for r in results if "real" in r]
    if real:
        print()
        print(
            "Measured with real processes (one cold read of the trace through `lachesis-fs mount` and `lachesis-fs serve`):"
        )
        print()
        print(
            "| trace | configuration | host blocks | server blocks | hit ratio (host + server) | read from the store | demoted (taken, refused) | server hits on demoted |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in real:
            h, a1, a2 = r["real_sizes"]
            for mode, label, sizes in (
                ("one", "one level", (h, 0)),
                ("inclusive", "two levels, α split, inclusive", (a1, a2)),
                ("exclusive", "two levels, α split, with demotion", (a1, a2)),
            ):
                m = r["real"][mode]
                n = r["refs"]
                print(
                    f"| {r['name']} | {label} | {sizes[0]:,} | {sizes[1]:,} | "
                    f"{(m['host_hits'] + m['server_hits']) / n:.3f} ({m['host_hits'] / n:.3f} + {m['server_hits'] / n:.3f}) | "
                    f"{m['store_bytes'] / 2**20:,.0f} MiB ({m['store_bytes'] / r['real']['one']['store_bytes']:.2f}x one level) | "
                    f"{m['demoted']:,} ({m['taken']:,}, {m['refused']:,}) | {m['demotion_hits']:,} |"
                )
    svg(results, out)


if __name__ == "__main__":
    main()
