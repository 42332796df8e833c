"""Measured bytes over a window, from the agents' telemetry and the state shipped to them.

Per device: host and media bytes written, in total and per placement handle (the agent's
device counters). Per tenant: the handles its cache stages write with on each device (the
last desired state shipped to the host: stage -> placement handle per engine part), so the
bytes of a handle are the tenant's; a handle several tenants' stages share is split by the
bytes each of them gave its caches (below); bytes on handles no stage writes with stay
unattributed. What a tenant gave its flash caches (the denominator of ALWA) is the bytes of
objects its stages' engines were asked to store (`app_bytes_written` of stage telemetry), or,
from agents that do not report it, what the stages were asked to hold: bytes written through
them and bytes of read misses they filled (`bytes_written + bytes_read_miss`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.bus.messages import TelemetryDevice, TelemetryStage
from lachesis_controller.sustainability.model import DeviceWindow

T = TypeVar("T")


def _in_window(history: Sequence[tuple[datetime, T]], window_s: float) -> list[tuple[datetime, T]]:
    if not history:
        return []
    start = history[-1][0] - timedelta(seconds=window_s)
    return [(at, c) for at, c in history if at >= start]


def _increase(values: Iterable[int | None]) -> int | None:
    """What a cumulative counter grew by over consecutive reports; a counter that went down
    restarted from zero (agent restart). None if any report lacks it."""
    total, before = 0, None
    for v in values:
        if v is None:
            return None
        if before is not None:
            total += v - before if v >= before else v
        before = v
    return total


def _seconds(points: Sequence[tuple[datetime, object]]) -> float:
    return (points[-1][0] - points[0][0]).total_seconds()


@dataclass(frozen=True)
class DeviceBytes:
    """One device's counters over a window: totals and per handle (host, media)."""

    seconds: float
    host_bytes: int
    media_bytes: int | None
    handles: dict[int, tuple[int, int | None]] = field(default_factory=dict)


def device_bytes(history: Sequence[tuple[datetime, TelemetryDevice]], window_s: float) -> DeviceBytes | None:
    points = _in_window(history, window_s)
    if len(points) < 2 or _seconds(points) <= 0:
        return None
    reports = [d for _, d in points]
    handles: dict[int, tuple[int, int | None]] = {}
    for h in sorted({h.handle for d in reports for h in d.handles or []}):
        # A handle absent from a report had written nothing yet.
        rows = [next((x for x in d.handles or [] if x.handle == h), None) for d in reports]
        handles[h] = (
            _increase(r.host_bytes_written if r else 0 for r in rows) or 0,
            _increase(r.media_bytes_written if r else 0 for r in rows),
        )
    return DeviceBytes(
        _seconds(points),
        _increase(d.host_bytes_written for d in reports) or 0,
        _increase(d.media_bytes_written for d in reports),
        handles,
    )


def stage_given_bytes(history: Sequence[tuple[datetime, TelemetryStage]], window_s: float) -> int:
    """Bytes a cache stage's engine was asked to store in the window: its own count where the
    agent reports it, else what the stage was asked to hold (written through it, and read
    misses it filled; more than the engine stores when its admission policy drops some)."""
    points = _in_window(history, window_s)
    if points and all(s.app_bytes_written is not None for _, s in points):
        return _increase(s.app_bytes_written for _, s in points) or 0
    written = _increase(s.bytes_written or 0 for _, s in points) or 0
    missed = _increase(s.bytes_read_miss or 0 for _, s in points) or 0
    return written + missed


def given_bytes_by_tenant(store: TelemetryStore, host: str, window_s: float) -> dict[str, int]:
    """Tenant -> bytes its flash cache stages at `host` were asked to hold in the window."""
    out: dict[str, int] = {}
    for s in store.stages():
        c = s.counters
        if s.host_id == host and c.kind == "cache" and c.owner and c.engine not in (None, "dram"):
            out[c.owner] = out.get(c.owner, 0) + stage_given_bytes(list(s.history), window_s)
    return out


def attribute(
    host: str,
    device: str,
    capacity_bytes: int,
    measured: DeviceBytes,
    streams: dict[tuple[str, str], int],
    given: dict[str, int],
) -> DeviceWindow:
    """The device's window with each tenant's bytes: `streams` is (tenant, part) -> handle on
    this device; `given` the tenants' cache input, which splits a shared handle."""
    tenant_host: dict[str, float] = {}
    tenant_media: dict[str, float] = {}
    handles = measured.handles or {0: (measured.host_bytes, measured.media_bytes)}
    everyone = sorted({t for t, _ in streams})
    for h, (host_b, media_b) in handles.items():
        # Without per-handle counters, all of the device is one handle shared by its tenants.
        tenants = sorted({t for (t, _), hh in streams.items() if hh == h}) if measured.handles else everyone
        for t, share in _split(tenants, given).items():
            tenant_host[t] = tenant_host.get(t, 0.0) + host_b * share
            if media_b is not None:
                tenant_media[t] = tenant_media.get(t, 0.0) + media_b * share
    return DeviceWindow(
        host,
        device,
        capacity_bytes,
        measured.seconds,
        measured.host_bytes,
        measured.media_bytes,
        tenant_host_bytes=tenant_host,
        tenant_media_bytes=tenant_media if measured.media_bytes is not None else {},
    )


def _split(tenants: list[str], given: dict[str, int]) -> dict[str, float]:
    if not tenants:
        return {}
    weights = [given.get(t, 0) for t in tenants]
    total = sum(weights)
    if total == 0:
        return {t: 1 / len(tenants) for t in tenants}
    return {t: w / total for t, w in zip(tenants, weights, strict=True)}


def shipped_streams(previous: dict[tuple[str, str, str], int], device: str) -> dict[tuple[str, str], int]:
    """(tenant, part) -> handle on `device`, from stages/store.host_view's `previous`."""
    return {(t, p): h for (d, t, p), h in previous.items() if d == device}
