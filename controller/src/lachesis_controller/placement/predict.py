"""A device's placement and its predicted DLWA in one call: the broker assigns handles, the
simulator runs the placed mix. Without the simulator the prediction is the closed form, and
says so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from lachesis_controller.placement import devsim
from lachesis_controller.placement.broker import Placement, assign
from lachesis_controller.placement.streams import Stream


@dataclass(frozen=True)
class DevicePrediction:
    placement: Placement
    predicted_dlwa: float
    predicted_by: str  # "simulator" | "model"
    model_dlwa: float
    warnings: list[str]


def predict(
    streams: Sequence[Stream],
    geometry: devsim.Geometry,
    *,
    simulate: bool = True,
    seed: int = 1,
    simulator: Path | None = None,
) -> DevicePrediction:
    """`simulator`: the configured lachesis-devsim (config.Settings.devsim), else found."""
    placement = assign(streams, geometry.handles, geometry.overprovisioning)
    warnings = [f"handle {s.handle} shared by {', '.join(s.streams)}: {s.reason}" for s in placement.shared]
    if simulate and streams:
        try:
            body = devsim.request(streams, placement.handles, replace(geometry), seed=seed)
            out = devsim.run(body, binary=devsim.find_devsim(simulator))
            return DevicePrediction(placement, float(out["dlwa"]), "simulator", placement.model_dlwa, warnings)
        except (devsim.DevsimUnavailable, devsim.DevsimFailed) as e:
            warnings.append(f"simulator not used ({e}); predicted DLWA is the closed-form model")
    return DevicePrediction(placement, placement.model_dlwa, "model", placement.model_dlwa, warnings)
