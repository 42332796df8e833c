"""Is a tenant's curve right? Its stage's measured hit ratio against the curve's prediction at
the size the stage is installed at (issue 34).

The allocator trusts the curves; a curve that is off (a sampler that kept too few of a small
tenant's blocks, IO the tap does not see, a stage whose engine is not LRU) moves space for
nothing. So each cache stage with an owner is judged from the agent's reports of it
(`TelemetryStore.stages()`'s history), by counts only:

- only the newest run of reports at one installed size counts: a resize or a rebuild starts
  a new run (what was measured at another size says nothing of this one);
- the first `warm_factor` × the stage's size in 4 KiB blocks of the run's references are its
  warm-up (a fresh or grown stage misses what it has not been given yet; the curve is the
  warm cache's), and the reports up to there are skipped;
- after the warm-up at least `min_references` more are needed before a verdict;
- the curve is off when |measured − predicted| > `tolerance`.

Pure: the reports and the curves in, one `CurveCheck` per tenant out; `api/allocations.py`
serves them and the allocation service sets the metrics from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from lachesis_controller.allocation.curves import Curve

BLOCK = 4096


class StageCounters(Protocol):
    """What a stage report carries that the check reads (bus TelemetryStage)."""

    kind: str
    owner: str | None
    installed_bytes: int | None
    hits: int | None
    misses: int | None


@dataclass(frozen=True)
class CheckConfig:
    tolerance: float = 0.1
    warm_factor: float = 2.0
    min_references: int = 10_000


@dataclass(frozen=True)
class CurveCheck:
    tenant: str
    installed_bytes: int
    # Over the references counted (after the warm-up); None until there are enough.
    measured_hit_ratio: float | None
    predicted_hit_ratio: float | None
    references: int
    # None: no verdict yet (warming up, too few references, or no curve).
    off: bool | None
    reason: str


def _refs(s: StageCounters) -> int:
    return (s.hits or 0) + (s.misses or 0)


def check_stage(
    tenant: str,
    history: Sequence[tuple[datetime, StageCounters]],
    curve: Curve | None,
    config: CheckConfig = CheckConfig(),
) -> CurveCheck | None:
    """The verdict on one stage from its reports, oldest first; None when it reports no
    cache counters."""
    if not history or history[-1][1].hits is None or history[-1][1].installed_bytes is None:
        return None
    last = history[-1][1]
    size = int(last.installed_bytes or 0)
    # The newest run at this size, counters never going back (a rebuilt stage starts at 0).
    start = len(history) - 1
    while start > 0:
        prev, cur = history[start - 1][1], history[start][1]
        if prev.installed_bytes != size or prev.hits is None or _refs(prev) > _refs(cur):
            break
        start -= 1
    run = [s for _, s in history[start:]]
    warm = config.warm_factor * size / BLOCK
    base = next((s for s in run if _refs(s) - _refs(run[0]) >= warm), None)
    predicted = None if curve is None else float(curve.hit_ratio(float(size)))
    if base is None:
        return CurveCheck(
            tenant, size, None, predicted, 0, None, f"warming up: {warm:.0f} references at {size} B before measuring"
        )
    refs = _refs(last) - _refs(base)
    hits = (last.hits or 0) - (base.hits or 0)
    measured = hits / refs if refs else None
    if refs < config.min_references or measured is None:
        return CurveCheck(
            tenant, size, measured, predicted, refs, None, f"{refs} references measured, {config.min_references} needed"
        )
    if predicted is None:
        return CurveCheck(tenant, size, measured, None, refs, None, "no curve for the tenant")
    off = abs(measured - predicted) > config.tolerance
    how = "off" if off else "within"
    return CurveCheck(
        tenant,
        size,
        measured,
        predicted,
        refs,
        off,
        f"measured {measured:.3f}, curve {predicted:.3f}: {how} {config.tolerance:g}",
    )


def check_curves(
    stages: Iterable[Any], curves: Mapping[str, Curve], config: CheckConfig = CheckConfig()
) -> dict[str, CurveCheck]:
    """Per owner tenant, the verdict on its cache stage (`stages`: the store's `HostStage`s,
    each with `.history`); a tenant with stages on several hosts gets the one with the most
    references measured."""
    out: dict[str, CurveCheck] = {}
    for entry in stages:
        counters = entry.counters
        if counters.kind != "cache" or not counters.owner:
            continue
        c = check_stage(counters.owner, list(entry.history), curves.get(counters.owner), config)
        if c is not None and (counters.owner not in out or c.references > out[counters.owner].references):
            out[counters.owner] = c
    return out
