"""Devices: every host's flash devices as registered, what they measure (host and media
bytes, DLWA, per placement handle) and the placement broker's prediction beside it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy import select

from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.auth.authz import forbidden
from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.models import DevicePlacement, Host
from lachesis_controller.schemas.devices import DeviceOut, DevicePoint, HandleOut
from lachesis_controller.stages import store
from lachesis_controller.stages.resolve import auto_placements

router = APIRouter(prefix="/devices", tags=["devices"])


def _ratio(media: int | None, host: int | None) -> float | None:
    return media / host if media is not None and host else None


@router.get("", response_model=list[DeviceOut], summary="Every host's devices: measured and predicted DLWA")
async def list_devices(request: Request, session: SessionDep, principal: PrincipalDep) -> list[DeviceOut]:
    if principal.tenant is not None:
        raise forbidden(principal, "read devices (they are shared by all tenants)")
    telemetry: TelemetryStore = request.app.state.telemetry
    reports = {(h, d.name): d for h, d, _ in telemetry.device_reports()}
    out = []
    with session.begin():
        declared = list(store.declared_stages(session).values())
        for host in session.scalars(select(Host).order_by(Host.id)):
            asked = {
                p.device: p for p in session.scalars(select(DevicePlacement).where(DevicePlacement.host_id == host.id))
            }
            auto = auto_placements(declared, store.host_view(session, host.id))
            for dev in host.capabilities.get("devices", []):
                r = reports.get((host.id, dev["name"]))
                predicted, by = None, None
                if dev["name"] in asked:
                    predicted, by = asked[dev["name"]].predicted_dlwa, asked[dev["name"]].predicted_by
                elif dev["name"] in auto:
                    predicted, by = auto[dev["name"]].model_dlwa, "model"
                out.append(
                    DeviceOut(
                        host=host.id,
                        name=dev["name"],
                        kind=dev["kind"],
                        path=dev["path"],
                        size_bytes=dev["size_bytes"],
                        placement_handles=dev["placement_handles"],
                        reclaim_unit_bytes=dev.get("reclaim_unit_bytes"),
                        host_bytes_written=r.host_bytes_written if r else None,
                        media_bytes_written=r.media_bytes_written if r else None,
                        dlwa=_ratio(r.media_bytes_written, r.host_bytes_written) if r else None,
                        predicted_dlwa=predicted,
                        predicted_by=by,
                        handles=[
                            HandleOut(
                                handle=h.handle,
                                host_bytes_written=h.host_bytes_written,
                                media_bytes_written=h.media_bytes_written,
                                dlwa=_ratio(h.media_bytes_written, h.host_bytes_written),
                            )
                            for h in (r.handles or [] if r else [])
                        ],
                        series=[
                            DevicePoint(at=at, write_bytes_per_s=w, dlwa=d)
                            for at, w, d in telemetry.device_series(host.id, dev["name"])
                        ],
                    )
                )
    return out
