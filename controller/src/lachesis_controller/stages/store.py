"""The declared stages and the per-host inputs of their resolution, from the database."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from lachesis_controller.db import among
from lachesis_controller.models import CacheAllocation, DevicePlacement, Host, PlacementAssignment, Stage
from lachesis_controller.policy.ruleset import policies_in_force
from lachesis_controller.stages.resolve import HostView, assignments


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
    previous = {
        (a.device, a.tenant, a.part): a.handle
        for a in session.scalars(select(PlacementAssignment).where(PlacementAssignment.host_id == host_id))
    }
    return HostView(host_id=host_id, devices=devices, handles=handles, geometry=geometry, previous=previous)


@dataclass(frozen=True, slots=True)
class HostGeneration:
    """A host as a rollout reads it (rows, not Host objects): its new desired generation and
    what it registered."""

    id: str
    desired_generation: int
    capabilities: dict[str, Any]


def record_assignments(session: Session, shipped: Iterable[tuple[HostGeneration, list[dict[str, Any]]]]) -> None:
    """Keep the handles each host's new desired generation ships (host, its stages) as its
    placement assignments, replacing the previous generation's: host_view reads them back
    as `previous`. One delete and one insert for the whole rollout."""
    shipped = list(shipped)
    if not shipped:
        return
    # An array on PostgreSQL (db.among): an IN list of 1,000 hosts was a statement psycopg
    # parsed anew at every rollout, 5% of the controller's CPU (docs/benchmarks/controller.md).
    session.execute(
        delete(PlacementAssignment).where(among(session, PlacementAssignment.host_id, [h.id for h, _ in shipped]))
    )
    rows = [
        {"host_id": host.id, "device": d, "tenant": t, "part": p, "handle": h, "generation": host.desired_generation}
        for host, stages in shipped
        for (d, t, p), h in assignments(stages, [d["name"] for d in host.capabilities.get("devices", [])]).items()
    ]
    if rows:
        session.execute(insert(PlacementAssignment), rows)
