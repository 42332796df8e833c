"""The FDP placement broker: reclaim unit handles for tenants' cache streams, and each
device's predicted DLWA (closed form, and the simulator on the placed mix)."""

from lachesis_controller.placement.broker import Placement, PlacementError, SharedHandle, assign, naive
from lachesis_controller.placement.devsim import DevsimFailed, DevsimUnavailable, Geometry, find_devsim
from lachesis_controller.placement.predict import DevicePrediction, predict
from lachesis_controller.placement.streams import PART_PATTERNS, Stream

__all__ = [
    "PART_PATTERNS",
    "DevicePrediction",
    "DevsimFailed",
    "DevsimUnavailable",
    "Geometry",
    "Placement",
    "PlacementError",
    "SharedHandle",
    "Stream",
    "assign",
    "find_devsim",
    "naive",
    "predict",
]
