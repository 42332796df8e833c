"""Bandwidth guarantees of qos stages as cache guarantees (Moirai §5.3.2, Eq. 5.2).

A policy's qos stage with `min_bandwidth_bytes_per_s` reserves that much in each host's IO
scheduler (docs/policies.md, "The IO scheduler"); that alone cannot give a tenant more than the
storage behind it delivers. Moirai meets the rest with the tenant's own cache: with a hit ratio
h its bandwidth is h·BW_memory + (1−h)·BW_storage (Eq. 5.1), so it needs
h ≥ (SLA − BW_storage) / (BW_memory − BW_storage) (Eq. 5.2), and the allocation sizes its cache
for that hit ratio (`allocate.BandwidthSLA`, reserved before the rest is divided).

`qos_guarantees` turns the declared stages into those guarantees: one per owner of a qos stage
with a minimum bandwidth that also owns a cache stage to size (a tenant without one has no
cache of its own; the scheduler's reservation is all it gets). A guarantee an operator set
(`PUT /api/v1/allocations/guarantees/{tenant}`) wins over the derived one. Pure: the
bandwidths of the storage and of memory are the caller's (configuration, or measurements).

The allocation loop reads its guarantees through it (`service.DatabaseSide.guarantees`), with
the bandwidths of LACHESIS_ALLOCATION_STORAGE_BYTES_PER_S and _CACHE_BYTES_PER_S.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lachesis_controller.allocation.allocate import BandwidthSLA, Guarantee


class BandwidthsError(ValueError):
    """The storage and memory bandwidths cannot size a cache by Eq. 5.2."""


def qos_guarantees(
    declared: Iterable[Mapping[str, Any]],
    storage_bytes_per_s: float,
    memory_bytes_per_s: float,
    operator: Mapping[str, Guarantee] | None = None,
) -> dict[str, Guarantee]:
    """Tenant -> its guarantee: the operator's where set, else a `BandwidthSLA` from the
    largest `min_bandwidth_bytes_per_s` of its qos stages, when it owns a cache stage."""
    if not 0 <= storage_bytes_per_s < memory_bytes_per_s:
        raise BandwidthsError(
            f"storage bandwidth {storage_bytes_per_s:g} B/s must be at least 0 and below memory's "
            f"{memory_bytes_per_s:g} B/s (Eq. 5.2 divides by their difference)"
        )
    stages = list(declared)
    cached: set[str] = {o for s in stages if s.get("kind") == "cache" and isinstance(o := s.get("owner"), str)}
    sla: dict[str, float] = {}
    for s in stages:
        owner, minimum = s.get("owner"), s.get("min_bandwidth_bytes_per_s")
        if s.get("kind") == "qos" and isinstance(owner, str) and owner in cached and minimum:
            sla[owner] = max(sla.get(owner, 0.0), float(minimum))
    out: dict[str, Guarantee] = {
        t: BandwidthSLA(b, storage_bytes_per_s, memory_bytes_per_s) for t, b in sorted(sla.items())
    }
    out.update(operator or {})
    return out
