"""FDP placements: which reclaim unit handle each tenant's cache stream writes with on each
device, which streams share one and why, and the device's predicted DLWA (placement/)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.api.deps import PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import Principal, require_tenant
from lachesis_controller.db import utcnow
from lachesis_controller.models import DevicePlacement, Host, Tenant
from lachesis_controller.placement import Geometry, PlacementError, Stream, predict
from lachesis_controller.schemas.placements import DevicePlacementOut, PlacementRequest, SharedOut, StreamOut
from lachesis_controller.validation.problems import invalid, not_found, problem_responses

router = APIRouter(prefix="/placements", tags=["placements"])


def _out(row: DevicePlacement, principal: Principal) -> DevicePlacementOut:
    # A tenant's token sees the device's figures but only its own streams.
    return DevicePlacementOut(
        host_id=row.host_id,
        device=row.device,
        handles=row.handles,
        overprovisioning=row.overprovisioning,
        streams=[StreamOut.model_validate(s) for s in row.streams if principal.sees_tenant(s["tenant"])],
        shared=[SharedOut.model_validate(s) for s in row.shared] if principal.tenant is None else [],
        predicted_dlwa=row.predicted_dlwa,
        predicted_by=row.predicted_by,
        model_dlwa=row.model_dlwa,
        warnings=row.warnings if principal.tenant is None else [],
        computed_at=row.computed_at,
    )


@router.get("", response_model=list[DevicePlacementOut])
async def list_placements(
    request: Request, response: Response, session: SessionDep, principal: PrincipalDep, page: PageDep
) -> list[DevicePlacementOut]:
    with session.begin():
        rows = session.scalars(select(DevicePlacement).order_by(DevicePlacement.host_id, DevicePlacement.device))
        out = [
            _out(r, principal)
            for r in rows
            if principal.tenant is None or any(s["tenant"] == principal.tenant for s in r.streams)
        ]
    return page.cut(out, request, response)


@router.get("/{host_id}/{device}", response_model=DevicePlacementOut, responses=problem_responses(404))
async def get_placement(host_id: str, device: str, session: SessionDep, principal: PrincipalDep) -> DevicePlacementOut:
    with session.begin():
        row = session.get(DevicePlacement, (host_id, device))
        if row is None or (
            principal.tenant is not None and not any(s["tenant"] == principal.tenant for s in row.streams)
        ):
            raise not_found("placement of device", f"{host_id}/{device}")
        return _out(row, principal)


def _handles(session: Session, host_id: str, device: str) -> tuple[int, list[str]]:
    """The device's handle inventory as its agent registered it; a device without FDP has
    only the default placement, which every stream then shares."""
    host = session.get(Host, host_id)
    if host is None:
        raise not_found("host", host_id)
    devices = {d.get("name"): d for d in (host.capabilities or {}).get("devices", [])}
    if device not in devices:
        raise _no_device(host_id, device, ", ".join(sorted(str(n) for n in devices)) or "none")
    handles = int(devices[device].get("placement_handles") or 0)
    if handles < 1:
        return 1, [f"device {device} has no FDP placement handles: every stream shares the default placement"]
    return handles, []


def _no_device(host_id: str, device: str, known: str) -> Exception:
    err = not_found("device", f"{host_id}/{device}")
    err.detail += f" (host {host_id!r} registered: {known})"
    return err


async def _compute(
    host_id: str,
    device: str,
    streams: list[dict[str, Any]],
    handles: int,
    notes: list[str],
    op: float,
    reclaim_units: int,
    simulate: bool,
    simulator: Path | None,
) -> DevicePlacement:
    parsed = [Stream(s["tenant"], s["part"], s["space"], s["writes"], s.get("trimmed", False)) for s in streams]
    geometry = Geometry(reclaim_units=reclaim_units, overprovisioning=op, handles=handles)
    # The simulator takes a second or two: off the event loop.
    try:
        result = await asyncio.to_thread(predict, parsed, geometry, simulate=simulate, simulator=simulator)
    except PlacementError as e:
        raise invalid([("streams", str(e))]) from None
    except ValueError as e:  # the simulated device cannot be built (too little spare space)
        raise invalid([("overprovisioning", str(e))]) from None
    placed = [
        {**s, "trimmed": s.get("trimmed", False), "handle": result.placement.handles[p.name]}
        for s, p in zip(streams, parsed, strict=True)
    ]
    shared = [{"handle": s.handle, "streams": s.streams, "reason": s.reason} for s in result.placement.shared]
    return DevicePlacement(
        host_id=host_id,
        device=device,
        handles=handles,
        overprovisioning=op,
        reclaim_units=reclaim_units,
        streams=placed,
        shared=shared,
        predicted_dlwa=result.predicted_dlwa,
        predicted_by=result.predicted_by,
        model_dlwa=result.model_dlwa,
        warnings=notes + result.warnings,
        computed_at=utcnow(),
    )


@router.post(
    "/{host_id}/{device}",
    response_model=DevicePlacementOut,
    responses=problem_responses(400, 401, 403, 404, 415, 422),
    summary="Place a device's streams on its handles and predict its DLWA",
)
async def place_device(
    host_id: str,
    device: str,
    spec: PlacementRequest,
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
) -> DevicePlacementOut:
    require_tenant(principal, None, f"place the streams of device {host_id}/{device}")
    with session.begin():
        handles, notes = _handles(session, host_id, device)
        tenants = set(session.scalars(select(Tenant.name)))
        unknown = [
            (f"streams[{i}].tenant", f"tenant {s.tenant!r} does not exist")
            for i, s in enumerate(spec.streams)
            if s.tenant not in tenants
        ]
        if unknown:
            raise invalid(unknown)
    streams = [s.model_dump() for s in spec.streams]
    row = await _compute(
        host_id,
        device,
        streams,
        handles,
        notes,
        spec.overprovisioning,
        spec.reclaim_units,
        spec.simulate,
        settings.devsim,
    )
    with session.begin():
        if session.get(Host, host_id) is None:  # deregistered meanwhile
            raise not_found("host", host_id)
        row = session.merge(row)
        out = _out(row, principal)
        audit.record(
            session,
            principal,
            "placement.update",
            kind="placement",
            name=f"{host_id}/{device}"[:63],
            tenant=None,
            before=None,
            after={
                "handles": {f"{s['tenant']}/{s['part']}": s["handle"] for s in row.streams},
                "predicted_dlwa": row.predicted_dlwa,
            },
            rollout_id=None,
        )
    return out


@router.post(
    "/recompute",
    response_model=list[DevicePlacementOut],
    responses=problem_responses(401, 403),
    summary="Place every known device's streams again (after its handle inventory changed)",
)
async def recompute(session: SessionDep, principal: PrincipalDep, settings: SettingsDep) -> list[DevicePlacementOut]:
    require_tenant(principal, None, "recompute placements")
    with session.begin():
        jobs = []
        for r in session.scalars(select(DevicePlacement)):
            try:
                handles, notes = _handles(session, r.host_id, r.device)
            except Exception:  # the device is gone from its host's registration: keep the old answer
                continue
            streams = [{k: s[k] for k in ("tenant", "part", "space", "writes", "trimmed")} for s in r.streams]
            jobs.append((r.host_id, r.device, streams, handles, notes, r.overprovisioning, r.reclaim_units))
    rows = [await _compute(*job, simulate=True, simulator=settings.devsim) for job in jobs]
    with session.begin():
        out = [_out(session.merge(r), principal) for r in rows if session.get(Host, r.host_id) is not None]
    return out
