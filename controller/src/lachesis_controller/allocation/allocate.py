"""The allocation problem end to end: guarantees first, the rest of the cache by utility.

Utility is the weighted hit rate Σ weight_i · hit_i(size_i); with weight = a tenant's request
rate it is hits per second, Moirai's "total hit rate". Guarantees (Moirai §5.3.1-5.3.2):

- `FixedSize`: a prioritised tenant gets exactly this much, whatever its curve says;
- `MinHitRatio`: at least the smallest size whose hit ratio reaches the target;
- `BandwidthSLA`: turned into a minimum hit ratio by Eq. 5.2,
  Hit ≥ (SLA − BW_storage) / (BW_memory − BW_storage).

What the guarantees reserve is exact (not rounded to the increment); the rest of the cache
is divided in increments of ε on top. Idle tenants get nothing and are listed as reclaimed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from lachesis_controller.allocation.curves import Curve, hit_table
from lachesis_controller.allocation.solvers import exact_dp, hull_fill, utility, water_fill

Method = Literal["optimal", "waterfill"]

# n·steps² cells the exact DP may cost before the optimal allocator settles for the hull
# greedy plus a reported bound (about 0.3 s of numpy on the reference machine).
DP_BUDGET = 30_000_000


@dataclass(frozen=True)
class FixedSize:
    size: float


@dataclass(frozen=True)
class MinHitRatio:
    ratio: float


@dataclass(frozen=True)
class BandwidthSLA:
    sla: float
    storage: float
    memory: float

    def hit_ratio(self) -> float:
        """Eq. 5.2."""
        return (self.sla - self.storage) / (self.memory - self.storage)


Guarantee = FixedSize | MinHitRatio | BandwidthSLA


@dataclass(frozen=True)
class TenantDemand:
    curve: Curve
    weight: float = 1.0
    guarantee: Guarantee | None = None
    idle: bool = False


@dataclass(frozen=True)
class Unmet:
    tenant: str
    guarantee: Guarantee
    needs: float | None  # bytes; None: no size is enough
    reason: str


class GuaranteesInfeasible(ValueError):
    def __init__(self, unmet: Sequence[Unmet], capacity: float) -> None:
        self.unmet = list(unmet)
        self.capacity = capacity
        super().__init__(
            "the guarantees cannot all be met: " + "; ".join(f"{u.tenant}: {u.reason}" for u in self.unmet)
        )


@dataclass(frozen=True)
class Allocation:
    sizes: dict[str, float]
    hit_ratios: dict[str, float]
    reserved: dict[str, float]
    reclaimed: list[str]
    utility: float  # Σ weight · hit ratio
    upper_bound: float  # no allocation of this problem does better
    optimal: bool
    method: str
    step: float
    extra: dict[str, float] = field(default_factory=dict)


def reserve(name: str, demand: TenantDemand, capacity: float) -> tuple[float, Unmet | None]:
    """Bytes the tenant's guarantee needs, or why it cannot be had."""
    g = demand.guarantee
    if g is None:
        return 0.0, None
    if isinstance(g, FixedSize):
        if g.size > capacity:
            return g.size, Unmet(name, g, g.size, f"fixed size {g.size:.0f} B exceeds the cache ({capacity:.0f} B)")
        return g.size, None
    if isinstance(g, BandwidthSLA):
        target = g.hit_ratio()
        what = f"bandwidth SLA {g.sla:g} needs hit ratio {target:.4f} (Eq. 5.2)"
    else:
        target = g.ratio
        what = f"minimum hit ratio {target:.4f}"
    if target <= 0:
        return 0.0, None
    size = demand.curve.size_for_hit_ratio(target)
    if size is None:
        return 0.0, Unmet(name, g, None, f"{what}, above the curve's best {demand.curve.max_hit_ratio:.4f}")
    if size > capacity:
        return size, Unmet(name, g, size, f"{what}: {size:.0f} B, more than the cache ({capacity:.0f} B)")
    return size, None


def allocate(
    demands: Mapping[str, TenantDemand],
    capacity: float,
    *,
    epsilon: float | None = None,
    method: Method = "optimal",
    dp_budget: int = DP_BUDGET,
) -> Allocation:
    if not capacity > 0:
        raise ValueError("capacity must be positive")
    epsilon = epsilon if epsilon is not None else 0.001 * capacity
    if not 0 < epsilon <= capacity:
        raise ValueError("epsilon must be in (0, capacity]")
    names = sorted(demands)
    active = [n for n in names if not demands[n].idle]
    reclaimed = [n for n in names if demands[n].idle]

    reserved: dict[str, float] = {}
    unmet: list[Unmet] = []
    for n in active:
        size, problem = reserve(n, demands[n], capacity)
        reserved[n] = size
        if problem:
            unmet.append(problem)
    total_reserved = sum(reserved.values())
    if not unmet and total_reserved > capacity * (1 + 1e-12):
        unmet = [
            Unmet(n, g, reserved[n], f"needs {reserved[n]:.0f} B")
            for n in active
            if (g := demands[n].guarantee) is not None and reserved[n] > 0
        ]
        unmet.append(
            Unmet(
                "(all)",
                FixedSize(total_reserved),
                total_reserved,
                f"together {total_reserved:.0f} B, more than the cache ({capacity:.0f} B)",
            )
        )
    if unmet:
        raise GuaranteesInfeasible(unmet, capacity)

    pool = max(capacity - total_reserved, 0.0)
    growing = [n for n in active if not isinstance(demands[n].guarantee, FixedSize)]
    # Equal increments of at most ε that add up to the pool exactly.
    steps = int(np.ceil(pool / epsilon - 1e-9)) if pool > 0 else 0
    step = pool / steps if steps else 0.0

    curves = [demands[n].curve for n in growing]
    weights = np.array([demands[n].weight for n in growing], dtype=np.float64)
    bases = np.array([reserved[n] for n in growing], dtype=np.float64)
    # Past its last point a curve is flat: columns beyond the longest curve change nothing,
    # and small working sets next to a large cache are the common case.
    lasts = np.array([c.sizes[-1] for c in curves]) if growing else np.zeros(0)
    width = int(min(steps, np.ceil(np.max((lasts - bases) / step, initial=0.0)))) if steps else 0
    raw = hit_table(curves, bases, step, width) if growing else np.zeros((0, 1))
    table = raw * weights[:, None]

    if method == "waterfill":
        counts = water_fill(table, steps)
        _, _, bound = hull_fill(table, steps)
        exact = False
    else:
        counts, exact, bound = hull_fill(table, steps)
        if not exact and len(growing) * (steps + 1) ** 2 <= dp_budget:
            counts, exact = exact_dp(table, steps), True
    spare = steps - int(counts.sum())
    if spare > 0 and growing:
        # Every curve is flat by now: the rest of the cache helps nobody, but it is still
        # handed out so the sizes add up to the capacity.
        counts[int(np.argmax(weights))] += spare
    value = utility(table, np.minimum(counts, width)) if growing else 0.0
    optimal = exact or value >= bound - 1e-9 * max(1.0, abs(bound))

    sizes = {n: 0.0 for n in reclaimed}
    hit = {n: 0.0 for n in reclaimed}
    for n in active:
        sizes[n] = reserved[n]
    grown = raw[np.arange(len(growing)), np.minimum(counts, width)] if growing else np.zeros(0)
    for n, k, h in zip(growing, counts.tolist(), grown.tolist(), strict=True):
        sizes[n] = reserved[n] + k * step
        hit[n] = h
    fixed = 0.0
    for n in set(active).difference(growing):
        hit[n] = float(demands[n].curve.hit_ratio(sizes[n]))
        fixed += demands[n].weight * hit[n]
    return Allocation(
        sizes=sizes,
        hit_ratios=hit,
        reserved=reserved,
        reclaimed=reclaimed,
        utility=value + fixed,
        upper_bound=max(bound, value) + fixed,
        optimal=optimal,
        method=method,
        step=step,
    )


def weighted_hit_rate(demands: Mapping[str, TenantDemand], sizes: Mapping[str, float]) -> float:
    """Σ weight · hit ratio of `sizes` under the demands' curves (idle tenants count 0)."""
    return float(sum(d.weight * float(d.curve.hit_ratio(sizes.get(n, 0.0))) for n, d in demands.items() if not d.idle))


def equal_split(demands: Mapping[str, TenantDemand], capacity: float) -> dict[str, float]:
    active = [n for n, d in demands.items() if not d.idle]
    return {n: (capacity / len(active) if n in active else 0.0) for n in demands}
