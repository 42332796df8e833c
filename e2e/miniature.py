"""Miniature replays of the real traces for the allocation e2e test.

A full replay of OLTP and P3 is ~5 million 4 KiB reads: far too slow for an e2e test on a
2-core machine. Instead each trace is scaled down by spatially consistent sampling, the idea
behind SHARDS and miniature simulation (Waldspurger et al., FAST'15, ATC'17): keep only the
references to blocks whose hash `lachesis_mrc::hash::sample_value(block, 0)` (splitmix64, the
same function the eBPF programs use) is below R·2^24. The result is a real workload with R of
the references and R of the working set, whose LRU hit ratio at size R·C is that of the full
trace at C. One rate R for every tenant keeps their request rates in the traces' proportions,
which is what the allocator weighs them by (IOPS).

The kernel's own sampling (the agent's fixed-size SHARDS, 8 K keys) then runs on top, at or
near rate 1 on these small working sets.

This file is also the replayer: `python miniature.py replay ...` joins a cgroup and issues
one O_DIRECT 4 KiB pread per reference, paced so that each pass over the trace takes the same
time for every tenant (a tenant's IOPS is its trace's reference count over the pass time).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The one Python splitmix64 (also the demo's scaling), held to the Rust and C ones by a fixture.
from lachesis_cli.demo.traces import SHARDS_P, sample_value

BLOCK = 4096


def arc_blocks(path: Path) -> np.ndarray:
    """One reference per 512-byte block of every `start nblocks ignore reqno` line."""
    text = subprocess.run(["zstd", "-dcq", str(path)], capture_output=True, check=True).stdout
    cols = np.array(text.split(), dtype=np.int64).reshape(-1, 4)
    start, n = cols[:, 0], cols[:, 1]
    # start_i + 0..n_i for every line, without a Python loop.
    first = np.repeat(start - np.cumsum(n) + n, n)
    return first + np.arange(int(n.sum()), dtype=np.int64)


def cloudphysics_blocks(path: Path) -> np.ndarray:
    """One reference per request, keyed by its lbn (as `lachesis-mrc` reads the trace)."""
    lbn = np.loadtxt(path, delimiter=",", skiprows=1, usecols=4, dtype=np.int64)
    return np.atleast_1d(lbn)


@dataclass(frozen=True)
class Miniature:
    name: str
    # Reference order as indices 0..blocks-1 into the tenant's file, one per kept reference.
    refs: np.ndarray
    blocks: int
    full_references: int
    full_working_set: int


def miniature(name: str, keys: np.ndarray, rate: float) -> Miniature:
    kept = keys[sample_value(keys) < np.uint64(round(rate * SHARDS_P))]
    # Dense block numbers: LRU only sees which references repeat, not where blocks are.
    uniq, dense = np.unique(kept, return_inverse=True)
    return Miniature(name, dense.astype(np.int64), int(uniq.size), int(keys.size), int(np.unique(keys).size))


def make_file(path: Path, blocks: int) -> None:
    """Written with O_DIRECT by the test process (no tenant), so every block is allocated and
    the tenant's reads of it reach the block layer, where the kernel samples them."""
    chunk = 256
    buf = mmap.mmap(-1, chunk * BLOCK)
    buf.write(bytes(range(256)) * (chunk * BLOCK // 256))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        for start in range(0, blocks, chunk):
            n = min(chunk, blocks - start)
            assert os.pwritev(fd, [memoryview(buf)[: n * BLOCK]], start * BLOCK) == n * BLOCK
        os.fsync(fd)
    finally:
        os.close(fd)


def replay(refs: Path, file: Path, cgroup: Path, start_at: float, pass_s: float, passes: int) -> None:
    """Pass p covers [start_at + p·pass_s, start_at + (p+1)·pass_s): reference k of it is read
    at its share of that window (or as soon as possible when behind)."""
    order = np.load(refs)
    fd = os.open(file, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs
    offsets = (order * BLOCK).tolist()
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    step = pass_s / len(offsets)
    for p in range(passes):
        base = start_at + p * pass_s
        for k, off in enumerate(offsets):
            ahead = base + k * step - time.time()
            if ahead > 0.002:
                time.sleep(ahead)
            if os.preadv(fd, [buf], off) != BLOCK:
                sys.exit(f"short read at offset {off} of {file}")
        # How late the pass ended: a replayer that falls behind shifts its passes.
        print(json.dumps({"pass": p, "lag_s": round(time.time() - base - pass_s, 3)}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("replay", help="replay a miniature trace in a cgroup")
    r.add_argument("--refs", type=Path, required=True, help=".npy of block indices")
    r.add_argument("--file", type=Path, required=True)
    r.add_argument("--cgroup", type=Path, required=True)
    r.add_argument("--start-at", type=float, required=True, help="time.time() of the first pass")
    r.add_argument("--pass-s", type=float, required=True)
    r.add_argument("--passes", type=int, required=True)
    a = ap.parse_args()
    replay(a.refs, a.file, a.cgroup, a.start_at, a.pass_s, a.passes)


if __name__ == "__main__":
    main()
