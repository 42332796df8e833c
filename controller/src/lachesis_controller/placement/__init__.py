"""The FDP placement broker: reclaim unit handles for tenants' cache streams, and each
device's predicted DLWA (closed form, and the simulator on the placed mix)."""

from .broker import Placement, PlacementError, SharedHandle, assign, naive
from .devsim import DevsimFailed, DevsimUnavailable, Geometry, find_devsim
from .predict import DevicePrediction, predict
from .streams import PART_PATTERNS, Stream

__all__ = [
    "PART_PATTERNS", "DevicePrediction", "DevsimFailed", "DevsimUnavailable", "Geometry", "Placement",
    "PlacementError", "SharedHandle", "Stream", "assign", "find_devsim", "naive", "predict",
]
