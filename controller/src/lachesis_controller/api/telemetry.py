"""Telemetry: per-tenant IO rates and miss-ratio curves, per-device write rates and DLWA, as
the agents last reported them (bus/agent_telemetry.py). Read-only; tenant-scoped tokens see only
their tenant."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import select

from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.auth.authz import require_tenant
from lachesis_controller.bus.agent_telemetry import TelemetryStore, hit_ratio
from lachesis_controller.models import Tenant
from lachesis_controller.schemas.telemetry import (
    CurveOut,
    MissRatioPoint,
    SeriesPoint,
    SummaryDevice,
    SummaryTenant,
    TelemetrySummary,
    TenantTelemetryOut,
)
from lachesis_controller.validation.problems import not_found, problem_responses

router = APIRouter(tags=["telemetry"])


def _store(request: Request) -> TelemetryStore:
    store: TelemetryStore = request.app.state.telemetry
    return store


@router.get("/tenants/{name}/telemetry", response_model=TenantTelemetryOut, responses=problem_responses(403, 404))
async def tenant_telemetry(
    name: str, request: Request, session: SessionDep, principal: PrincipalDep
) -> TenantTelemetryOut:
    require_tenant(principal, name, f"read the telemetry of tenant {name!r}")
    with session.begin():
        if session.get(Tenant, name) is None:
            raise not_found("tenant", name)
    view = _store(request).tenant(name)
    curve = None
    if view.curve is not None:
        c = view.curve
        curve = CurveOut(
            policy=c.policy,
            algorithm=c.algorithm,
            unit=c.unit,
            references=c.references,
            points=[MissRatioPoint(size_bytes=s, miss_ratio=m) for s, m in zip(c.sizes, c.miss_ratios, strict=True)],
        )
    return TenantTelemetryOut(
        tenant=name,
        updated_at=view.updated_at,
        curve=curve,
        series=[
            SeriesPoint(
                at=p.at,
                read_iops=p.rates.read_iops,
                write_iops=p.rates.write_iops,
                read_bytes_per_s=p.rates.read_bytes_per_s,
                write_bytes_per_s=p.rates.write_bytes_per_s,
                hit_ratio=p.hit_ratio,
            )
            for p in view.series
        ],
    )


@router.get("/telemetry/summary", response_model=TelemetrySummary)
async def telemetry_summary(request: Request, session: SessionDep, principal: PrincipalDep) -> TelemetrySummary:
    """Every tenant's current IOPS and every device's write rate and DLWA. A tenant-scoped
    token sees its tenant only, and no devices (they are shared)."""
    query = select(Tenant.name).order_by(Tenant.name)
    if principal.tenant is not None:
        query = query.where(Tenant.name == principal.tenant)
    with session.begin():
        names = list(session.scalars(query))
    store = _store(request)
    rates = store.tenant_rates()
    caches = store.tenant_caches()
    tenants = [
        SummaryTenant(
            name=n, iops=rates[n].iops if n in rates else 0.0, hit_ratio=hit_ratio([caches[n]] if n in caches else [])
        )
        for n in names
    ]
    devices = (
        []
        if principal.tenant is not None
        else [SummaryDevice(host_id=h, name=d, write_bytes_per_s=w, dlwa=dlwa) for h, d, w, dlwa in store.devices()]
    )
    return TelemetrySummary(
        total_iops=sum(t.iops for t in tenants),
        hit_ratio=hit_ratio([caches[n] for n in names if n in caches]),
        tenants=tenants,
        devices=devices,
    )
