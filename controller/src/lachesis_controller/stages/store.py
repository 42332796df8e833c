"""The declared stages and the per-host inputs of their resolution, from the database."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.models import CacheAllocation, DesiredStateBody, DevicePlacement, Host, RolloutTarget, Stage
from lachesis_controller.policy.ruleset import policies_in_force
from lachesis_controller.stages.resolve import HostView


def declared_stages(session: Session) -> dict[str, dict[str, Any]]:
    """Name -> declaration, from the policies in force and the REST-declared stages."""
    out: dict[str, dict[str, Any]] = {}
    for policy in policies_in_force(session):
        for stage in policy.compiled.get("stages", []):
            out[stage["name"]] = {**stage, "source": f"policy/{policy.name}"}
    for stage in session.scalars(select(Stage).order_by(Stage.name)):
        out[stage.name] = {**stage.spec, "source": "api"}
    return out


def allocation_sizes(session: Session) -> dict[str, int] | None:
    """The allocation in force as tenant -> bytes (None: no allocation)."""
    current = session.get(CacheAllocation, "current")
    if current is None:
        return None
    return {name: max(0, round(share["size_bytes"])) for name, share in current.tenants.items()}


def server_sizes(session: Session) -> dict[str, int]:
    """Tenant -> a2, the server level of its two-level split in force (none: {})."""
    current = session.get(CacheAllocation, "current")
    if current is None:
        return {}
    return {
        name: max(0, round(share["levels"]["server_bytes"]))
        for name, share in current.tenants.items()
        if share.get("levels")
    }


def host_view(session: Session, host_id: str) -> HostView:
    host = session.get(Host, host_id)
    devices = tuple(d["name"] for d in (host.capabilities.get("devices", []) if host else []))
    handles = {
        (p.device, s["tenant"], s["part"]): int(s["handle"])
        for p in session.scalars(select(DevicePlacement).where(DevicePlacement.host_id == host_id))
        for s in p.streams
        if "handle" in s
    }
    geometry = {
        d["name"]: (int(d.get("placement_handles", 0)), int(d.get("size_bytes", 0)))
        for d in (host.capabilities.get("devices", []) if host else [])
    }
    previous: dict[tuple[str, str, str], int] = {}
    if host is not None:
        shipped = session.scalars(
            select(DesiredStateBody.body)
            .join(RolloutTarget, RolloutTarget.state_id == DesiredStateBody.id)
            .where(RolloutTarget.host_id == host_id, RolloutTarget.generation <= host.desired_generation)
            .order_by(RolloutTarget.generation.desc())
            .limit(1)
        ).one_or_none()
        for s in json.loads(shipped).get("stages", []) if shipped else []:
            if s["kind"] == "cache" and s["owner"] and (s["device"] or devices):
                for p in s["placement"]:
                    previous[(s["device"] or devices[0], s["owner"], p["part"])] = p["handle"]
    return HostView(host_id=host_id, devices=devices, handles=handles, geometry=geometry, previous=previous)
