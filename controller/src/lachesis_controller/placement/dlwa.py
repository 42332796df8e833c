"""The FDP paper's closed-form DLWA (its Theorem 1), mirrored from `lachesis_device::model`:
δ = e^(−a(1−δ)), DLWA = 1/(1 − δ), a = physical / logical space of the randomly written data.

Generalised to a placement: logs on handles of their own cost nothing (DLWA 1); random
streams, and logs sharing a handle with a random stream (their pages end up in the same
reclaim units and are collected like random data), form one population that has all of the
device's overprovisioning to itself. That last assumption is the paper's and stops holding at
low overprovisioning, where open and reserved reclaim units eat the spare space: the broker's
prediction therefore runs the simulator (devsim.py) and reports this as the fast estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from lachesis_controller.placement.streams import Stream


def live_fraction(a: float) -> float | None:
    """Root of δ = e^(−a(1−δ)) in (0, 1); None unless a > 1. Newton from 0 climbs to it."""
    if not (math.isfinite(a) and a > 1.0):
        return None
    d = 0.0
    for _ in range(200):
        e = math.exp(-a * (1.0 - d))
        df = 1.0 - a * e
        if df <= 0:
            break
        nxt = d - (d - e) / df
        if abs(nxt - d) < 1e-15:
            return nxt
        d = nxt
    return d


def dlwa(a: float) -> float | None:
    d = live_fraction(a)
    return None if d is None else 1.0 / (1.0 - d)


def placement_dlwa(groups: Iterable[Sequence[Stream]], overprovisioning: float) -> float:
    """Device DLWA of streams grouped by handle: the write-weighted mean of 1 for isolated
    logs and the random population's DLWA for the rest."""
    space = writes = total_writes = 0.0
    for group in groups:
        mixed = any(s.pattern == "random" for s in group)
        for s in group:
            total_writes += s.writes
            if mixed:
                space += s.space
                writes += s.writes
    if writes == 0 or total_writes == 0:
        return 1.0
    amp = dlwa((space + overprovisioning) / space)
    if amp is None:
        return math.inf
    return (writes * amp + (total_writes - writes)) / total_writes
