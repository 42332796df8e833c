"""Cache allocation from miss-ratio curves: curves, solvers, guarantees, two-level splits and
the control loop. Pure functions over numpy arrays; the API and the loop call into them."""

from lachesis_controller.allocation.allocate import (
    Allocation,
    BandwidthSLA,
    FixedSize,
    Guarantee,
    GuaranteesInfeasible,
    MinHitRatio,
    TenantDemand,
    Unmet,
    allocate,
    equal_split,
    weighted_hit_rate,
)
from lachesis_controller.allocation.curves import Curve, CurveError
from lachesis_controller.allocation.loop import AllocationLoop, Decision, LoopConfig, TenantCurve
from lachesis_controller.allocation.two_level import TwoLevelSplit, split_two_level

__all__ = [
    "Allocation",
    "AllocationLoop",
    "BandwidthSLA",
    "Curve",
    "CurveError",
    "Decision",
    "FixedSize",
    "Guarantee",
    "GuaranteesInfeasible",
    "LoopConfig",
    "MinHitRatio",
    "TenantCurve",
    "TenantDemand",
    "TwoLevelSplit",
    "Unmet",
    "allocate",
    "equal_split",
    "split_two_level",
    "weighted_hit_rate",
]
