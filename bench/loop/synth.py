"""Synthetic block traces in the ARC format (`start nblocks ignore request`, one 4 KiB block a
line), which `lachesis-mrc` and `./lachesis demo` read: workloads the loop was not tuned on
(issue 34 asks for traces beyond ../shared/traces, other seeds and mixes).

    python bench/loop/synth.py OUT.lis --shape zipf --blocks 100000 --refs 1000000 --alpha 0.9 --seed 1

Shapes: `zipf` (skew --alpha over --blocks), `loop` (the blocks in order, over and over: LRU
gets all or nothing), `scan` (a hot zipf tenth of the blocks, a quarter of the references a
sequential scan of the rest), `mix` (zipf over a working set that shifts by a tenth every
tenth of the trace), `log` (a sequential log: each reference a block never seen before, as
Moirai §5.5.2's Log tenant). Other shapes' ranks are scattered over the block space so hot
blocks are not adjacent.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def zipf_ranks(rng: np.random.Generator, n: int, alpha: float, size: int) -> np.ndarray:
    """Ranks 0..n-1 with P(r) ∝ (r + 1)^-alpha, by the inverse of the continuous CDF."""
    u = rng.random(size)
    if abs(alpha - 1.0) < 1e-9:
        x = np.exp(np.log(n + 1.0) * u)
    else:
        e = 1.0 - alpha
        x = (((n + 1.0) ** e - 1.0) * u + 1.0) ** (1.0 / e)
    return np.clip(np.floor(x).astype(np.int64) - 1, 0, n - 1)


def trace(shape: str, blocks: int, refs: int, alpha: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if shape == "zipf":
        ranks = zipf_ranks(rng, blocks, alpha, refs)
    elif shape == "loop":
        ranks = np.arange(refs, dtype=np.int64) % blocks
    elif shape == "scan":
        hot = max(blocks // 10, 1)
        ranks = zipf_ranks(rng, hot, alpha, refs)
        is_scan = rng.random(refs) < 0.25
        ranks[is_scan] = hot + np.arange(int(is_scan.sum()), dtype=np.int64) % max(blocks - hot, 1)
    elif shape == "mix":
        ranks = zipf_ranks(rng, blocks, alpha, refs)
        shift = (np.arange(refs) * 10 // refs) * (blocks // 10)
        ranks = ranks + shift
    elif shape == "log":
        # A sequential log: every reference the next block (blocks is ignored), nothing reused;
        # kept in order, not scattered.
        return np.arange(refs, dtype=np.int64)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    # Scatter ranks over a block space 16 times the set: a permutation, so ranks stay distinct.
    space = rng.permutation(int(ranks.max()) + 1 if ranks.size else 1) * 16
    return space[ranks]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", choices=["zipf", "loop", "scan", "mix", "log"], default="zipf")
    ap.add_argument("--blocks", type=int, default=100_000)
    ap.add_argument("--refs", type=int, default=1_000_000)
    ap.add_argument("--alpha", type=float, default=0.9)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.blocks < 1 or a.refs < 1 or a.alpha <= 0:
        print("synth.py: --blocks and --refs must be at least 1, --alpha above 0", file=sys.stderr)
        return 2
    write(a.out, trace(a.shape, a.blocks, a.refs, a.alpha, a.seed))
    return 0


def write(path: Path, keys: np.ndarray) -> None:
    """The keys as an ARC trace, one 4 KiB block a line."""
    with path.open("w") as f:
        for k in keys.tolist():
            f.write(f"{k} 1 0 {k}\n")


if __name__ == "__main__":
    sys.exit(main())
