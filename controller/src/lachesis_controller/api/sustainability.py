"""Sustainability: flash wear (ALWA, DLWA, DWPD, lifetime) and embodied kgCO2e per year per
device and tenant from measured bytes over a window, and a tenant's alternatives
(sustainability/). Read-only; devices are shared, so tenant-scoped tokens see only their
tenant's figures."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from sqlalchemy import select

from lachesis_controller.api.deps import PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.auth.authz import forbidden, require_tenant
from lachesis_controller.config import Settings
from lachesis_controller.models import Tenant
from lachesis_controller.schemas.sustainability import (
    DeviceSustainability,
    DeviceTenantShare,
    SustainabilityAssumptions,
    SustainabilityComparison,
    SustainabilityDevices,
    SustainabilityScenario,
    SustainabilityTenants,
    TenantDeviceShare,
    TenantSustainability,
)
from lachesis_controller.sustainability import service
from lachesis_controller.sustainability.model import FlashAssumptions
from lachesis_controller.validation.problems import not_found, problem_responses

router = APIRouter(prefix="/sustainability", tags=["sustainability"])

# The telemetry store keeps an hour of reports at the agents' default interval; a longer
# window is allowed (it then covers what is kept) up to a week.
Window = Annotated[float, Query(gt=0, le=7 * 86_400, description="Seconds of telemetry to measure over.")]


def _assumptions(settings: Settings) -> FlashAssumptions:
    return FlashAssumptions(
        settings.flash_rated_dwpd,
        settings.flash_rated_years,
        settings.flash_service_years,
        settings.flash_kgco2e_per_gb,
    )


def _assumptions_out(a: FlashAssumptions, window_s: float) -> SustainabilityAssumptions:
    return SustainabilityAssumptions(
        rated_dwpd=a.rated_dwpd,
        rated_years=a.rated_years,
        pe_cycles=a.pe_cycles,
        service_years=a.service_years,
        kgco2e_per_gb=a.kgco2e_per_gb,
        window_s=window_s,
    )


@router.get("/devices", response_model=SustainabilityDevices, responses=problem_responses(403, 422))
async def sustainability_devices(
    request: Request, session: SessionDep, principal: PrincipalDep, settings: SettingsDep, window_s: Window = 3600.0
) -> SustainabilityDevices:
    if principal.tenant is not None:
        raise forbidden(principal, "read devices (they are shared by all tenants)")
    a = _assumptions(settings)
    with session.begin():
        views = service.devices(session, request.app.state.telemetry, a, window_s)
    out = []
    for v in views:
        f = v.footprint
        out.append(
            DeviceSustainability(
                host=v.host,
                name=v.device,
                capacity_bytes=v.capacity_bytes,
                placement_handles=v.placement_handles,
                measured=f is not None,
                seconds=f.seconds if f else None,
                host_bytes_per_s=f.host_bytes_per_s if f else None,
                media_bytes_per_s=f.media_bytes_per_s if f else None,
                dlwa=f.dlwa if f else None,
                dwpd=f.dwpd if f else None,
                lifetime_years=f.lifetime_years if f else None,
                embodied_kg=f.embodied_kg if f else v.capacity_bytes / 1e9 * a.kgco2e_per_gb,
                kg_per_year=f.kg_per_year if f else None,
                tenants=[
                    DeviceTenantShare(tenant=t, share=s, kg_per_year=f.tenant_kg_per_year(t))
                    for t, s in f.shares.items()
                ]
                if f
                else [],
                unattributed_share=f.unattributed_share if f else None,
                separate_handles_dlwa=v.separate_dlwa,
                one_handle_dlwa=v.one_handle_dlwa,
            )
        )
    return SustainabilityDevices(assumptions=_assumptions_out(a, window_s), devices=out)


def _tenant_views(
    request: Request, session: SessionDep, names: list[str], a: FlashAssumptions, window_s: float
) -> list[service.TenantView]:
    store = request.app.state.telemetry
    return service.tenants(service.devices(session, store, a, window_s), names, store, window_s)


@router.get("/tenants", response_model=SustainabilityTenants, responses=problem_responses(422))
async def sustainability_tenants(
    request: Request, session: SessionDep, principal: PrincipalDep, settings: SettingsDep, window_s: Window = 3600.0
) -> SustainabilityTenants:
    """Every tenant's share of flash wear and embodied carbon; a tenant-scoped token sees its own."""
    a = _assumptions(settings)
    query = select(Tenant.name).order_by(Tenant.name)
    if principal.tenant is not None:
        query = query.where(Tenant.name == principal.tenant)
    with session.begin():
        views = _tenant_views(request, session, list(session.scalars(query)), a, window_s)
    return SustainabilityTenants(
        assumptions=_assumptions_out(a, window_s),
        tenants=[
            TenantSustainability(
                name=t.name,
                engines=sorted(t.engines),
                given_bytes=t.given_bytes,
                host_bytes=t.host_bytes,
                media_bytes=t.media_bytes,
                alwa=t.alwa,
                dlwa=t.dlwa,
                wa=t.wa,
                dwpd=t.dwpd,
                lifetime_years=t.lifetime_years,
                kg_per_year=t.kg_per_year,
                devices=[
                    TenantDeviceShare(host=v.host, name=v.device, share=s, kg_per_year=s * v.footprint.kg_per_year)
                    for v, s in t.devices
                    if v.footprint is not None
                ],
            )
            for t in views
        ],
    )


@router.get("/compare", response_model=SustainabilityComparison, responses=problem_responses(403, 404, 422))
async def sustainability_compare(
    request: Request,
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    tenant: Annotated[str, Query(min_length=1, max_length=63, description="The tenant to compare.")],
    window_s: Window = 3600.0,
) -> SustainabilityComparison:
    """The tenant's lifetime and kgCO2e per year as measured, with the other small-object
    engine (Kangaroo or FairyWREN, by the papers' measured write amplification), and with the
    cache streams on its devices on separate handles or one (the placement closed form)."""
    require_tenant(principal, tenant, f"compare the footprint of tenant {tenant!r}")
    a = _assumptions(settings)
    with session.begin():
        if session.get(Tenant, tenant) is None:
            raise not_found("tenant", tenant)
        (view,) = _tenant_views(request, session, [tenant], a, window_s)
    return SustainabilityComparison(
        assumptions=_assumptions_out(a, window_s),
        tenant=tenant,
        scenarios=[SustainabilityScenario(**s.__dict__) for s in service.compare(view, a)],
    )
