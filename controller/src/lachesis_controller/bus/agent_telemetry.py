"""Agent telemetry (each host's `lachesis:agent:{host}:telemetry`,
api-schemas/bus/telemetry.schema.json) kept in memory.

Telemetry is soft state: every agent re-sends its cumulative counters and latest curves every
interval, so nothing here is stored in the database and a restarted controller is whole again
after one interval (sooner: its consumer group first re-reads the stream's backlog).

Per host and tenant the store keeps the last counters, turning consecutive reports into rates;
per tenant a bounded time series of those rates summed over hosts, and the latest curve; per
host and device the same for write bytes and DLWA. A tenant's hit ratio is that of its cache at
the allocated size, measured by the agents' shadow caches: hits over references in the last
interval, summed over hosts. `latest_curves()` and `tenant_rates()` are what the cache
allocation loop reads; `api/telemetry.py` serves the rest.

Two request rates, because the curves and the application count different things: ops and
bytes are what the application issued (syscall and io_uring layers), while a curve, the
shadow caches and so the flash cache below the page cache see 4 KiB block references at the
block layer (one 1 MiB read is 256 of them; a page-cache hit is none). The block-reference
counter rides in the curve: `curve.references` is the agent's cumulative count of blocks the
tenant's bios touched (`TenantStats.blocks`), and the agent sends no curve until that count
is above zero, so a report that had no curve before and has one now counts from zero.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from lachesis_controller.bus.client import GROUP, TELEMETRY, Bus
from lachesis_controller.bus.consumer import StreamConsumer
from lachesis_controller.bus.messages import (
    Telemetry,
    TelemetryCurve,
    TelemetryDeclaredJob,
    TelemetryDevice,
    TelemetryEndpoint,
    TelemetryStage,
    TelemetryTenant,
    parse_timestamp,
)

log = logging.getLogger(__name__)

# One hour of points at the agents' default 5 s interval.
SERIES_LEN = 720
# A host whose last report is older than this many of its intervals no longer adds to sums.
STALE_INTERVALS = 3.0


@dataclass(frozen=True)
class Rates:
    """Per-second rates over one reporting interval."""

    read_iops: float = 0.0
    write_iops: float = 0.0
    read_bytes_per_s: float = 0.0
    write_bytes_per_s: float = 0.0
    # 4 KiB block references per second at the block layer, the unit of the curves; None when
    # no report summed here carried a block-reference counter (a curve).
    block_refs_per_s: float | None = None

    def __add__(self, other: Rates) -> Rates:
        blocks = [b for b in (self.block_refs_per_s, other.block_refs_per_s) if b is not None]
        return Rates(
            self.read_iops + other.read_iops,
            self.write_iops + other.write_iops,
            self.read_bytes_per_s + other.read_bytes_per_s,
            self.write_bytes_per_s + other.write_bytes_per_s,
            sum(blocks) if blocks else None,
        )

    @property
    def iops(self) -> float:
        return self.read_iops + self.write_iops


@dataclass(frozen=True)
class Point:
    at: datetime
    rates: Rates
    # Hit ratio of the tenant's cache at its allocated size over the interval; None while no
    # host reports a cache for it (no allocation) or it saw no reference.
    hit_ratio: float | None = None


@dataclass
class _HostTenant:
    """The last report of one tenant from one host."""

    at: datetime
    interval_s: float
    counters: TelemetryTenant
    rates: Rates | None = None
    # (hits, misses) of the tenant's cache over the last interval.
    cache: tuple[int, int] | None = None


@dataclass
class _HostDevice:
    at: datetime
    interval_s: float
    counters: TelemetryDevice
    write_bytes_per_s: float | None = None
    dlwa: float | None = None
    series: deque[tuple[datetime, float, float | None]] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    # The raw reports, oldest first: byte counts over a window (sustainability/measure.py).
    history: deque[tuple[datetime, TelemetryDevice]] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))


@dataclass(frozen=True)
class StagePoint:
    at: datetime
    size_bytes: int | None
    installed_bytes: int | None
    # Hits over block reads of the stage over the interval ending at `at` (None: no reads).
    hit_ratio: float | None


@dataclass
class HostStage:
    """The last report of one stage from one host, with its series."""

    host_id: str
    at: datetime
    interval_s: float
    counters: TelemetryStage
    series: deque[StagePoint] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    # The raw reports, oldest first: byte counts over a window (sustainability/measure.py).
    history: deque[tuple[datetime, TelemetryStage]] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))


@dataclass
class TenantTelemetryView:
    name: str
    updated_at: datetime | None
    curve: TelemetryCurve | None
    series: list[Point]


def _delta(now: int, before: int) -> int:
    # A counter that went down restarted from zero (agent restart, slot reused).
    return now - before if now >= before else now


def _block_refs(t: TelemetryTenant) -> int | None:
    """Cumulative 4 KiB block references, carried by the curve (None: no curve)."""
    return t.curve.references if t.curve is not None else None


def _rates(now: TelemetryTenant, before: TelemetryTenant, seconds: float) -> Rates:
    blocks_now, blocks_before = _block_refs(now), _block_refs(before)
    # A curve that appears started from zero references; one that disappears went back to zero
    # (the slot was recreated): neither is a report without the counter.
    blocks = (
        None if blocks_now is None and blocks_before is None else _delta(blocks_now or 0, blocks_before or 0) / seconds
    )
    return Rates(
        _delta(now.ops_read, before.ops_read) / seconds,
        _delta(now.ops_written, before.ops_written) / seconds,
        _delta(now.bytes_read, before.bytes_read) / seconds,
        _delta(now.bytes_written, before.bytes_written) / seconds,
        blocks,
    )


class TelemetryStore:
    def __init__(self, series_len: int = SERIES_LEN) -> None:
        self.series_len = series_len
        self._tenants: dict[tuple[str, str], _HostTenant] = {}
        self._curves: dict[tuple[str, str], TelemetryCurve] = {}
        self._series: dict[str, deque[Point]] = {}
        self._updated: dict[str, datetime] = {}
        self._devices: dict[tuple[str, str], _HostDevice] = {}
        self._stages: dict[tuple[str, str], HostStage] = {}
        # Host -> (sent_at, its declared IO jobs) of its latest report that carried them.
        self._declared: dict[str, tuple[datetime, list[TelemetryDeclaredJob]]] = {}
        # Host -> (sent_at, its remote endpoints) of its latest report that carried them.
        self._endpoints: dict[str, tuple[datetime, list[TelemetryEndpoint]]] = {}
        self.messages = 0

    def ingest(self, msg: Telemetry) -> None:
        at = parse_timestamp(msg.sent_at)
        interval = float(msg.interval_s)
        for t in msg.tenants:
            key = (msg.host_id, t.name)
            prev = self._tenants.get(key)
            entry = _HostTenant(at, interval, t)
            if prev is not None and at > prev.at:
                entry.rates = _rates(t, prev.counters, (at - prev.at).total_seconds())
                if t.cache is not None and prev.counters.cache is not None:
                    entry.cache = (
                        _delta(t.cache.hits, prev.counters.cache.hits),
                        _delta(t.cache.misses, prev.counters.cache.misses),
                    )
            elif prev is not None:
                # Out of order or repeated (a backlog re-read): keep the newer report.
                continue
            self._tenants[key] = entry
            if t.curve is not None:
                self._curves[key] = t.curve
            self._updated[t.name] = max(at, self._updated.get(t.name, at))
            if entry.rates is not None:
                series = self._series.setdefault(t.name, deque(maxlen=self.series_len))
                series.append(Point(at, self._tenant_rates(t.name, at), _ratio(self._tenant_cache(t.name, at))))
        for d in msg.devices:
            self._ingest_device(msg.host_id, at, interval, d)
        for s in msg.stages or []:
            self._ingest_stage(msg.host_id, at, interval, s)
        prev_declared = self._declared.get(msg.host_id)
        if msg.declared_io is not None and (prev_declared is None or at > prev_declared[0]):
            self._declared[msg.host_id] = (at, msg.declared_io)
        prev_endpoints = self._endpoints.get(msg.host_id)
        if msg.endpoints is not None and (prev_endpoints is None or at > prev_endpoints[0]):
            self._endpoints[msg.host_id] = (at, msg.endpoints)
        self.messages += 1

    def _ingest_stage(self, host_id: str, at: datetime, interval: float, s: TelemetryStage) -> None:
        key = (host_id, s.name)
        prev = self._stages.get(key)
        if prev is not None and at <= prev.at:
            return
        entry = HostStage(host_id, at, interval, s)
        if prev is not None:
            entry.series, entry.history = prev.series, prev.history
            ratio = None
            if s.hits is not None and s.misses is not None and prev.counters.hits is not None:
                ratio = _ratio((_delta(s.hits, prev.counters.hits), _delta(s.misses, prev.counters.misses or 0)))
            entry.series.append(StagePoint(at, s.size_bytes, s.installed_bytes, ratio))
        entry.history.append((at, s))
        self._stages[key] = entry

    def _ingest_device(self, host_id: str, at: datetime, interval: float, d: TelemetryDevice) -> None:
        key = (host_id, d.name)
        prev = self._devices.get(key)
        entry = _HostDevice(at, interval, d)
        if prev is not None:
            if at <= prev.at:
                return
            entry.series, entry.history = prev.series, prev.history
            seconds = (at - prev.at).total_seconds()
            host = _delta(d.host_bytes_written, prev.counters.host_bytes_written)
            entry.write_bytes_per_s = host / seconds
            if d.media_bytes_written is not None and prev.counters.media_bytes_written is not None and host > 0:
                entry.dlwa = _delta(d.media_bytes_written, prev.counters.media_bytes_written) / host
            entry.series.append((at, entry.write_bytes_per_s, entry.dlwa))
        if entry.dlwa is None and d.media_bytes_written is not None and d.host_bytes_written > 0:
            entry.dlwa = d.media_bytes_written / d.host_bytes_written
        entry.history.append((at, d))
        self._devices[key] = entry

    def _fresh(self, at: datetime, interval_s: float, now: datetime) -> bool:
        return now - at <= timedelta(seconds=STALE_INTERVALS * interval_s)

    def _tenant_rates(self, name: str, now: datetime) -> Rates:
        total = Rates()
        for (_, tenant), e in self._tenants.items():
            if tenant == name and e.rates is not None and self._fresh(e.at, e.interval_s, now):
                total = total + e.rates
        return total

    def _tenant_cache(self, name: str, now: datetime) -> tuple[int, int] | None:
        """(hits, misses) of the tenant's cache over the last interval, summed over hosts."""
        reported = [
            e.cache
            for (_, tenant), e in self._tenants.items()
            if tenant == name and e.cache is not None and self._fresh(e.at, e.interval_s, now)
        ]
        if not reported:
            return None
        return sum(h for h, _ in reported), sum(m for _, m in reported)

    def _latest(self) -> datetime | None:
        return max(self._updated.values(), default=None)

    # --- what the allocation loop and the API read -------------------------------------------

    def latest_curves(self) -> dict[str, TelemetryCurve]:
        """The latest curve of every tenant; with several hosts, the one built on the most
        references."""
        out: dict[str, TelemetryCurve] = {}
        for (_, tenant), curve in self._curves.items():
            if tenant not in out or curve.references > out[tenant].references:
                out[tenant] = curve
        return out

    def tenant(self, name: str) -> TenantTelemetryView:
        return TenantTelemetryView(
            name=name,
            updated_at=self._updated.get(name),
            curve=self.latest_curves().get(name),
            series=list(self._series.get(name, ())),
        )

    def tenant_rates(self) -> dict[str, Rates]:
        """Each tenant's current rates, summed over the hosts that reported recently."""
        now = self._latest()
        if now is None:
            return {}
        return {name: self._tenant_rates(name, now) for name in sorted(self._updated)}

    def tenant_caches(self) -> dict[str, tuple[int, int]]:
        """Each tenant's cache (hits, misses) over the last interval, for the tenants with one."""
        now = self._latest()
        if now is None:
            return {}
        out = {}
        for name in sorted(self._updated):
            cache = self._tenant_cache(name, now)
            if cache is not None:
                out[name] = cache
        return out

    def forget_host(self, host_id: str) -> None:
        """Drop a deleted host's reports: it no longer adds to any sum. The tenants' series
        keep the points already computed (history)."""
        for table in (self._tenants, self._curves, self._devices, self._stages):
            for key in [k for k in table if k[0] == host_id]:
                del table[key]
        self._declared.pop(host_id, None)
        self._endpoints.pop(host_id, None)

    def declared_io(self, host_id: str) -> tuple[datetime, list[TelemetryDeclaredJob]] | None:
        """The host's declared IO jobs as its latest report had them, with its time."""
        return self._declared.get(host_id)

    def endpoints(self) -> dict[str, list[TelemetryEndpoint]]:
        """Host -> the remote endpoints its data path forwards to, as its latest report had them."""
        return {host: e for host, (_, e) in sorted(self._endpoints.items())}

    def stages(self) -> list[HostStage]:
        """Every stage's latest report, by host then name; reports older than the agent's
        last one (a stage it no longer runs) are left out."""
        last: dict[str, datetime] = {}
        for (host, _), e in self._stages.items():
            last[host] = max(e.at, last.get(host, e.at))
        return [e for (host, _), e in sorted(self._stages.items()) if e.at == last[host]]

    def device_reports(self) -> list[tuple[str, TelemetryDevice, float | None]]:
        """(host, latest report, DLWA over the last interval or since the start) per device."""
        return [(host, e.counters, e.dlwa) for (host, _), e in sorted(self._devices.items())]

    def device_series(self, host: str, name: str) -> list[tuple[datetime, float, float | None]]:
        e = self._devices.get((host, name))
        return list(e.series) if e is not None else []

    def device_history(self, host: str, name: str) -> list[tuple[datetime, TelemetryDevice]]:
        """The device's reports, oldest first (bounded)."""
        e = self._devices.get((host, name))
        return list(e.history) if e is not None else []

    def devices(self) -> list[tuple[str, str, float | None, float | None]]:
        """(host, device, write bytes/s, DLWA) of every device, latest report."""
        return [(host, name, e.write_bytes_per_s, e.dlwa) for (host, name), e in sorted(self._devices.items())]


def _ratio(cache: tuple[int, int] | None) -> float | None:
    if cache is None or sum(cache) == 0:
        return None
    return cache[0] / (cache[0] + cache[1])


def hit_ratio(caches: list[tuple[int, int]]) -> float | None:
    """Hits over references of several caches together (None without references)."""
    return _ratio((sum(h for h, _ in caches), sum(m for _, m in caches))) if caches else None


class TelemetryConsumer:
    """Feeds a TelemetryStore from every enrolled host's `lachesis:agent:{host}:telemetry`
    (consumer group `controller`, or the replica's own; invalid or forged messages are dropped
    by StreamConsumer)."""

    def __init__(self, bus: Bus, store: TelemetryStore, stop: asyncio.Event, *, group: str = GROUP) -> None:
        """`group`: with several replicas, each has its own (`replica_group`), so each sees
        every report: every replica serves the telemetry API from its own store."""
        self.store = store
        self.consumer = StreamConsumer(bus, TELEMETRY, Telemetry, self._handle, stop, group=group)

    async def _handle(self, msg: Any) -> None:
        self.store.ingest(msg)

    def start(self) -> asyncio.Task[None]:
        return asyncio.create_task(self.consumer.run(), name="telemetry consumer")

    async def forget(self) -> None:
        """Drop this replica's own group (clean shutdown)."""
        await self.consumer.forget_group()


def replica_group(replica_id: str) -> str:
    """The telemetry consumer group of one replica among several."""
    return f"{GROUP}:telemetry:{replica_id}"
