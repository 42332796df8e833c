"""The allocation loop against a fake curve source, clock and publisher."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from lachesis_controller.allocation import AllocationLoop, Curve, Decision, LoopConfig, MinHitRatio, TenantCurve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def curve(working_set: float) -> Curve:
    """Concave up to the working set, flat after: the optimum is unique."""
    sizes = np.linspace(0, working_set, 101)
    return Curve.from_points(sizes, 1 - 0.9 * np.sqrt(sizes / working_set))


class Source:
    def __init__(self) -> None:
        self.tenants = {"a": TenantCurve(curve(1000), 100.0), "b": TenantCurve(curve(1000), 100.0)}

    def __call__(self) -> dict[str, TenantCurve]:
        return dict(self.tenants)


def make(**overrides: float) -> tuple[AllocationLoop, Clock, Source, list[Decision]]:
    clock, source, published = Clock(), Source(), []
    cfg = LoopConfig(capacity=1000, **overrides)  # type: ignore[arg-type]
    return AllocationLoop(source, published.append, cfg, clock=clock), clock, source, published


def test_first_allocation_rolls_out_then_nothing_changes_without_gain() -> None:
    loop, clock, _, _ = make()
    first = loop.step()
    assert first.rolled_out and first.reason == "first allocation"
    assert loop.current == pytest.approx({"a": 500, "b": 500})
    clock.now += 60
    again = loop.step()
    assert not again.rolled_out and "not above the threshold" in again.reason


def test_a_gain_rolls_out_only_after_the_reaction_time() -> None:
    loop, clock, source, _ = make(reaction_time_s=15, idle_after_s=1e9)
    loop.step()
    source.tenants["b"] = TenantCurve(curve(200), 100.0)  # b needs less now; a can use more
    clock.now += 5
    held = loop.step()
    assert not held.rolled_out and "reaction time" in held.reason and held.gain > 0.01
    assert loop.current == pytest.approx({"a": 500, "b": 500})
    clock.now += 10
    done = loop.step()
    assert done.rolled_out and "predicted gain" in done.reason
    assert loop.current is not None and loop.current["a"] > 700 and loop.current["b"] <= 200


def test_idle_tenant_space_is_reclaimed_and_given_back() -> None:
    loop, clock, source, _ = make(reaction_time_s=15)
    loop.step()
    source.tenants["b"] = TenantCurve(curve(1000), 0.0)  # b stops
    clock.now += 10
    assert not loop.step().rolled_out  # not idle yet
    clock.now += 6
    reclaimed = loop.step()
    assert reclaimed.rolled_out and reclaimed.idle == ["b"]
    assert loop.current == pytest.approx({"a": 1000, "b": 0})
    del source.tenants["b"]  # gone from telemetry altogether: still idle, still known
    clock.now += 20
    assert not loop.step().rolled_out
    source.tenants["b"] = TenantCurve(curve(1000), 100.0)  # b is back
    clock.now += 1
    back = loop.step()
    assert back.rolled_out and back.idle == []
    assert loop.current == pytest.approx({"a": 500, "b": 500})


def test_a_stopping_tenant_keeps_its_space_until_the_reaction_time() -> None:
    """The interval in which a tenant stops reports a fraction of its rate: that alone must not
    move its space (with a weight of 20 against 100 the optimum gives b far less)."""
    loop, clock, source, _ = make(reaction_time_s=15)
    for _ in range(20):
        clock.now += 1
        loop.step()
    assert loop.current == pytest.approx({"a": 500, "b": 500})
    source.tenants["b"] = TenantCurve(curve(1000), 20.0)  # b stops part-way through an interval
    clock.now += 1
    partial = loop.step()
    assert not partial.rolled_out and partial.gain == pytest.approx(0.0, abs=1e-9)
    source.tenants["b"] = TenantCurve(curve(1000), 0.0)
    for _ in range(13):
        clock.now += 1
        assert not loop.step().rolled_out  # silent, not idle: b keeps its weight and its space
    assert loop.current == pytest.approx({"a": 500, "b": 500})
    clock.now += 2
    reclaimed = loop.step()
    assert reclaimed.rolled_out and reclaimed.idle == ["b"] and "idle" in reclaimed.reason
    assert loop.current == pytest.approx({"a": 1000, "b": 0})


def test_a_lasting_change_of_rate_moves_space_within_the_reaction_time() -> None:
    loop, clock, source, _ = make(reaction_time_s=15)
    for _ in range(20):
        clock.now += 1
        loop.step()
    source.tenants["b"] = TenantCurve(curve(1000), 20.0)  # b now runs at a fifth of its rate
    moved = None
    for _ in range(15):
        clock.now += 1
        if (d := loop.step()).rolled_out:
            moved = d
            break
    assert moved is not None and "predicted gain" in moved.reason, "the new rate never took over"
    assert clock.now - 1020 <= 9  # once it is most of the window: the median follows
    assert loop.current is not None and loop.current["a"] > 700


def test_infeasible_guarantees_keep_the_current_allocation() -> None:
    clock, source, published = Clock(), Source(), []
    wanted = {"a": MinHitRatio(0.9), "b": MinHitRatio(0.9)}
    loop = AllocationLoop(source, published.append, LoopConfig(capacity=1000), clock=clock, guarantees=lambda: wanted)
    d = loop.step()
    assert not d.rolled_out and d.proposal is None and "a:" in d.reason and "b:" in d.reason
    assert loop.current is None


def test_run_publishes_rollouts_and_stops() -> None:
    # Steps are counted by the curve source (read once per step), not by the time they take.
    steps = 0

    class Counting(Source):
        def __call__(self) -> dict[str, TenantCurve]:
            nonlocal steps
            steps += 1
            return super().__call__()

    clock, published = Clock(), []
    loop = AllocationLoop(Counting(), published.append, LoopConfig(capacity=1000, interval_s=0.01), clock=clock)

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(loop.run(stop))
        # Two steps done (the third has begun): the first rolled out, the second (the fake
        # clock stands still, within the reaction time) did not.
        while steps < 3:
            await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(go(), 60))  # the timeout only turns a hang into a failure
    assert len(published) == 1 and published[0].reason == "first allocation"
    assert loop.last is not None and not loop.last.rolled_out
