"""Dividing `steps` equal increments of cache among tenants, given each tenant's utility
after k increments (a row of `table`, k = 0..width, non-decreasing, flat beyond width). All
return the number of increments per tenant, summing to `steps`, or less when every row is
used up (more cache then gains nobody anything).

- `water_fill`: Moirai's Alg. 5.3.1, the next increment to whoever gains most from it.
  Optimal for concave curves, myopic on plateaus and cliffs of non-concave ones.
- `hull_fill`: the same greedy on each curve's upper concave hull (it jumps straight across
  a cliff to the hull's next vertex). Optimal whenever it ends with every tenant on a hull
  vertex, and it always yields the hull relaxation's value, an upper bound on the optimum.
- `exact_dp`: dynamic programming over (tenant, increments used), O(n·steps²); exact for any
  curves.
"""

from __future__ import annotations

import heapq

import numpy as np

# Tolerance for comparing utilities built from sums of float ratios.
TOL = 1e-12


def water_fill(table: np.ndarray, steps: int) -> np.ndarray:
    n = table.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    if n == 0 or steps == 0:
        return counts
    gains = np.diff(table, axis=1)
    width = gains.shape[1]
    if width == 0:
        return counts
    # Max-heap by gain; ties go to the lower index so results are reproducible.
    heap = [(-float(gains[i, 0]), i) for i in range(n)]
    heapq.heapify(heap)
    for _ in range(steps):
        if not heap:
            break  # every row used up: the caller hands out the rest
        _, i = heapq.heappop(heap)
        counts[i] += 1
        if counts[i] < width:
            heapq.heappush(heap, (-float(gains[i, counts[i]]), i))
    return counts


def _best_jump(row: np.ndarray, k: int, limit: int) -> tuple[float, int]:
    """Highest average gain per increment from k over 1..limit more increments, and the
    longest jump achieving it (so the greedy lands on the hull's next vertex)."""
    ahead = row[k + 1 : k + 1 + limit] - row[k]
    if ahead.size == 0:
        return -1.0, 0
    slopes = ahead / np.arange(1, ahead.size + 1)
    best = float(slopes.max())
    jump = int(np.flatnonzero(slopes >= best - TOL)[-1]) + 1
    return best, jump


def hull_fill(table: np.ndarray, steps: int) -> tuple[np.ndarray, bool, float]:
    """Greedy along the concave hulls. Returns (counts, exact, upper_bound): `exact` when
    the result provably is optimal, `upper_bound` the hull relaxation's total utility."""
    n = table.shape[0]
    counts = np.zeros(n, dtype=np.int64)
    if n == 0 or steps == 0:
        return counts, True, float(table[:, 0].sum()) if n else 0.0
    width = table.shape[1] - 1
    # Opening slopes of every tenant at once: for 5,000 tenants the per-tenant loop below
    # then only runs for the few tenants that actually receive increments.
    k_idx = np.arange(1, width + 1)
    slopes0 = (table[:, 1:] - table[:, :1]) / k_idx
    best0 = slopes0.max(axis=1)
    jump0 = width - np.argmax((slopes0 >= best0[:, None] - TOL)[:, ::-1], axis=1)
    heap = [(-float(best0[i]), i, int(jump0[i])) for i in range(n)]
    heapq.heapify(heap)
    left = steps
    bound = float(table[:, 0].sum())
    exact = True
    bounded = False
    while left > 0 and heap:
        neg, i, jump = heapq.heappop(heap)
        if jump > left:
            if not bounded:
                # The relaxation fills the rest fractionally along this hull segment.
                bound += -neg * left
                bounded = True
            exact = False
            # Try the best jump that still fits.
            slope, jump = _best_jump(table[i], int(counts[i]), left)
            if jump == 0:
                continue
            heapq.heappush(heap, (-slope, i, jump))
            continue
        counts[i] += jump
        left -= jump
        if not bounded:
            bound += -neg * jump
        slope, nxt = _best_jump(table[i], int(counts[i]), width - int(counts[i]))
        if nxt:
            heapq.heappush(heap, (-slope, i, nxt))
    if left > 0:
        # Every curve is flat to its end: the spare increments change nothing; park them
        # with the first tenants that can still take some so the sizes add up to capacity.
        for i in range(n):
            take = min(left, width - int(counts[i]))
            counts[i] += take
            left -= take
    return counts, exact, bound


def exact_dp(table: np.ndarray, steps: int) -> np.ndarray:
    """max Σ table[i, k_i] subject to Σ k_i ≤ steps, by max-plus convolution."""
    n = table.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    width = min(table.shape[1] - 1, steps)
    # value[c] = best utility of tenants so far with exactly c increments in total.
    value = np.full(steps + 1, -np.inf)
    value[: width + 1] = table[0, : width + 1]
    choices = np.zeros((n, steps + 1), dtype=np.int64)
    choices[0, : width + 1] = np.arange(width + 1)
    c = np.arange(steps + 1)
    for i in range(1, n):
        k = np.arange(width + 1)
        # cand[c, k] = value[c - k] + table[i, k]
        prev_idx = c[:, None] - k[None, :]
        cand = np.where(prev_idx >= 0, value[np.clip(prev_idx, 0, None)], -np.inf) + table[i, k][None, :]
        choices[i] = np.argmax(cand, axis=1)
        value = cand[c, choices[i]]
    counts = np.zeros(n, dtype=np.int64)
    total = int(np.argmax(value))
    for i in range(n - 1, -1, -1):
        counts[i] = choices[i, total]
        total -= counts[i]
    spare = steps - int(counts.sum())
    for i in range(n):
        take = min(spare, table.shape[1] - 1 - int(counts[i]))
        counts[i] += take
        spare -= take
    return counts


def utility(table: np.ndarray, counts: np.ndarray) -> float:
    return float(table[np.arange(table.shape[0]), counts].sum())
