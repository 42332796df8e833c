"""Qos stages' minimum bandwidths as cache guarantees by Eq. 5.2 (allocation/qos_guarantees.py)."""

from __future__ import annotations

import pytest

from lachesis_controller.allocation.allocate import BandwidthSLA, FixedSize, TenantDemand, allocate
from lachesis_controller.allocation.curves import Curve
from lachesis_controller.allocation.qos_guarantees import BandwidthsError, qos_guarantees

MiB = 1 << 20
STORAGE, MEMORY = 100 * MiB, 1100 * MiB


def declared() -> list[dict]:
    return [
        {"name": "cache/gold", "kind": "cache", "owner": "gold", "size_bytes": 64 * MiB},
        {"name": "qos/gold", "kind": "qos", "owner": "gold", "min_bandwidth_bytes_per_s": 600 * MiB},
        # No cache of its own: the scheduler's reservation is all it gets.
        {"name": "qos/plain", "kind": "qos", "owner": "plain", "min_bandwidth_bytes_per_s": 600 * MiB},
        {"name": "qos/batch", "kind": "qos", "owner": "batch", "priority": "low"},
        {"name": "cache/batch", "kind": "cache", "owner": "batch", "size_bytes": 64 * MiB},
    ]


def test_a_reserved_tenant_with_a_cache_gets_the_hit_ratio_eq_5_2_asks() -> None:
    g = qos_guarantees(declared(), STORAGE, MEMORY)
    assert g == {"gold": BandwidthSLA(600 * MiB, STORAGE, MEMORY)}
    # (600 - 100) / (1100 - 100)
    assert g["gold"].hit_ratio() == pytest.approx(0.5)


def test_the_operators_guarantee_wins() -> None:
    g = qos_guarantees(declared(), STORAGE, MEMORY, {"gold": FixedSize(8 * MiB), "batch": FixedSize(4 * MiB)})
    assert g == {"gold": FixedSize(8 * MiB), "batch": FixedSize(4 * MiB)}


def test_the_allocation_sizes_the_guaranteed_cache_for_that_hit_ratio() -> None:
    # gold's curve: hit ratio 0.5 at 32 MiB; the heavier tenant would take it all otherwise.
    gold = Curve.from_points([0, 32 * MiB, 64 * MiB], [1.0, 0.5, 0.4])
    heavy = Curve.from_points([0, 64 * MiB], [1.0, 0.0])
    g = qos_guarantees(declared(), STORAGE, MEMORY)
    a = allocate(
        {"gold": TenantDemand(gold, weight=1.0, guarantee=g["gold"]), "heavy": TenantDemand(heavy, weight=100.0)},
        64 * MiB,
    )
    assert a.reserved["gold"] == pytest.approx(32 * MiB)
    assert a.hit_ratios["gold"] >= 0.5 - 1e-9


def test_bandwidths_eq_5_2_cannot_divide_by_are_refused() -> None:
    with pytest.raises(BandwidthsError, match="below memory"):
        qos_guarantees(declared(), MEMORY, MEMORY)
