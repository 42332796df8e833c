"""The audit trail, newest first. A tenant-scoped token reads its tenant's events only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from sqlalchemy import select

from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.models import AuditEvent
from lachesis_controller.schemas.audit import AuditEventOut

router = APIRouter(prefix="/audit", tags=["audit"])


@router.get("", response_model=list[AuditEventOut], summary="Changes made through the API, newest first")
async def list_audit_events(
    session: SessionDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
    resource_kind: Annotated[str | None, Query(max_length=16)] = None,
    resource_name: Annotated[str | None, Query(max_length=63)] = None,
) -> list[AuditEventOut]:
    query = select(AuditEvent).order_by(AuditEvent.id.desc())
    if principal.tenant is not None:
        query = query.where(AuditEvent.tenant == principal.tenant)
    if resource_kind is not None:
        query = query.where(AuditEvent.resource_kind == resource_kind)
    if resource_name is not None:
        query = query.where(AuditEvent.resource_name == resource_name)
    with session.begin():
        rows = session.scalars(query.limit(limit).offset(offset))
        return [
            AuditEventOut(
                id=e.id,
                at=e.at,
                actor=e.actor,
                action=e.action,
                resource_kind=e.resource_kind,
                resource_name=e.resource_name,
                tenant=e.tenant,
                before=e.before,
                after=e.after,
                rollout_id=e.rollout_id,
            )
            for e in rows
        ]
