"""Cache allocation from miss-ratio curves: curves, solvers, guarantees, two-level splits and
the control loop. Pure functions over numpy arrays; the API and the loop call into them."""

from .allocate import (
    Allocation, BandwidthSLA, FixedSize, Guarantee, GuaranteesInfeasible, MinHitRatio, TenantDemand, Unmet,
    allocate, equal_split, weighted_hit_rate,
)
from .curves import Curve, CurveError
from .loop import AllocationLoop, Decision, LoopConfig, TenantCurve
from .two_level import TwoLevelSplit, split_two_level

__all__ = [
    "Allocation", "AllocationLoop", "BandwidthSLA", "Curve", "CurveError", "Decision", "FixedSize", "Guarantee",
    "GuaranteesInfeasible", "LoopConfig", "MinHitRatio", "TenantCurve", "TenantDemand", "TwoLevelSplit", "Unmet",
    "allocate", "equal_split", "split_two_level", "weighted_hit_rate",
]
