"""Allocations in the stage's unit: whole regions, so that what is installed is what was
allocated (issue 34: 5.24 MB installed for 5.94 MB allocated).

A flash cache stage holds whole regions of its device (the reclaim unit, 1 MiB or more); a
size between two multiples is installed rounded down, and the allocator's prediction at the
size it asked for is then not what the stage does. So the loop's sizes are cut to whole
units, and the units the cuts free are handed back one at a time to the tenant that gains the
most weighted hit rate from one more (the greedy step of the allocator itself, on the unit
grid). Tenants with a fixed-size guarantee keep theirs cut to whole units and get no more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from lachesis_controller.allocation.allocate import FixedSize, TenantDemand


def in_units(
    demands: Mapping[str, TenantDemand], sizes: Mapping[str, float], capacity: float, unit: float
) -> dict[str, float]:
    """`sizes` as whole multiples of `unit` adding up to at most `capacity` (exactly the
    capacity's whole units when some active tenant can take more)."""
    if not unit > 0:
        raise ValueError("unit must be positive")
    out = {n: math.floor(s / unit + 1e-9) * unit for n, s in sizes.items()}
    spare = math.floor(capacity / unit + 1e-9) - round(sum(out.values()) / unit)
    growing = [n for n, d in demands.items() if n in out and not d.idle and not isinstance(d.guarantee, FixedSize)]
    while spare > 0 and growing:

        def gain(n: str) -> tuple[float, float]:
            d = demands[n]
            return (d.weight * float(d.curve.hit_ratio(out[n] + unit) - d.curve.hit_ratio(out[n])), d.weight)

        best = max(sorted(growing), key=gain)
        out[best] += unit
        spare -= 1
    return out
