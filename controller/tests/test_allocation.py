"""The allocation functions: curves, water-filling, the optimal allocator, guarantees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lachesis_controller.allocation import (
    BandwidthSLA,
    Curve,
    CurveError,
    FixedSize,
    GuaranteesInfeasible,
    MinHitRatio,
    TenantDemand,
    allocate,
    equal_split,
    weighted_hit_rate,
)
from lachesis_controller.allocation.curves import hit_table
from lachesis_controller.allocation.solvers import exact_dp, hull_fill, utility, water_fill


def compositions(n: int, total: int) -> np.ndarray:
    """Every way to split `total` increments among n tenants, one row each (numpy, so n = 6
    and 50 increments, 3.5 million rows, takes a second)."""
    rows = np.zeros((1, 0), dtype=np.int16)
    for _ in range(n - 1):
        used = rows.sum(axis=1)
        reps = (total - used + 1).astype(np.int64)
        base = np.repeat(rows, reps, axis=0)
        offsets = np.concatenate([np.arange(r) for r in reps]).astype(np.int16)
        rows = np.column_stack([base, offsets])
    last = total - rows.sum(axis=1)
    return np.column_stack([rows, last]).astype(np.int64)


def exhaustive(table: np.ndarray, steps: int) -> float:
    combos = compositions(table.shape[0], steps)
    return float(sum(table[i, combos[:, i]] for i in range(table.shape[0])).max())


def random_concave_table(rng: np.random.Generator, n: int, steps: int) -> np.ndarray:
    gains = -np.sort(-rng.exponential(1.0, size=(n, steps)), axis=1) * rng.uniform(0.1, 2, size=(n, 1))
    return np.concatenate([np.zeros((n, 1)), np.cumsum(gains, axis=1)], axis=1)


def random_table(rng: np.random.Generator, n: int, steps: int) -> np.ndarray:
    """Non-concave: plateaus and cliffs, as real LRU curves of scans and loops have."""
    gains = rng.exponential(1.0, size=(n, steps)) * (rng.random((n, steps)) < 0.2)
    return np.concatenate([np.zeros((n, 1)), np.cumsum(gains, axis=1)], axis=1)


# --- curves ---------------------------------------------------------------------------------


def test_curve_is_made_monotone_and_starts_at_zero() -> None:
    c = Curve.from_points([10, 20, 30], [0.8, 0.85, 0.5])
    assert list(c.sizes) == [0, 10, 20, 30]
    assert list(c.miss_ratios) == [1.0, 0.8, 0.8, 0.5]
    assert float(c.hit_ratio(5)) == pytest.approx(0.1)
    assert float(c.hit_ratio(1000)) == pytest.approx(0.5)  # flat past the last point


@pytest.mark.parametrize(
    ("sizes", "misses", "where"),
    [
        ([0, 10, 10], [1, 0.5, 0.4], "sizes[2]"),
        ([0, -1], [1, 0.5], "sizes[1]"),
        ([0, 10], [1, 1.5], "miss_ratios[1]"),
        ([0, 10], [1], "equal length"),
        ([], [], "at least one point"),
        ([0, float("nan")], [1, 0.5], "finite"),
    ],
)
def test_bad_curves_say_where(sizes: list[float], misses: list[float], where: str) -> None:
    with pytest.raises(CurveError, match=where.replace("[", r"\[").replace("]", r"\]")):
        Curve.from_points(sizes, misses)


@settings(deadline=None)  # a shared 2-core machine: timing is not what is tested
@given(st.lists(st.floats(0, 1), min_size=2, max_size=20), st.floats(0, 1))
def test_size_for_hit_ratio_is_the_smallest_size_reaching_it(misses: list[float], target: float) -> None:
    c = Curve.from_points(np.arange(len(misses)) * 10.0, misses)
    size = c.size_for_hit_ratio(target)
    if size is None:
        assert c.max_hit_ratio < target
        return
    assert float(c.hit_ratio(size)) >= target - 1e-9
    if size > 1e-9:
        assert float(c.hit_ratio(size * (1 - 1e-6) - 1e-9)) < target + 1e-9


@settings(deadline=None)
@given(st.integers(1, 5), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_hit_table_matches_one_interp_per_curve(n: int, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    curves = [
        Curve.from_points(np.cumsum(rng.uniform(1, 100, size=10)), np.sort(rng.random(10))[::-1]) for _ in range(n)
    ]
    bases = rng.uniform(0, 300, size=n)
    table = hit_table(curves, bases, 17.0, steps)
    for i, c in enumerate(curves):
        np.testing.assert_allclose(table[i], c.hit_ratio(bases[i] + 17.0 * np.arange(steps + 1)), atol=1e-12)


# --- solvers --------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_water_filling_is_optimal_on_concave_curves(n: int, steps: int, seed: int) -> None:
    table = random_concave_table(np.random.default_rng(seed), n, steps)
    counts = water_fill(table, steps)
    assert counts.sum() == steps
    best = utility(table, exact_dp(table, steps))
    assert utility(table, counts) == pytest.approx(best, rel=1e-12)
    if n <= 4 and steps <= 20:
        assert best == pytest.approx(exhaustive(table, steps), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 50), st.integers(0, 2**32 - 1))
def test_optimal_allocator_matches_exhaustive_search_on_non_concave_curves(n: int, steps: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    table = random_table(rng, n, steps)
    capacity = 1000.0
    sizes = capacity / steps * np.arange(steps + 1)
    demands = {
        f"t{i}": TenantDemand(
            Curve.from_points(sizes, 1 - table[i] / (table[i, -1] + 1)), weight=float(table[i, -1] + 1)
        )
        for i in range(n)
    }
    a = allocate(demands, capacity, epsilon=capacity / steps)
    assert a.optimal
    assert sum(a.sizes.values()) == pytest.approx(capacity)
    if n <= 4 or steps <= 15:
        assert a.utility == pytest.approx(exhaustive(table, steps), rel=1e-9)
    assert a.utility == pytest.approx(utility(table, exact_dp(table, steps)), rel=1e-9)


def test_optimal_allocator_matches_exhaustive_search_at_six_tenants_and_fifty_steps() -> None:
    rng = np.random.default_rng(7)
    for _ in range(2):
        table = random_table(rng, 6, 50)
        brute = exhaustive(table, 50)
        assert utility(table, exact_dp(table, 50)) == pytest.approx(brute, rel=1e-12)
        counts, exact, bound = hull_fill(table, 50)
        assert bound >= brute - 1e-9  # the hull relaxation bounds the optimum
        if exact:
            assert utility(table, counts) == pytest.approx(brute, rel=1e-12)


def cliff_and_slope() -> dict[str, TenantDemand]:
    """A loop over 60% of the cache (nothing hits until it all fits) next to a tenant with a
    gently concave curve: water-filling never climbs the cliff."""
    return {
        "loop": TenantDemand(Curve.from_points([0, 599, 600, 1000], [1, 1, 0.1, 0.1])),
        "web": TenantDemand(Curve.from_points([0, 1000], [1, 0.5])),
    }


def test_optimal_beats_water_filling_on_a_cliff() -> None:
    demands = cliff_and_slope()
    wf = allocate(demands, 1000, method="waterfill")
    opt = allocate(demands, 1000)
    assert wf.sizes == pytest.approx({"loop": 0, "web": 1000})
    assert opt.sizes == pytest.approx({"loop": 600, "web": 400})
    assert wf.utility == pytest.approx(0.5)
    assert opt.utility == pytest.approx(0.9 + 0.2)
    assert not wf.optimal and opt.optimal
    assert opt.utility > weighted_hit_rate(demands, equal_split(demands, 1000))


def test_large_problems_fall_back_to_the_hull_with_a_bound() -> None:
    rng = np.random.default_rng(3)
    sizes = np.linspace(0, 1000, 101)
    demands = {
        f"t{i}": TenantDemand(Curve.from_points(sizes, 1 - np.cumsum(rng.random(101) < 0.1) / 20), weight=1.0)
        for i in range(50)
    }
    a = allocate(demands, 1000, epsilon=10, dp_budget=0)
    assert sum(a.sizes.values()) == pytest.approx(1000)
    assert a.upper_bound >= a.utility
    exact = allocate(demands, 1000, epsilon=10)
    assert exact.optimal and exact.utility <= a.upper_bound + 1e-9 and exact.utility >= a.utility - 1e-9


# --- guarantees -----------------------------------------------------------------------------


def linear(top: float = 0.9, size: float = 1000) -> Curve:
    return Curve.from_points([0, size], [1, 1 - top])


def test_guarantees_are_honoured_exactly_and_the_rest_goes_by_utility() -> None:
    demands = {
        "gold": TenantDemand(linear(0.9, 1000), weight=0.1, guarantee=MinHitRatio(0.45)),
        "fixed": TenantDemand(linear(0.9, 1000), weight=0.1, guarantee=FixedSize(123.0)),
        "sla": TenantDemand(linear(0.9, 1000), weight=0.1, guarantee=BandwidthSLA(sla=400, storage=100, memory=1600)),
        "hungry": TenantDemand(linear(0.9, 2000), weight=10.0),
    }
    a = allocate(demands, 2000, epsilon=1.0)
    assert a.sizes["fixed"] == 123.0
    assert a.reserved["gold"] == pytest.approx(500.0)  # 0.45 of a 0.9-per-1000 slope
    assert a.sizes["gold"] == pytest.approx(500.0)  # low weight: nothing beyond the guarantee
    assert a.hit_ratios["gold"] == pytest.approx(0.45)
    # Eq. 5.2: (400 − 100) / (1600 − 100) = 0.2 → 0.2/0.9·1000 bytes.
    assert a.reserved["sla"] == pytest.approx(1000 * 0.2 / 0.9)
    assert a.hit_ratios["sla"] >= 0.2 - 1e-12
    assert sum(a.sizes.values()) == pytest.approx(2000)
    assert a.sizes["hungry"] == pytest.approx(2000 - 123 - 500 - 1000 * 0.2 / 0.9)


def test_bandwidth_sla_below_storage_bandwidth_needs_no_cache() -> None:
    demands = {"a": TenantDemand(linear(), guarantee=BandwidthSLA(sla=50, storage=100, memory=1000))}
    assert allocate(demands, 100).reserved["a"] == 0.0


def test_infeasible_guarantees_are_named() -> None:
    demands = {
        "a": TenantDemand(linear(0.9, 1000), guarantee=MinHitRatio(0.9)),
        "b": TenantDemand(linear(0.9, 1000), guarantee=FixedSize(600)),
        "c": TenantDemand(linear(0.9, 1000)),
    }
    with pytest.raises(GuaranteesInfeasible) as e:
        allocate(demands, 1200)
    names = [u.tenant for u in e.value.unmet]
    assert "a" in names and "b" in names and "c" not in names
    assert "1600" in str(e.value) and "1200" in str(e.value)


@pytest.mark.parametrize(
    ("guarantee", "text"),
    [
        (MinHitRatio(0.95), "above the curve's best 0.9000"),
        (BandwidthSLA(sla=2000, storage=100, memory=1000), "Eq. 5.2"),
        (FixedSize(5000), "fixed size 5000 B exceeds the cache"),
    ],
)
def test_a_single_impossible_guarantee_says_why(guarantee: object, text: str) -> None:
    with pytest.raises(GuaranteesInfeasible, match=text.replace(".", r"\.")) as e:
        allocate({"x": TenantDemand(linear(), guarantee=guarantee), "y": TenantDemand(linear())}, 1000)  # type: ignore[arg-type]
    assert [u.tenant for u in e.value.unmet] == ["x"]


def test_idle_tenants_get_nothing_and_others_take_their_space() -> None:
    demands = {"a": TenantDemand(linear(0.9, 500)), "b": TenantDemand(linear(0.9, 1000), idle=True)}
    a = allocate(demands, 1000)
    assert a.sizes["b"] == 0.0 and a.reclaimed == ["b"]
    assert a.sizes["a"] == pytest.approx(1000)


def test_bad_parameters() -> None:
    with pytest.raises(ValueError, match="capacity"):
        allocate({}, 0)
    with pytest.raises(ValueError, match="epsilon"):
        allocate({}, 10, epsilon=20)
    assert allocate({}, 10).sizes == {}
