"""Two-level caches (Moirai §5.3.5): a tenant's cache split between the hypervisor (C1,
memory bandwidth) and the storage server (C2, network bandwidth), run as one global LRU, so
C1 holds the hottest α·a bytes and C2 the next (1 − α)·a (Eq. 5.3-5.4).

Eq. 5.7 is read as the hit-weighted mean bandwidth of the two caches (its right side divided
by U(a)); with Eq. 5.5 a tenant then gets
    BW(a1, a2) = U(a1)·BW_memory + (U(a1 + a2) − U(a1))·BW_network + (1 − U(a1 + a2))·BW_storage,
which must reach the SLA. Among the (a1, a2) on an ε grid that do, the smallest total wins,
then the one using less hypervisor memory (the scarcer of the two).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

import numpy as np

from lachesis_controller.allocation.allocate import BandwidthSLA, GuaranteesInfeasible, Unmet
from lachesis_controller.allocation.curves import Curve


@dataclass(frozen=True)
class TwoLevelSplit:
    total: float  # a
    alpha: float  # share of a in the hypervisor cache
    hypervisor: float  # a1 = α·a
    storage: float  # a2 = (1 − α)·a
    hit_ratio: float  # U(a)
    bandwidth: float


@overload
def bandwidth(curve: Curve, a1: float, a2: float, memory: float, network: float, storage: float) -> np.float64: ...
@overload
def bandwidth(
    curve: Curve, a1: np.ndarray, a2: np.ndarray, memory: float, network: float, storage: float
) -> np.ndarray: ...
def bandwidth(
    curve: Curve, a1: np.ndarray | float, a2: np.ndarray | float, memory: float, network: float, storage: float
) -> np.float64 | np.ndarray:
    """Sizes give a bandwidth, arrays of sizes (broadcast) an array of them."""
    u1 = curve.hit_ratio(a1)
    u = curve.hit_ratio(np.asarray(a1) + np.asarray(a2))
    out: np.float64 | np.ndarray = u1 * memory + (u - u1) * network + (1.0 - u) * storage
    return out


def split_two_level(
    tenant: str,
    curve: Curve,
    *,
    sla: float,
    memory: float,
    network: float,
    storage: float,
    hypervisor_max: float,
    storage_max: float,
    epsilon: float,
) -> TwoLevelSplit:
    if not memory >= network >= storage > 0:
        raise ValueError("bandwidths must satisfy memory ≥ network ≥ storage > 0")
    if epsilon <= 0 or hypervisor_max < 0 or storage_max < 0:
        raise ValueError("epsilon must be positive and the maxima non-negative")
    a1 = np.linspace(0.0, hypervisor_max, int(np.ceil(hypervisor_max / epsilon)) + 1)
    a2 = np.linspace(0.0, storage_max, int(np.ceil(storage_max / epsilon)) + 1)
    bw = bandwidth(curve, a1[:, None], a2[None, :], memory, network, storage)
    ok = bw >= sla * (1 - 1e-12)
    if not ok.any():
        best = float(bw.max())
        g = BandwidthSLA(sla, storage, memory)
        raise GuaranteesInfeasible(
            [Unmet(tenant, g, None, f"bandwidth SLA {sla:g} is above the best two-level split ({best:g})")],
            hypervisor_max + storage_max,
        )
    ii, jj = np.nonzero(ok)
    # Smallest total first, then least hypervisor memory.
    pick = np.lexsort((a1[ii], a1[ii] + a2[jj]))[0]
    i, j = ii[pick], jj[pick]
    h, s = float(a1[i]), float(a2[j])
    a = h + s
    return TwoLevelSplit(
        total=a,
        alpha=h / a if a > 0 else 0.0,
        hypervisor=h,
        storage=s,
        hit_ratio=float(curve.hit_ratio(a)),
        bandwidth=float(bw[i, j]),
    )


@dataclass(frozen=True)
class TwoLevelSpec:
    """A tenant's two-level cache as its policy declares it (the level-1 stage's two_level)."""

    memory: float
    network: float
    storage: float
    sla: float | None  # None: the best the maxima allow
    server_max: float


def split_allocation(
    sizes: dict[str, float],
    curves: dict[str, Curve],
    specs: dict[str, TwoLevelSpec],
    epsilon: float,
) -> dict[str, TwoLevelSplit]:
    """The two-level tenants' splits, each within its single-level share (the most hypervisor
    memory it may have) and its server maximum; `sizes` becomes a1 for them. A tenant whose
    SLA no split reaches raises GuaranteesInfeasible (the loop keeps what is in force)."""
    out = {}
    for name, spec in sorted(specs.items()):
        if name not in sizes or name not in curves or sizes[name] <= 0:
            continue
        h_max, s_max = sizes[name], spec.server_max
        sla = spec.sla
        if sla is None:
            sla = float(bandwidth(curves[name], h_max, s_max, spec.memory, spec.network, spec.storage))
        split = split_two_level(
            name,
            curves[name],
            sla=sla,
            memory=spec.memory,
            network=spec.network,
            storage=spec.storage,
            hypervisor_max=h_max,
            storage_max=s_max,
            epsilon=epsilon,
        )
        out[name] = split
        sizes[name] = split.hypervisor
    return out
