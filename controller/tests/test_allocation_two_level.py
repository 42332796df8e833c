"""Two-level caches: the split α of Moirai's Eq. 5.3-5.7."""

from __future__ import annotations

import numpy as np
import pytest

from lachesis_controller.allocation import Curve, GuaranteesInfeasible, split_two_level
from lachesis_controller.allocation.two_level import bandwidth

CURVE = Curve.from_points(np.linspace(0, 1000, 51), 1 - 0.9 * np.sqrt(np.linspace(0, 1, 51)))
BW = dict(memory=10_000.0, network=2_000.0, storage=200.0)


def test_split_meets_the_sla_with_the_least_space() -> None:
    s = split_two_level("a", CURVE, sla=3_000, hypervisor_max=300, storage_max=1000, epsilon=10, **BW)
    assert s.bandwidth >= 3_000
    assert s.hypervisor == pytest.approx(s.alpha * s.total)
    assert s.storage == pytest.approx((1 - s.alpha) * s.total)
    assert 0 <= s.alpha <= 1 and s.hypervisor <= 300
    assert s.hit_ratio == pytest.approx(float(CURVE.hit_ratio(s.total)))
    # No split on the grid with less space in total reaches the SLA.
    a1 = np.arange(0, 301, 10.0)
    a2 = np.arange(0, 1001, 10.0)
    bw = bandwidth(CURVE, a1[:, None], a2[None, :], **BW)
    totals = (a1[:, None] + a2[None, :])[bw >= 3_000]
    assert totals.min() == pytest.approx(s.total)


def test_a_roomy_hypervisor_takes_everything_and_a_full_one_pushes_to_the_storage_server() -> None:
    roomy = split_two_level("a", CURVE, sla=3_000, hypervisor_max=1000, storage_max=1000, epsilon=10, **BW)
    tight = split_two_level("a", CURVE, sla=3_000, hypervisor_max=50, storage_max=1000, epsilon=10, **BW)
    assert roomy.hypervisor > 50 and roomy.alpha > 0.5
    assert tight.hypervisor <= 50 and tight.alpha < 1 and tight.total > roomy.total


def test_unreachable_sla_is_reported() -> None:
    with pytest.raises(GuaranteesInfeasible, match="'?a'?: bandwidth SLA 9000"):
        split_two_level("a", CURVE, sla=9_000, hypervisor_max=10, storage_max=1000, epsilon=10, **BW)


def test_bandwidths_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="memory ≥ network ≥ storage"):
        split_two_level(
            "a", CURVE, sla=1, hypervisor_max=10, storage_max=10, epsilon=1, memory=1.0, network=2.0, storage=0.5
        )
