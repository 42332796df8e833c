"""Every device's and tenant's footprint over a window, and a tenant's alternatives: the
database says which devices exist and which handles each tenant's stages write with, the
telemetry store what was written (measure.py), model.py the arithmetic."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.models import DevicePlacement, Host
from lachesis_controller.placement.dlwa import placement_dlwa
from lachesis_controller.placement.streams import Stream
from lachesis_controller.stages import store as stage_store
from lachesis_controller.stages.resolve import AUTO_OVERPROVISIONING, cache_streams
from lachesis_controller.sustainability import measure
from lachesis_controller.sustainability.model import (
    ENGINE_ALTERNATIVES,
    ENGINE_WA,
    DeviceFootprint,
    DeviceWindow,
    FlashAssumptions,
    footprint,
    ratio,
    with_dlwa,
    with_tenant_media,
)


@dataclass(frozen=True)
class DeviceView:
    host: str
    device: str
    capacity_bytes: int
    placement_handles: int
    # None: fewer than two reports in the window.
    window: DeviceWindow | None
    footprint: DeviceFootprint | None
    # The placement closed form's DLWA (placement/dlwa.py, FDP in CacheLib Theorem 1) for the
    # device's cache streams on their own handles and all on one; None without streams or
    # without two handles.
    separate_dlwa: float | None = None
    one_handle_dlwa: float | None = None


@dataclass
class TenantView:
    name: str
    engines: set[str] = field(default_factory=set)
    given_bytes: int = 0
    host_bytes: float = 0.0
    media_bytes: float | None = 0.0
    dwpd: float = 0.0
    kg_per_year: float = 0.0
    lifetime_years: float | None = None
    devices: list[tuple[DeviceView, float]] = field(default_factory=list)  # (device, share of its media)

    @property
    def alwa(self) -> float | None:
        return ratio(self.host_bytes, self.given_bytes)

    @property
    def dlwa(self) -> float | None:
        return ratio(self.media_bytes, self.host_bytes)

    @property
    def wa(self) -> float | None:
        return ratio(self.media_bytes, self.given_bytes)


def devices(session: Session, store: TelemetryStore, a: FlashAssumptions, window_s: float) -> list[DeviceView]:
    declared = list(stage_store.declared_stages(session).values())
    out = []
    for host in session.scalars(select(Host).order_by(Host.id)):
        view = stage_store.host_view(session, host.id)
        given = measure.given_bytes_by_tenant(store, host.id, window_s)
        streams = cache_streams(declared, view)
        asked = {
            p.device: p for p in session.scalars(select(DevicePlacement).where(DevicePlacement.host_id == host.id))
        }
        for dev in host.capabilities.get("devices", []):
            name, capacity = dev["name"], int(dev["size_bytes"])
            measured = measure.device_bytes(store.device_history(host.id, name), window_s)
            window = None
            if measured is not None and capacity > 0:
                window = measure.attribute(
                    host.id, name, capacity, measured, measure.shipped_streams(dict(view.previous), name), given
                )
            separate, one = _placement_dlwa(
                asked.get(name), streams.get(name, []), view.previous, name, int(dev.get("placement_handles") or 0)
            )
            out.append(
                DeviceView(
                    host.id,
                    name,
                    capacity,
                    int(dev.get("placement_handles") or 0),
                    window,
                    footprint(window, a) if window is not None else None,
                    separate,
                    one,
                )
            )
    return out


def _placement_dlwa(
    asked: DevicePlacement | None,
    streams: list[Stream],
    previous: Mapping[tuple[str, str, str], int],
    device: str,
    handles: int,
) -> tuple[float | None, float | None]:
    if asked is not None:
        streams = [
            Stream(s["tenant"], s["part"], s["space"], s["writes"], s.get("trimmed", False)) for s in asked.streams
        ]
        by_handle = {f"{s['tenant']}/{s['part']}": int(s["handle"]) for s in asked.streams}
        op = asked.overprovisioning
    else:
        by_handle = {f"{t}/{p}": h for (d, t, p), h in previous.items() if d == device}
        op = AUTO_OVERPROVISIONING
    if handles < 2 or not streams or any(s.name not in by_handle for s in streams):
        return None, None
    groups: dict[int, list[Stream]] = {}
    for s in streams:
        groups.setdefault(by_handle[s.name], []).append(s)
    separate = placement_dlwa(list(groups.values()), op)
    one = placement_dlwa([streams], op)
    return (separate if math.isfinite(separate) else None), (one if math.isfinite(one) else None)


def tenants(views: list[DeviceView], names: list[str], store: TelemetryStore, window_s: float) -> list[TenantView]:
    out = {n: TenantView(n) for n in names}
    hosts = sorted({v.host for v in views})
    for host in hosts:
        for t, b in measure.given_bytes_by_tenant(store, host, window_s).items():
            if t in out:
                out[t].given_bytes += b
    for s in store.stages():
        c = s.counters
        if c.kind == "cache" and c.owner in out and c.engine not in (None, "dram"):
            out[c.owner].engines.add(c.engine)
    for v in views:
        if v.window is None or v.footprint is None:
            continue
        for t, tv in out.items():
            if t not in v.window.tenant_host_bytes:
                continue
            host_b = v.window.tenant_host_bytes[t]
            tv.host_bytes += host_b
            media = v.window.tenant_media_bytes.get(t) if v.window.media_bytes is not None else None
            tv.media_bytes = None if media is None or tv.media_bytes is None else tv.media_bytes + media
            tv.dwpd += host_b / v.window.seconds * 86_400 / v.capacity_bytes
            share = v.footprint.shares.get(t, 0.0)
            tv.kg_per_year += share * v.footprint.kg_per_year
            tv.lifetime_years = _min_life(tv.lifetime_years, v.footprint.lifetime_years)
            tv.devices.append((v, share))
    for tv in out.values():
        if not tv.devices:
            tv.media_bytes = None
    return [out[n] for n in names]


def _min_life(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


@dataclass(frozen=True)
class Scenario:
    name: str
    source: str
    engine: str | None
    wa: float | None
    dlwa: float | None
    lifetime_years: float | None
    kg_per_year: float


def compare(tenant: TenantView, a: FlashAssumptions) -> list[Scenario]:
    """The tenant as measured, with the other small-object engine, and with its device's
    cache streams on separate handles or all on one."""
    written = [(v, v.window) for v, _ in tenant.devices if v.window is not None]
    engine = next(iter(tenant.engines)) if len(tenant.engines) == 1 else None
    out = [_scenario("current", "measured", engine, tenant, [w for _, w in written], a)]
    alt = ENGINE_ALTERNATIVES.get(engine or "")
    if engine is not None and alt is not None and all(w.media_bytes is not None for _, w in written) and written:
        factor = ENGINE_WA[alt] / ENGINE_WA[engine]
        out.append(
            _scenario(
                alt,
                f"modelled: measured write amplification x {ENGINE_WA[alt]}/{ENGINE_WA[engine]} (FairyWREN §6.4)",
                alt,
                tenant,
                [
                    with_tenant_media(w, tenant.name, w.tenant_media_bytes.get(tenant.name, 0.0) * factor)
                    for _, w in written
                ],
                a,
            )
        )
    if written and all(v.separate_dlwa is not None for v, _ in written):
        for name, dlwas in (
            ("separate handles", [v.separate_dlwa for v, _ in written]),
            ("one handle", [v.one_handle_dlwa for v, _ in written]),
        ):
            windows = [with_dlwa(w, d) for (_, w), d in zip(written, dlwas, strict=True) if d is not None]
            if len(windows) < len(written):  # no finite DLWA on some device (_placement_dlwa): no scenario
                continue
            out.append(
                _scenario(
                    name,
                    "modelled: placement closed form (FDP in CacheLib, Theorem 1)",
                    engine,
                    tenant,
                    windows,
                    a,
                )
            )
    return out


def _scenario(
    name: str, source: str, engine: str | None, tenant: TenantView, windows: list[DeviceWindow], a: FlashAssumptions
) -> Scenario:
    host_b = media_b = kg = 0.0
    life: float | None = None
    measured_media = True
    for w in windows:
        f = footprint(w, a)
        host_b += w.tenant_host_bytes.get(tenant.name, 0.0)
        if w.media_bytes is None:
            measured_media = False
        media_b += w.tenant_media_bytes.get(tenant.name, 0.0)
        kg += f.tenant_kg_per_year(tenant.name)
        life = _min_life(life, f.lifetime_years)
    media = media_b if measured_media and windows else None
    return Scenario(name, source, engine, ratio(media, tenant.given_bytes), ratio(media, host_b), life, kg)
