"""The allocation loop as the controller runs it: telemetry curves in, the current allocation
out in the database. The telemetry store is a fake; the database is a real SQLite one."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.allocation import AllocationLoop, LoopConfig
from lachesis_controller.allocation.service import DatabaseSide, start, telemetry_curves
from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.bus.messages import Telemetry
from lachesis_controller.db import make_engine, make_sessionmaker, migrate, utcnow
from lachesis_controller.models import AllocationGuarantee, CacheAllocation, Tenant


@dataclass
class FakeCurve:
    sizes: list[int]
    miss_ratios: list[float]


@dataclass
class FakeRates:
    iops: float
    block_refs_per_s: float | None = None


class FakeStore:
    def __init__(self) -> None:
        self.curves = {
            "loop": FakeCurve([1, 599, 600, 1000], [1, 1, 0.1, 0.1]),
            "web": FakeCurve([1, 1000], [1, 0.5]),
            "broken": FakeCurve([5, 5], [1, 1]),
        }
        self.rates = {"loop": FakeRates(100.0, 100.0), "web": FakeRates(100.0, 100.0)}
        # The loop reads the curves once per step: the test counts its steps by this.
        self.reads = 0

    def latest_curves(self) -> dict[str, FakeCurve]:
        self.reads += 1
        return self.curves

    def tenant_rates(self) -> dict[str, FakeRates]:
        return self.rates


def _report(at: str, **tenants: tuple[int, int]) -> Telemetry:
    """host-a's report: per tenant (read ops, block references), the same curve for all."""
    curve = {
        "policy": "lru",
        "algorithm": "shards-fixed-size",
        "unit": "bytes",
        "sizes": [4096, 1 << 20],
        "miss_ratios": [1.0, 0.5],
    }
    return Telemetry.model_validate(
        {
            "schema": "lachesis.telemetry/v1",
            "host_id": "host-a",
            "sent_at": at,
            "interval_s": 5.0,
            "devices": [],
            "tenants": [
                {
                    "name": n,
                    "ops_read": ops,
                    "ops_written": 0,
                    "bytes_read": 0,
                    "bytes_written": 0,
                    "latency_us_p99": None,
                    "curve": curve | {"references": refs},
                }
                for n, (ops, refs) in tenants.items()
            ],
        }
    )


def _block_store() -> TelemetryStore:
    """Three tenants at 100 IOPS: 1 MiB reads, 4 KiB reads, page-cache hits."""
    store = TelemetryStore()
    store.ingest(_report("2026-11-21T10:00:00Z", big=(0, 1), small=(0, 1), cached=(0, 9)))
    store.ingest(_report("2026-11-21T10:00:05Z", big=(500, 1 + 500 * 256), small=(500, 501), cached=(500, 9)))
    return store


def test_weights_are_block_references_not_syscalls() -> None:
    curves = telemetry_curves(_block_store())()
    assert {n: c.weight for n, c in curves.items()} == {"big": 25_600.0, "small": 100.0, "cached": 0.0}


def test_the_loop_weighs_by_block_references_and_the_page_cache_tenant_goes_idle() -> None:
    now = [0.0]
    loop = AllocationLoop(
        telemetry_curves(_block_store()),
        lambda d: None,
        LoopConfig(capacity=1 << 20, reaction_time_s=15.0),
        clock=lambda: now[0],
    )
    for t in (0.0, 5.0, 10.0, 15.0):
        now[0] = t
        loop.step()
    demands = loop.last_demands
    assert demands["big"].weight / demands["small"].weight == 256.0
    assert not demands["big"].idle and not demands["small"].idle
    # Syscalls but no block IO: nothing for the flash cache to serve, so no space.
    assert demands["cached"].idle and loop.current is not None and loop.current["cached"] == 0.0


def test_reports_without_block_counters_fall_back_to_iops_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    store.rates["web"] = FakeRates(0.0, None)  # one report so far: no rates, nothing to say
    read = telemetry_curves(store)
    with caplog.at_level(logging.INFO, logger="lachesis_controller.allocation.service"):
        assert read()["web"].weight == 0.0
        assert not any("weighing it by IOPS" in r.getMessage() for r in caplog.records)
        store.rates["web"] = FakeRates(40.0, None)
        weights = [read()["web"].weight for _ in range(3)]
    assert weights == [40.0, 40.0, 40.0]
    assert read()["loop"].weight == 100.0
    assert sum("weighing it by IOPS" in r.getMessage() for r in caplog.records) == 1


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
        # Two steps done without a capacity (the third has begun) wrote nothing.
        while store.reads < 3:
            await asyncio.sleep(0.01)
        with sessions() as s:
            assert s.get(CacheAllocation, "current") is None  # no capacity stated yet
        now = utcnow()
        with sessions() as s, s.begin():
            s.add(Tenant(name="web", description=None, classifiers=[], created_at=now, updated_at=now))
            s.flush()
            s.add(
                AllocationGuarantee(
                    tenant="web", kind="fixed_size", spec={"kind": "fixed_size", "size_bytes": 700}, updated_at=now
                )
            )
            s.add(
                CacheAllocation(
                    state="proposed",
                    capacity_bytes=1000,
                    epsilon_bytes=1,
                    method="optimal",
                    utility=0,
                    upper_bound=0,
                    optimal=True,
                    tenants={},
                    computed_at=now,
                    computed_by="test",
                )
            )
        while True:
            await asyncio.sleep(0.02)
            with sessions() as s:
                if s.get(CacheAllocation, "current") is not None:
                    break
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(go(), 60))  # the timeout only turns a hang into a failure
    with sessions() as s:
        row = s.get(CacheAllocation, "current")
        assert row is not None and row.computed_by == "allocation-loop"
        assert row.tenants["web"]["size_bytes"] == pytest.approx(700)  # the guarantee from the database
        assert row.tenants["loop"]["size_bytes"] == pytest.approx(300)
        assert row.tenants["loop"]["curve_point"]["miss_ratio"] == pytest.approx(1.0)


def test_an_allocation_an_operator_applied_is_what_the_loop_improves_on(sessions: sessionmaker[Session]) -> None:
    """`POST /api/v1/allocations/apply` (the demo applies an equal split at each phase's start)
    replaces the allocation in force. The loop measures its gain against that one: measured
    against its own last rollout it saw none and left the operator's allocation in force."""
    store = FakeStore()
    # No reaction time, so only the allocation in force decides; never idle.
    config = LoopConfig(capacity=0.0, interval_s=0.02, reaction_time_s=0.0, idle_after_s=1e9)

    def current() -> CacheAllocation | None:
        with sessions() as s:
            return s.get(CacheAllocation, "current")

    def equal_split(now: datetime) -> CacheAllocation:
        return CacheAllocation(
            state="current",
            capacity_bytes=1000,
            epsilon_bytes=1,
            method="optimal",
            utility=0,
            upper_bound=0,
            optimal=True,
            tenants={n: {"size_bytes": 500} for n in ("loop", "web")},
            computed_at=now,
            computed_by="operator",
        )

    async def steps(n: int) -> None:
        """Until n more steps have run whole (the loop reads the curves once per step)."""
        until = store.reads + n + 1
        while store.reads < until:
            await asyncio.sleep(0.01)

    async def go() -> None:
        stop = asyncio.Event()
        with sessions() as s, s.begin():
            s.add(
                CacheAllocation(
                    state="proposed",
                    capacity_bytes=1000,
                    epsilon_bytes=1,
                    method="optimal",
                    utility=0,
                    upper_bound=0,
                    optimal=True,
                    tenants={},
                    computed_at=utcnow(),
                    computed_by="test",
                )
            )
        task = start(sessions, store, stop, config)
        await steps(1)
        first = current()
        assert first is not None and first.computed_by == "allocation-loop"
        assert first.tenants["loop"]["size_bytes"] == pytest.approx(600)  # its curve's knee
        with sessions() as s, s.begin():
            s.merge(equal_split(utcnow()))
        await steps(2)
        stop.set()
        await task

    asyncio.run(asyncio.wait_for(go(), 60))  # the timeout only turns a hang into a failure
    row = current()
    assert row is not None and row.computed_by == "allocation-loop", "the operator's equal split stayed in force"
    assert row.tenants["loop"]["size_bytes"] == pytest.approx(600)


def test_a_qos_stages_minimum_bandwidth_becomes_its_owners_cache_guarantee(sessions: sessionmaker[Session]) -> None:
    """Moirai §5.3.2 wired into the loop: a tenant whose qos stage reserves a bandwidth and who
    owns a cache stage gets the hit ratio Eq. 5.2 asks for as its guarantee; an operator's own
    guarantee wins; a qos stage without a cache stage of its owner adds none; without the
    bandwidths (None) only the operator's guarantees count."""
    from lachesis_controller.allocation.allocate import BandwidthSLA, FixedSize
    from lachesis_controller.models import Stage

    now = utcnow()
    with sessions() as s, s.begin():
        for t in ("gold", "silver", "bronze"):
            s.add(Tenant(name=t, description=None, classifiers=[], created_at=now, updated_at=now))
        s.flush()

        def stage(name: str, owner: str, **spec: object) -> Stage:
            return Stage(
                name=name,
                kind=str(spec["kind"]),
                owner=owner,
                spec={"name": name, "owner": owner, **spec},
                created_at=now,
                updated_at=now,
                created_by="test",
            )

        s.add(stage("qos/gold", "gold", kind="qos", min_bandwidth_bytes_per_s=1_100e6))
        s.add(stage("cache/gold", "gold", kind="cache", engine="loc", size_bytes=1 << 20))
        s.add(stage("qos/silver", "silver", kind="qos", min_bandwidth_bytes_per_s=500e6))
        s.add(stage("cache/silver", "silver", kind="cache", engine="loc", size_bytes=1 << 20))
        s.add(stage("qos/bronze", "bronze", kind="qos", min_bandwidth_bytes_per_s=500e6))
        s.add(
            AllocationGuarantee(
                tenant="silver", kind="fixed_size", spec={"kind": "fixed_size", "size_bytes": 700}, updated_at=now
            )
        )
    storage, cache = 200e6, 2e9
    got = DatabaseSide(sessions, bandwidths=(storage, cache)).guarantees()
    assert got == {"gold": BandwidthSLA(1_100e6, storage, cache), "silver": FixedSize(700)}
    assert got["gold"].hit_ratio() == pytest.approx(0.5)  # (1.1 - 0.2) / (2 - 0.2)
    assert DatabaseSide(sessions).guarantees() == {"silver": FixedSize(700)}
