"""The allocation loop as the controller runs it: telemetry curves in, the current allocation
out in the database. The telemetry store is a fake; the database is a real SQLite one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.allocation import LoopConfig
from lachesis_controller.allocation.service import DatabaseSide, start, telemetry_curves
from lachesis_controller.db import make_engine, make_sessionmaker, migrate, utcnow
from lachesis_controller.models import AllocationGuarantee, CacheAllocation, Tenant


@dataclass
class FakeCurve:
    sizes: list[int]
    miss_ratios: list[float]


@dataclass
class FakeRates:
    iops: float


class FakeStore:
    def __init__(self) -> None:
        self.curves = {
            "loop": FakeCurve([1, 599, 600, 1000], [1, 1, 0.1, 0.1]),
            "web": FakeCurve([1, 1000], [1, 0.5]),
            "broken": FakeCurve([5, 5], [1, 1]),
        }
        self.rates = {"loop": FakeRates(100.0), "web": FakeRates(100.0)}

    def latest_curves(self) -> dict[str, FakeCurve]:
        return self.curves

    def tenant_rates(self) -> dict[str, FakeRates]:
        return self.rates


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'l.db'}")
    migrate(engine)
    return make_sessionmaker(engine)


def test_telemetry_curves_weight_by_rate_and_skip_broken_ones() -> None:
    curves = telemetry_curves(FakeStore())()
    assert set(curves) == {"loop", "web"}
    assert curves["web"].weight == 100.0
    assert float(curves["web"].curve.hit_ratio(1000)) == pytest.approx(0.5)


def test_loop_waits_for_a_capacity_then_writes_the_current_allocation(sessions: sessionmaker[Session]) -> None:
    store = FakeStore()
    side = DatabaseSide(sessions)
    assert side.capacity() is None

    async def go() -> None:
        stop = asyncio.Event()
        task = start(sessions, store, stop, LoopConfig(capacity=0.0, interval_s=0.02))
        await asyncio.sleep(0.2)
        with sessions() as s:
            assert s.get(CacheAllocation, "current") is None  # no capacity stated yet
        now = utcnow()
        with sessions() as s, s.begin():
            s.add(Tenant(name="web", description=None, classifiers=[], created_at=now, updated_at=now))
            s.flush()
            s.add(AllocationGuarantee(tenant="web", kind="fixed_size", spec={"kind": "fixed_size", "size_bytes": 700},
                                      updated_at=now))
            s.add(CacheAllocation(state="proposed", capacity_bytes=1000, epsilon_bytes=1, method="optimal",
                                  utility=0, upper_bound=0, optimal=True, tenants={}, computed_at=now,
                                  computed_by="test"))
        for _ in range(100):
            await asyncio.sleep(0.05)
            with sessions() as s:
                if s.get(CacheAllocation, "current") is not None:
                    break
        stop.set()
        await asyncio.wait_for(task, 2)

    asyncio.run(go())
    with sessions() as s:
        row = s.get(CacheAllocation, "current")
        assert row is not None and row.computed_by == "allocation-loop"
        assert row.tenants["web"]["size_bytes"] == pytest.approx(700)  # the guarantee from the database
        assert row.tenants["loop"]["size_bytes"] == pytest.approx(300)
        assert row.tenants["loop"]["curve_point"]["miss_ratio"] == pytest.approx(1.0)
