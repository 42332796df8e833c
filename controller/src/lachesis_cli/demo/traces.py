"""Trace readers for the demo (the formats `lachesis-mrc` reads) and their miniature scaling.

Each reader returns the block keys in reference order and which references write. A full
replay of P3 is ~4 M references, far more than a minute of FUSE IO on a small machine, so a
trace is scaled down by spatially consistent sampling (SHARDS, Waldspurger et al. FAST'15;
miniature simulation, ATC'17): keep the references to blocks whose hash is below R·2^24. The
result is a real workload with R of the references and R of the working set, whose LRU hit
ratio at R·C is the full trace's at C. The hash is `lachesis_mrc::hash::sample_value(key, 0)`
(splitmix64), the one the agent's samplers use, so the demo's scaling and the curves agree.

Written in Python, not by calling lachesis-mrc, because the replayers need the keys
themselves (the CLI reads traces to curves and has no key dump).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHARDS_P = 1 << 24
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


class TraceError(ValueError):
    """A trace that cannot be read: the message names the file and what is wrong."""


def mix64(keys: np.ndarray) -> np.ndarray:
    """splitmix64's output function, vectorised: `lachesis_mrc::hash::mix64`, the BPF
    program's `lx_mix64` (the three are held to api-schemas/fixtures/hash/splitmix64.json)."""
    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def sample_value(keys: np.ndarray) -> np.ndarray:
    """The hash mod 2^24: `lachesis_mrc::hash::sample_value(key, 0)`."""
    return mix64(keys) & np.uint64(SHARDS_P - 1)


@dataclass(frozen=True)
class Trace:
    path: Path
    keys: np.ndarray  # int64 block keys in reference order
    writes: np.ndarray  # bool, True where the reference writes


def _arc(path: Path) -> Trace:
    if path.suffix == ".zst":
        try:
            text = subprocess.run(["zstd", "-dcq", str(path)], capture_output=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise TraceError(f"{path}: cannot decompress with zstd: {exc}") from None
    else:
        text = path.read_bytes()
    try:
        cols = np.array(text.split(), dtype=np.int64).reshape(-1, 4)
    except ValueError:
        raise TraceError(f"{path}: not an ARC trace (lines 'start nblocks ignore request')") from None
    start, n = cols[:, 0], cols[:, 1]
    if (n < 0).any():
        raise TraceError(f"{path}: line {int(np.argmax(n < 0)) + 1}: negative block count")
    first = np.repeat(start - np.cumsum(n) + n, n)
    keys = first + np.arange(int(n.sum()), dtype=np.int64)
    return Trace(path, keys, np.zeros(keys.size, dtype=bool))


def _cloudphysics(path: Path) -> Trace:
    with path.open() as f:
        header = f.readline().strip()
    if header != "version,time,op,size,lbn":
        raise TraceError(f"{path}: line 1: expected the CloudPhysics header 'version,time,op,size,lbn'")
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1, usecols=(2, 4), dtype=str, ndmin=2)
        lbn = table[:, 1].astype(np.int64)
    except ValueError as exc:
        raise TraceError(f"{path}: {exc}") from None
    ops = np.char.lower(table[:, 0])
    return Trace(path, lbn, np.isin(ops, ["2a", "8a"]))


def _oracle_general(path: Path) -> Trace:
    raw = path.read_bytes()
    if len(raw) % 24:
        raise TraceError(f"{path}: {len(raw)} bytes is not a whole number of 24-byte oracleGeneral records")
    records = np.frombuffer(raw, dtype=np.dtype([("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")]))
    return Trace(path, records["id"].astype(np.int64), np.zeros(len(records), dtype=bool))


def _msr(path: Path) -> Trace:
    try:
        table = np.loadtxt(path, delimiter=",", usecols=(3, 4), dtype=str, ndmin=2)
        offset = table[:, 1].astype(np.int64)
    except ValueError as exc:
        raise TraceError(f"{path}: not an MSR Cambridge trace: {exc}") from None
    return Trace(path, offset // 4096, np.char.lower(table[:, 0]) == "write")


def read(path: Path) -> Trace:
    """Any trace format `lachesis-mrc` reads, told apart by name and first line."""
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    name = path.name
    if re.search(r"\.lis(\.zst)?$", name):
        trace = _arc(path)
    elif name.endswith(".bin") or "oracleGeneral" in name:
        trace = _oracle_general(path)
    elif name.endswith(".csv"):
        with path.open(errors="replace") as f:
            first = f.readline()
        trace = _cloudphysics(path) if first.startswith("version,") else _msr(path)
    else:
        raise TraceError(
            f"{path}: unknown trace format (ARC .lis/.lis.zst, oracleGeneral .bin, CloudPhysics or MSR .csv)"
        )
    if trace.keys.size == 0:
        raise TraceError(f"{path}: no references")
    return trace


@dataclass(frozen=True)
class Miniature:
    refs: np.ndarray  # dense block indices 0..blocks-1 into the tenant's file, in order
    writes: np.ndarray
    blocks: int
    full_references: int


def miniature(trace: Trace, rate: float) -> Miniature:
    keep = sample_value(trace.keys) < np.uint64(max(1, round(rate * SHARDS_P)))
    kept = trace.keys[keep]
    # Dense block numbers: LRU only sees which references repeat, not where blocks are.
    uniq, dense = np.unique(kept, return_inverse=True)
    return Miniature(dense.astype(np.int64), trace.writes[keep], int(uniq.size), int(trace.keys.size))
