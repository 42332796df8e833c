"""The allocation loop inside the controller: curves and request rates from the telemetry
store, capacity, guarantees and the allocation in force from the database, decisions written
back as the current allocation (served by /api/v1/allocations).

A tenant's weight is its rate of 4 KiB block references, the unit its curve counts in, so
Σ weight · hit ratio is the cache's hit rate in blocks per second: a tenant doing 1 MiB reads
weighs 256 times one doing 4 KiB reads at the same IOPS, and one served by the page cache
weighs nothing. Only reports without a block-reference counter fall back to IOPS.

The loop does nothing until an operator has stated the cache's capacity with a first
`POST /api/v1/allocations/proposals`; from then on it follows the telemetry. Each decision it
rolls out is a new (one-phase) generation for every host, carrying the sizes as `caches`.

Its timing comes from the environment (`config.Settings`, `loop_config`): LACHESIS_ALLOCATION_INTERVAL_S,
LACHESIS_ALLOCATION_REACTION_S (the reaction time, default 15 s), LACHESIS_ALLOCATION_GAIN, and
its brakes: LACHESIS_ALLOCATION_UNIT_BYTES (sizes in whole regions, default 1 MiB) and
LACHESIS_ALLOCATION_REFILL_HORIZON_S (what moving space costs, default 60 s) and
LACHESIS_ALLOCATION_HOLD_REACTION_TIMES (how long a rollout's weights must agree with a move, 4;
see `loop.py`).

Every interval it also checks each tenant's curve against its stage's measured hit ratio
(`curve_check.py`) and sets the metrics `lachesis_tenant_curve_error` and
`lachesis_tenant_curve_off`; `GET /api/v1/allocations` serves the same check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.allocation.allocate import (
    Allocation,
    BandwidthSLA,
    FixedSize,
    Guarantee,
    MinHitRatio,
    TenantDemand,
)
from lachesis_controller.allocation.curve_check import CheckConfig, CurveCheck, check_curves
from lachesis_controller.allocation.curves import Curve, CurveError
from lachesis_controller.allocation.loop import AllocationLoop, Decision, LoopConfig, TenantCurve
from lachesis_controller.allocation.qos_guarantees import qos_guarantees
from lachesis_controller.allocation.two_level import TwoLevelSpec, TwoLevelSplit
from lachesis_controller.config import Settings
from lachesis_controller.db import utcnow
from lachesis_controller.models import AllocationGuarantee, CacheAllocation
from lachesis_controller.observability import metrics
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.stages import store as stage_store

log = logging.getLogger(__name__)

CURRENT, PROPOSED = "current", "proposed"


def shares(
    demands: Mapping[str, TenantDemand], result: Allocation, levels: Mapping[str, TwoLevelSplit] | None = None
) -> dict[str, dict[str, Any]]:
    """Per tenant: its size, reservation, hit ratio and the curve point it sits on; a
    two-level tenant's size is its host level (a1), `levels` says the split."""
    out = {}
    for n, d in demands.items():
        size = result.sizes.get(n, 0.0)
        index = int(np.searchsorted(d.curve.sizes, size, side="right")) - 1
        out[n] = {
            "size_bytes": size,
            "reserved_bytes": result.reserved.get(n, 0.0),
            "hit_ratio": result.hit_ratios.get(n, 0.0),
            "weight": d.weight,
            "idle": d.idle,
            "curve_point": {"size_bytes": size, "miss_ratio": float(d.curve.miss_ratio(size)), "index": max(index, 0)},
        }
        if levels and n in levels:
            sp = levels[n]
            out[n]["levels"] = {
                "alpha": sp.alpha,
                "host_bytes": sp.hypervisor,
                "server_bytes": sp.storage,
                "hit_ratio": sp.hit_ratio,
                "bandwidth": sp.bandwidth,
            }
    return out


def two_level_specs(declared: Iterable[Mapping[str, Any]]) -> dict[str, TwoLevelSpec]:
    """Tenant -> its two-level cache, from the level-1 cache stages declaring `two_level`."""
    out = {}
    for s in declared:
        t = s.get("two_level")
        if s["kind"] == "cache" and t and s.get("owner"):
            out[s["owner"]] = TwoLevelSpec(
                memory=float(t["memory_bytes_per_s"]),
                network=float(t["network_bytes_per_s"]),
                storage=float(t["storage_bytes_per_s"]),
                sla=None if t.get("sla_bytes_per_s") is None else float(t["sla_bytes_per_s"]),
                server_max=float(t["server_max_bytes"]),
            )
    return out


def guarantee_of(kind: str, spec: Mapping[str, Any]) -> Guarantee:
    if kind == "min_hit_ratio":
        return MinHitRatio(float(spec["ratio"]))
    if kind == "bandwidth":
        return BandwidthSLA(float(spec["sla"]), float(spec["storage"]), float(spec["memory"]))
    return FixedSize(float(spec["size_bytes"]))


class CurveStore(Protocol):
    def latest_curves(self) -> Mapping[str, Any]: ...
    def tenant_rates(self) -> Mapping[str, Any]: ...


@runtime_checkable
class StageStore(CurveStore, Protocol):
    def stages(self) -> list[Any]: ...


def curve_checks(store: StageStore, config: CheckConfig = CheckConfig()) -> dict[str, CurveCheck]:
    """Per tenant with a cache stage: its curve against the stage's measured hit ratio."""
    curves = {}
    for name, c in store.latest_curves().items():
        try:
            curves[name] = Curve.from_points(c.sizes, c.miss_ratios)
        except CurveError:
            continue
    return check_curves(store.stages(), curves, config)


def export_curve_checks(checks: Mapping[str, CurveCheck], exported: set[str]) -> None:
    """The checks as metrics; tenants no longer checked are dropped from them (`exported`:
    the tenants set last time, updated)."""
    for name in exported - set(checks):
        for gauge in (metrics.TENANT_CURVE_ERROR, metrics.TENANT_CURVE_OFF):
            try:
                gauge.remove(name)
            except KeyError:
                pass
    exported.clear()
    for name, c in checks.items():
        if c.off is None or c.measured_hit_ratio is None or c.predicted_hit_ratio is None:
            continue
        metrics.TENANT_CURVE_ERROR.labels(name).set(c.measured_hit_ratio - c.predicted_hit_ratio)
        metrics.TENANT_CURVE_OFF.labels(name).set(1.0 if c.off else 0.0)
        exported.add(name)


def telemetry_curves(store: CurveStore) -> Callable[[], dict[str, TenantCurve]]:
    """Each tenant's latest curve, weighted by its current rate of 4 KiB block references
    (IOPS for reports that carry no block-reference counter)."""

    warned: set[str] = set()
    by_iops: set[str] = set()

    def weight(name: str, rates: Any) -> float:
        # No rate yet (one report so far) is no sign of missing block counters.
        if rates is None or (rates.block_refs_per_s is None and rates.iops == 0):
            return 0.0
        if rates.block_refs_per_s is not None:
            by_iops.discard(name)
            return float(rates.block_refs_per_s)
        if name not in by_iops:  # once, not every interval
            log.info("tenant %s: telemetry carries no block references, weighing it by IOPS", name)
            by_iops.add(name)
        return float(rates.iops)

    def read() -> dict[str, TenantCurve]:
        rates = store.tenant_rates()
        out = {}
        for name, c in store.latest_curves().items():
            try:
                curve = Curve.from_points(c.sizes, c.miss_ratios)
            except CurveError as e:
                if name not in warned:  # once, not every interval
                    log.warning("curve of tenant %s ignored: %s", name, e)
                    warned.add(name)
                continue
            warned.discard(name)
            out[name] = TenantCurve(curve, weight(name, rates.get(name)))
        return out

    return read


class Publisher(Protocol):
    async def publish(self, publications: list[rollouts.Publication], *, source: str) -> Any: ...


def loop_config(settings: Settings) -> LoopConfig:
    """The loop's timing (LACHESIS_ALLOCATION_*, read and checked by config.Settings)."""
    return LoopConfig(
        capacity=0.0,
        interval_s=settings.allocation_interval_s,
        reaction_time_s=settings.allocation_reaction_s,
        gain_threshold=settings.allocation_gain,
        unit_bytes=float(settings.allocation_unit_bytes),
        refill_horizon_s=settings.allocation_refill_horizon_s,
        hold_reaction_times=settings.allocation_hold_reaction_times,
    )


class DatabaseSide:
    """Capacity and guarantees in, decisions out. `bandwidths`: the storage's and the caches'
    bytes per second, by which a qos stage's minimum bandwidth becomes its owner's cache
    guarantee (Eq. 5.2); None: only the operator's guarantees."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        rollout_timeout_s: float = 30.0,
        bandwidths: tuple[float, float] | None = None,
    ) -> None:
        self.sessions = sessions
        self.rollout_timeout_s = rollout_timeout_s
        self.bandwidths = bandwidths
        self._demands: Mapping[str, TenantDemand] = {}

    def capacity(self) -> float | None:
        with self.sessions() as s, s.begin():
            row = s.get(CacheAllocation, CURRENT) or s.get(CacheAllocation, PROPOSED)
            return None if row is None else float(row.capacity_bytes)

    def in_force(self) -> dict[str, float] | None:
        """Tenant -> size of the current allocation, whether the loop or an operator
        (`POST /api/v1/allocations/apply`) made it; None while there is none."""
        with self.sessions() as s, s.begin():
            row = s.get(CacheAllocation, CURRENT)
            return None if row is None else {n: float(t["size_bytes"]) for n, t in row.tenants.items()}

    def guarantees(self) -> dict[str, Guarantee]:
        """The operator's guarantees (`PUT /api/v1/allocations/guarantees/{tenant}`), and for
        every other owner of a qos stage with a minimum bandwidth and a cache stage, the cache
        that bandwidth needs (Eq. 5.2)."""
        with self.sessions() as s, s.begin():
            operator = {g.tenant: guarantee_of(g.kind, g.spec) for g in s.scalars(select(AllocationGuarantee))}
            if self.bandwidths is None:
                return operator
            declared = stage_store.declared_stages(s).values()
            return qos_guarantees(declared, *self.bandwidths, operator=operator)

    def two_level(self) -> dict[str, TwoLevelSpec]:
        with self.sessions() as s, s.begin():
            return two_level_specs(stage_store.declared_stages(s).values())

    def publish(
        self, decision: Decision, demands: Mapping[str, TenantDemand], capacity: float, epsilon: float, method: str
    ) -> list[rollouts.Publication]:
        """Record the decision as the current allocation and issue the generations that carry it
        to every host (returned, to publish after the commit)."""
        result = decision.proposal
        assert result is not None
        with self.sessions() as s, s.begin():
            s.merge(
                CacheAllocation(
                    state=CURRENT,
                    capacity_bytes=capacity,
                    epsilon_bytes=epsilon,
                    method=method,
                    utility=result.utility,
                    upper_bound=result.upper_bound,
                    optimal=result.optimal,
                    tenants=shares(demands, result, decision.levels),
                    computed_at=utcnow(),
                    computed_by="allocation-loop",
                )
            )
            s.flush()
            _, publications = rollouts.start_rollout(
                s,
                cause=f"cache allocation: {decision.reason}",
                trigger="allocation",
                host_ids=rollouts.all_host_ids(s),
                now=utcnow(),
                timeout_s=self.rollout_timeout_s,
                traceparent=None,
            )
        log.info(
            "allocation rolled out (%s): %s",
            decision.reason,
            ", ".join(f"{n}={s:.0f}" for n, s in sorted(result.sizes.items())),
        )
        return publications


def start(
    sessions: sessionmaker[Session],
    store: CurveStore,
    stop: asyncio.Event,
    config: LoopConfig | None = None,
    *,
    bus: Publisher | None = None,
    rollout_timeout_s: float = 30.0,
    bandwidths: tuple[float, float] | None = None,
) -> asyncio.Task[None]:
    """The loop as a background task of the controller; without a bus the generations are
    still recorded and the reconciler delivers them. `bandwidths`: (storage, cache) bytes per
    second for qos stages' guarantees (`DatabaseSide`)."""
    side = DatabaseSide(sessions, rollout_timeout_s, bandwidths)
    cfg = config or LoopConfig(capacity=0.0)
    holder: dict[str, AllocationLoop] = {}

    async def publish(decision: Decision) -> None:
        loop = holder["loop"]
        cap = side.capacity() or 0.0
        publications = side.publish(decision, loop.last_demands, cap, cfg.epsilon_fraction * cap, cfg.method)
        if bus is not None:
            await bus.publish(publications, source="allocation")

    exported: set[str] = set()
    # A store without stage reports (the unit tests' fakes) has no curves to check.
    stage_store = store if isinstance(store, StageStore) else None

    def check() -> None:
        if stage_store is not None:
            export_curve_checks(curve_checks(stage_store), exported)

    loop = AllocationLoop(
        telemetry_curves(store),
        publish,
        cfg,
        guarantees=side.guarantees,
        capacity=side.capacity,
        two_level=side.two_level,
        in_force=side.in_force,
        after_step=check,
    )
    holder["loop"] = loop
    return asyncio.create_task(loop.run(stop), name="allocation-loop")
