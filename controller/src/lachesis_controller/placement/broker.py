"""The placement broker: reclaim unit handles for the streams on one device.

Distinct handles while they last. With more streams than handles, streams share handles
only with streams of the same write pattern (logs with logs, random rewrites with random
rewrites) and, among those, with the ones whose invalidation rates are closest: the streams
of each pattern are sorted by rate and cut into contiguous groups (optimal for 1-D
clustering), and the split of handles between the patterns is the one the closed-form model
prefers, ties going to the tightest groups. Only a single handle forces patterns to mix.
Sharing is never silent: every shared handle is reported with a reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from lachesis_controller.contracts.engine_parts import Pattern
from lachesis_controller.placement.dlwa import placement_dlwa
from lachesis_controller.placement.streams import Stream


class PlacementError(ValueError):
    pass


@dataclass(frozen=True)
class SharedHandle:
    handle: int
    streams: list[str]
    reason: str


@dataclass(frozen=True)
class Placement:
    handles: dict[str, int]  # stream name -> handle
    shared: list[SharedHandle] = field(default_factory=list)
    model_dlwa: float = 1.0

    def groups(self, streams: Sequence[Stream]) -> list[list[Stream]]:
        by: dict[int, list[Stream]] = {}
        for s in streams:
            by.setdefault(self.handles[s.name], []).append(s)
        return [by[h] for h in sorted(by)]


def validate(streams: Sequence[Stream], handles: int) -> None:
    if handles < 1:
        raise PlacementError("the device has no placement handle")
    names = [s.name for s in streams]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise PlacementError(f"streams {', '.join(dup)} appear more than once")
    for s in streams:
        if not (0 < s.space <= 1) or not (0 <= s.writes <= 1):
            raise PlacementError(f"stream {s.name}: space must be in (0, 1] and writes in [0, 1]")
    if streams and sum(s.writes for s in streams) <= 0:
        raise PlacementError("no stream writes anything")
    if sum(s.space for s in streams) > 1 + 1e-9:
        raise PlacementError("the streams' spaces add up to more than the device")


def _clusterings(values: np.ndarray, weights: np.ndarray, kmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Optimal contiguous splits of sorted `values` into 1..kmax groups, minimising the
    write-weighted sum of squared deviations from each group's mean. Returns the DP tables
    (cost, cut); `_groups` reads one split out. Computed once per pattern for every k."""
    n = len(values)
    w = np.maximum(weights, 1e-9)
    # Prefix sums make a group's cost O(1): Σw·v² − (Σw·v)²/Σw.
    sw = np.concatenate(([0.0], np.cumsum(w)))
    swv = np.concatenate(([0.0], np.cumsum(w * values)))
    swv2 = np.concatenate(([0.0], np.cumsum(w * values * values)))
    best = np.full((kmax + 1, n + 1), np.inf)
    cut = np.zeros((kmax + 1, n + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for g in range(1, kmax + 1):
        for j in range(g, n + 1):
            i = np.arange(g - 1, j)
            ww = sw[j] - sw[i]
            cost = np.maximum((swv2[j] - swv2[i]) - (swv[j] - swv[i]) ** 2 / ww, 0.0)
            total = best[g - 1, i] + cost
            k = int(np.argmin(total))
            best[g, j], cut[g, j] = total[k], i[k]
    return best, cut


def _groups(cut: np.ndarray, n: int, k: int) -> list[list[int]]:
    groups, j = [], n
    for g in range(k, 0, -1):
        i = int(cut[g, j])
        groups.append(list(range(i, j)))
        j = i
    return groups[::-1]


def assign(
    streams: Sequence[Stream], handles: int, overprovisioning: float, previous: Mapping[str, int] | None = None
) -> Placement:
    """`previous`: stream name -> the handle it has now. The groups keep those numbers where
    they can (see `_numbers`); without it they are numbered in order."""
    validate(streams, handles)
    if len(streams) <= handles:
        groups: list[list[Stream]] = [[s] for s in streams]
        numbers = _numbers(groups, handles, previous or {})
        return Placement(
            {s.name: numbers[i] for i, s in enumerate(streams)}, [], placement_dlwa(groups, overprovisioning)
        )
    by_pattern: dict[Pattern, list[Stream]] = {}
    for s in streams:
        by_pattern.setdefault(s.pattern, []).append(s)
    patterns = sorted(by_pattern)
    if handles < len(patterns):
        placement: dict[str, int] = {s.name: 0 for s in streams}
        shared: list[SharedHandle] = [
            SharedHandle(
                0, [s.name for s in streams], "one handle for logs and random rewrites alike: the device has only one"
            )
        ]
        return Placement(placement, shared, placement_dlwa([list(streams)], overprovisioning))

    members = {p: sorted(by_pattern[p], key=lambda s: (s.log_rate, s.name)) for p in patterns}
    tables = {
        p: _clusterings(np.array([s.log_rate for s in m]), np.array([s.writes for s in m]), min(len(m), handles))
        for p, m in members.items()
    }
    best: tuple[float, float, list[list[Stream]]] | None = None
    for split in _splits(handles, [len(by_pattern[p]) for p in patterns]):
        groups = []
        spread = 0.0
        for p, k in zip(patterns, split, strict=True):
            cost, cut = tables[p]
            n = len(members[p])
            groups += [[members[p][i] for i in g] for g in _groups(cut, n, k)]
            spread += float(cost[k, n])
        dlwa = placement_dlwa(groups, overprovisioning)
        if (
            best is None
            or (dlwa, spread) < (best[0] - 1e-12, best[1] - 1e-12)
            or (abs(dlwa - best[0]) <= 1e-12 and spread < best[1] - 1e-12)
        ):
            best = (dlwa, spread, groups)
    assert best is not None
    dlwa, _, groups = best
    placement = {}
    shared = []
    for h, g in zip(_numbers(groups, handles, previous or {}), groups, strict=True):
        for s in g:
            placement[s.name] = h
        if len(g) > 1:
            rates = [s.invalidation_rate for s in g]
            shared.append(
                SharedHandle(
                    h,
                    [s.name for s in g],
                    (
                        f"{len(streams)} streams, {handles} handles: {g[0].pattern} streams with invalidation rates "
                        f"{min(rates):.3g}-{max(rates):.3g} share handle {h}"
                    ),
                )
            )
    return Placement(placement, shared, dlwa)


def _numbers(groups: Sequence[Sequence[Stream]], handles: int, previous: Mapping[str, int]) -> list[int]:
    """A handle number per group. A stage whose handle changes is rebuilt cold on its host,
    so a group keeps the number most of its space had before (largest claims first) and
    the rest take the lowest free: a new tenant, or a regrouping, moves as little as it can."""
    claims = []
    for i, g in enumerate(groups):
        space: dict[int, float] = {}
        for s in g:
            h = previous.get(s.name)
            if h is not None and 0 <= h < handles:
                space[h] = space.get(h, 0.0) + max(s.space, 1e-12)
        claims += [(-v, i, h) for h, v in space.items()]
    number: dict[int, int] = {}
    for _, i, h in sorted(claims):
        if i not in number and h not in number.values():
            number[i] = h
    free = iter(h for h in range(handles) if h not in number.values())
    return [number[i] if i in number else next(free) for i in range(len(groups))]


def _splits(total: int, caps: list[int]) -> list[tuple[int, ...]]:
    """Ways to give each pattern at least one and at most its stream count of handles, using
    as many handles as are useful."""
    use = min(total, sum(caps))
    out: list[tuple[int, ...]] = []

    def rec(i: int, left: int, acc: tuple[int, ...]) -> None:
        if i == len(caps) - 1:
            if 1 <= left <= caps[i]:
                out.append((*acc, left))
            return
        for k in range(1, min(caps[i], left - (len(caps) - 1 - i)) + 1):
            rec(i + 1, left - k, (*acc, k))

    rec(0, use, ())
    return out


def naive(streams: Sequence[Stream], handles: int, overprovisioning: float) -> Placement:
    """What CacheLib does on its own: handles first come, first served, then everyone else on
    the default handle 0. The baseline the broker is measured against."""
    placement = {s.name: (i if i < handles else 0) for i, s in enumerate(streams)}
    groups: dict[int, list[Stream]] = {}
    for s in streams:
        groups.setdefault(placement[s.name], []).append(s)
    return Placement(placement, [], placement_dlwa(groups.values(), overprovisioning))
