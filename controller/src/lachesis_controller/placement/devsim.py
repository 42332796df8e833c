"""Runs `lachesis-devsim` (agents/device/src/bin) on a placed stream mix: the simulated FDP
SSD's measured DLWA is the broker's prediction."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lachesis_controller.placement.streams import Stream

REPO = Path(__file__).resolve().parents[4]


class DevsimUnavailable(RuntimeError):
    pass


class DevsimFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Geometry:
    """The simulated device: as many reclaim units as the prediction can afford."""

    reclaim_units: int = 1024
    pages_per_ru: int = 64
    overprovisioning: float = 0.07
    handles: int = 8


def find_devsim(configured: Path | None = None) -> Path:
    """`configured` (LACHESIS_DEVSIM, config.Settings.devsim), else the workspace's release
    build, else PATH."""
    candidates = [configured] if configured else []
    candidates.append(REPO / "agents" / "target" / "release" / "lachesis-devsim")
    if (found := shutil.which("lachesis-devsim")) is not None:
        candidates.append(Path(found))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise DevsimUnavailable(
        "lachesis-devsim not found (set LACHESIS_DEVSIM or run "
        "`cargo build --release -p lachesis-device --bin lachesis-devsim` in agents/)"
    )


def request(
    streams: Sequence[Stream],
    handles: Mapping[str, int],
    geometry: Geometry,
    *,
    seed: int = 1,
    warmup_turns: float = 2.0,
    measure_turns: float = 4.0,
) -> dict[str, Any]:
    # Shares of host writes are relative; the simulator wants them to sum to 1.
    total = sum(s.writes for s in streams) or 1.0
    return {
        "device": {
            "reclaim_units": geometry.reclaim_units,
            "pages_per_ru": geometry.pages_per_ru,
            "overprovisioning": geometry.overprovisioning,
            "handles": geometry.handles,
        },
        "streams": [
            {
                "pattern": s.pattern,
                "space": s.space,
                "writes": s.writes / total,
                "handle": handles[s.name],
                "trim": s.trimmed and s.pattern == "sequential",
            }
            for s in streams
        ],
        "warmup_turns": warmup_turns,
        "measure_turns": measure_turns,
        "seed": seed,
    }


def run(body: Mapping[str, Any], *, binary: Path | None = None, timeout_s: float = 120.0) -> dict[str, Any]:
    exe = binary or find_devsim()
    try:
        proc = subprocess.run(
            [str(exe)], input=json.dumps(body), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired:
        raise DevsimFailed(f"the simulation took longer than {timeout_s:g} s") from None
    except OSError as e:
        raise DevsimFailed(f"cannot run {exe}: {e}") from None
    if proc.returncode != 0:
        raise DevsimFailed(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
