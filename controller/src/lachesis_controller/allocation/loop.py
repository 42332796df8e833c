"""The allocation control loop: every interval read the tenants' curves, recompute, and roll
out only when it is worth it.

A new allocation is rolled out when the reaction time has passed since the last one and
either the set of active tenants changed (an idle tenant's space is reclaimed, or given back
when it returns) or the predicted gain in weighted hit rate, relative to the total weight,
exceeds the threshold. Between rollouts caches warm up; rolling out on every wobble of a
sampled curve would keep them cold (Moirai reacts in 15-30 s).
A tenant's weight is its median request rate over the last reaction time, counted in the
curve's unit (in the controller, 4 KiB block references per second: see `service.py`); one
that goes silent keeps it until it is idle, so its space moves after the reaction time, not
at once.

The gain is measured against the allocation in force, which is not always the loop's own last
one: an operator may apply another (`POST /api/v1/allocations/apply`, as `./lachesis demo` does
at the start of each phase). Measured against its own last rollout, the loop saw no gain in
going back to it and left the operator's allocation in place for good.

Two more brakes keep the sizes still (issue 34; Moirai §5.5.5): sizes are whole units of the
stages (`unit_bytes`, `units.py`), so a rollout changes what is installed only by whole regions
and never by rounding; and moving space costs the misses of refilling it, so the gain must
clear the threshold after the refill cost, `refill_block_bytes`-sized blocks for every byte a
tenant gains, spread over the time the new allocation is expected to hold
(`refill_horizon_s`): `gain − moved blocks / (Σ weight · horizon) > threshold`.

A tenant's request rate depends on its hit ratio (a replayer waits for each IO; misses and hits
do not take the same time), so the weights move because the allocation moved: a tenant whose
all-or-nothing curve was given its working set slows or speeds up, and under its new rate the
allocation it had looks best again, and the loop flips between the two every reaction time
(issue 34's second run on synthetic traces: four flips in 90 s). So for `hold_reaction_times`
reaction times after a rollout, a move must be a gain both under the weights now and under the
weights the rollout was made with (same curves): the workload changing reverses a decision,
the decision's own effect on the rates does not. Tenants going idle or coming back are not
held.

Dependencies are injected (curve source, clock, publisher, the allocation in force) so the loop
runs against fakes in unit tests and against the telemetry store and the database in the
controller.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any

from lachesis_controller.allocation.allocate import (
    Allocation,
    Guarantee,
    GuaranteesInfeasible,
    Method,
    TenantDemand,
    allocate,
    weighted_hit_rate,
)
from lachesis_controller.allocation.curves import Curve
from lachesis_controller.allocation.two_level import TwoLevelSpec, TwoLevelSplit, split_allocation
from lachesis_controller.allocation.units import in_units

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TenantCurve:
    curve: Curve
    # References per second over the last interval, in the curve's unit (4 KiB blocks from
    # telemetry): the utility weight; 0 means silent now.
    weight: float


@dataclass(frozen=True)
class LoopConfig:
    capacity: float
    epsilon_fraction: float = 0.001
    interval_s: float = 5.0
    reaction_time_s: float = 15.0
    # Relative gain Σw·Δhit / Σw that justifies disturbing warm caches.
    gain_threshold: float = 0.01
    # Silent this long: idle, its space reclaimed. None: the reaction time.
    idle_after_s: float | None = None
    method: Method = "optimal"
    # Sizes in whole units of this many bytes (the stages' region); None: as the solver says.
    unit_bytes: float | None = None
    # Refill cost: the seconds a new allocation is expected to hold and the block a miss
    # fetches (the weights' unit); None: moving space costs nothing.
    refill_horizon_s: float | None = None
    refill_block_bytes: float = 4096.0
    # For this many reaction times after a rollout a move must also be a gain under the
    # weights that justified the rollout (see the module's doc); 0: no such hold.
    hold_reaction_times: float = 0.0


@dataclass(frozen=True)
class Decision:
    at: float
    proposal: Allocation | None
    # The sizes the gain was measured against (the allocation in force).
    current: dict[str, float] | None
    gain: float
    rolled_out: bool
    reason: str
    idle: list[str] = field(default_factory=list)
    # Two-level tenants: their split (Moirai §5.3.5); `proposal.sizes` holds their a1.
    levels: dict[str, TwoLevelSplit] = field(default_factory=dict)
    # What refilling the space that moves costs, in the gain's unit (see the module's doc).
    refill_cost: float = 0.0


class AllocationLoop:
    def __init__(
        self,
        curves: Callable[[], Mapping[str, TenantCurve]],
        publish: Callable[[Decision], Any],
        config: LoopConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        guarantees: Callable[[], Mapping[str, Guarantee]] = dict,
        capacity: Callable[[], float | None] | None = None,
        two_level: Callable[[], Mapping[str, TwoLevelSpec]] = dict,
        in_force: Callable[[], Mapping[str, float] | None] | None = None,
        after_step: Callable[[], Any] | None = None,
    ) -> None:
        self._curves, self._publish, self.config = curves, publish, config
        self._clock, self._guarantees, self._two_level = clock, guarantees, two_level
        # The cache's size, asked every step when given (None: not known yet, do nothing).
        self._capacity = capacity
        # The sizes in force whoever decided them, asked every step when given (None: none
        # yet); without it the loop's own last rollout is taken to be in force.
        self._in_force = in_force
        # Run after every step (the controller checks the curves against the stages there).
        self._after_step = after_step
        # The loop's own last rollout.
        self.current: dict[str, float] | None = None
        self._active_set: frozenset[str] = frozenset()
        self._last_rollout = -math.inf
        # The demands (weights) the last rollout was decided with.
        self._rollout_demands: dict[str, TenantDemand] | None = None
        self._last_active: dict[str, float] = {}
        self._known: dict[str, TenantCurve] = {}
        self._rates: dict[str, deque[tuple[float, float]]] = {}
        self.last: Decision | None = None
        self.last_demands: dict[str, TenantDemand] = {}

    def _smoothed(self, name: str, now: float, rate: float) -> float:
        """Median of the tenant's request rates over the last reaction time while it was
        active. One interval that catches a tenant starting or stopping part-way reports a
        fraction of its rate; taken at face value it would move the tenant's space at once
        (a stopping tenant's by the gain path, long before it counts as idle). A tenant busy
        only now and then weighs its rate when busy."""
        samples = self._rates.setdefault(name, deque())
        samples.append((now, rate))
        while samples[0][0] < now - self.config.reaction_time_s:
            samples.popleft()
        return float(median(r for _, r in samples))

    def _demands(self, now: float) -> dict[str, TenantDemand]:
        idle_after = self.config.idle_after_s if self.config.idle_after_s is not None else self.config.reaction_time_s
        for name, tc in self._curves().items():
            if tc.weight > 0:
                self._last_active[name] = now
                self._known[name] = TenantCurve(tc.curve, self._smoothed(name, now, tc.weight))
            elif name not in self._known:
                self._known[name] = tc
            # A silent tenant keeps its last active curve and weight until it is idle.
        guarantees = self._guarantees() if self._known else {}
        demands = {}
        for name, tc in self._known.items():
            idle = now - self._last_active.get(name, -math.inf) >= idle_after
            demands[name] = TenantDemand(tc.curve, tc.weight, guarantees.get(name), idle=idle)
        return demands

    def step(self) -> Decision:
        """One recompute; returns what it decided and, when it rolled out, has published it."""
        now = self._clock()
        demands = self._demands(now)
        self.last_demands = demands
        cfg = self.config
        idle = sorted(n for n, d in demands.items() if d.idle)
        capacity = None if not demands else self._capacity() if self._capacity is not None else cfg.capacity
        if not demands or capacity is None or capacity <= 0:
            why = "no tenant curves yet" if not demands else "no cache capacity known yet"
            self.last = Decision(now, None, self.current, 0.0, False, why, idle)
            return self.last
        try:
            proposal = allocate(demands, capacity, epsilon=cfg.epsilon_fraction * capacity, method=cfg.method)
            active_n = sum(1 for d in demands.values() if not d.idle)
            # A cache without a unit for each tenant cannot be cut into units (toy capacities).
            if cfg.unit_bytes and capacity >= cfg.unit_bytes * max(active_n, 1):
                proposal = self._in_units(demands, proposal, capacity, cfg.unit_bytes)
            specs = {n: s for n, s in self._two_level().items() if n in demands and not demands[n].idle}
            levels = (
                split_allocation(
                    proposal.sizes,
                    {n: demands[n].curve for n in specs},
                    dict(specs),
                    cfg.epsilon_fraction * capacity,
                )
                if specs
                else {}
            )
        except GuaranteesInfeasible as e:
            log.warning("allocation not changed: %s", e)
            decision = Decision(now, None, self.current, 0.0, False, str(e), idle)
            self.last = decision
            return decision
        total_weight = sum(d.weight for d in demands.values() if not d.idle) or 1.0
        in_force = self._in_force() if self._in_force is not None else None
        baseline = dict(in_force) if in_force is not None else self.current
        before = weighted_hit_rate(demands, baseline) if baseline is not None else 0.0
        gain = (proposal.utility - before) / total_weight
        refill = self._refill_cost(demands, proposal.sizes, baseline, total_weight)
        held_gain = self._gain_under_rollout_weights(demands, proposal.sizes, baseline, now)
        active = frozenset(n for n, d in demands.items() if not d.idle)
        if self.current is None:
            go, reason = True, "first allocation"
        elif now - self._last_rollout < cfg.reaction_time_s:
            go, reason = False, f"within the reaction time ({cfg.reaction_time_s:g} s) of the last rollout"
        elif active != self._active_set:
            go, reason = True, "tenants went idle or came back"
        elif gain - refill > cfg.gain_threshold and held_gain is not None and held_gain - refill <= cfg.gain_threshold:
            go, reason = (
                False,
                (
                    f"predicted gain {gain:.4f} less refill cost {refill:.4f}, but {held_gain:.4f} under the "
                    f"weights of the last rollout: held for {cfg.hold_reaction_times:g} reaction times"
                ),
            )
        elif gain - refill > cfg.gain_threshold:
            go, reason = (
                True,
                (f"predicted gain {gain:.4f} less refill cost {refill:.4f} above the threshold {cfg.gain_threshold:g}"),
            )
        else:
            go, reason = (
                False,
                (
                    f"predicted gain {gain:.4f} less refill cost {refill:.4f} not above the threshold "
                    f"{cfg.gain_threshold:g}"
                ),
            )
        decision = Decision(now, proposal, baseline, gain, go, reason, idle, levels, refill)
        if go:
            self.current = dict(proposal.sizes)
            self._active_set = active
            self._last_rollout = now
            self._rollout_demands = dict(demands)
        self.last = decision
        return decision

    @staticmethod
    def _in_units(
        demands: Mapping[str, TenantDemand], proposal: Allocation, capacity: float, unit: float
    ) -> Allocation:
        sizes = in_units(demands, proposal.sizes, capacity, unit)
        hit = {n: (0.0 if demands[n].idle else float(demands[n].curve.hit_ratio(sizes[n]))) for n in sizes}
        utility = weighted_hit_rate(demands, sizes)
        return replace(
            proposal,
            sizes=sizes,
            hit_ratios=hit,
            utility=utility,
            upper_bound=max(proposal.upper_bound, utility),
            step=unit,
        )

    def _gain_under_rollout_weights(
        self,
        demands: Mapping[str, TenantDemand],
        sizes: Mapping[str, float],
        baseline: Mapping[str, float] | None,
        now: float,
    ) -> float | None:
        """The proposal's gain over `baseline` with today's curves and the last rollout's
        weights; None when no hold applies (none configured, expired, or no baseline)."""
        cfg = self.config
        then = self._rollout_demands
        if (
            not cfg.hold_reaction_times
            or then is None
            or baseline is None
            or now - self._last_rollout >= cfg.hold_reaction_times * cfg.reaction_time_s
        ):
            return None
        weighted = {n: replace(d, weight=then[n].weight if n in then else d.weight) for n, d in demands.items()}
        total = sum(d.weight for d in weighted.values() if not d.idle) or 1.0
        return (weighted_hit_rate(weighted, sizes) - weighted_hit_rate(weighted, baseline)) / total

    def _refill_cost(
        self,
        demands: Mapping[str, TenantDemand],
        sizes: Mapping[str, float],
        baseline: Mapping[str, float] | None,
        total_weight: float,
    ) -> float:
        """Blocks the tenants that grow must fetch to fill what they gain, over the hits the
        cache serves in the horizon (0 without a horizon or an allocation in force)."""
        cfg = self.config
        if cfg.refill_horizon_s is None or baseline is None:
            return 0.0
        grown = sum(max(0.0, sizes.get(n, 0.0) - baseline.get(n, 0.0)) for n, d in demands.items() if not d.idle)
        return grown / cfg.refill_block_bytes / (total_weight * cfg.refill_horizon_s)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                decision = self.step()
                if decision.rolled_out:
                    result = self._publish(decision)
                    if inspect.isawaitable(result):
                        await result
                if self._after_step is not None:
                    self._after_step()
            except Exception:  # the loop outlives one bad interval (a broken curve, a bus hiccup)
                log.exception("allocation loop iteration failed")
            try:
                await asyncio.wait_for(stop.wait(), timeout=self.config.interval_s)
            except TimeoutError:
                pass
