"""The audit trail: every change through the API, recorded in the change's own transaction
so that a change is never without its event, nor an event without its change."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from lachesis_controller.auth.authz import Principal
from lachesis_controller.db import utcnow
from lachesis_controller.models import AuditEvent


def snapshot(model: BaseModel | None) -> dict[str, Any] | None:
    return None if model is None else model.model_dump(mode="json", exclude_unset=True)


def record(
    session: Session,
    principal: Principal,
    action: str,
    *,
    kind: str,
    name: str,
    tenant: str | None,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    rollout_id: str | None,
) -> None:
    session.add(
        AuditEvent(
            at=utcnow(),
            actor=principal.actor,
            action=action,
            resource_kind=kind,
            resource_name=name,
            tenant=tenant,
            before=before,
            after=after,
            rollout_id=rollout_id,
        )
    )


# The actor of what the controller itself changes (a rollback putting rows back).
CONTROLLER = Principal(actor="controller", role="admin", tenant=None, token_id=None)
