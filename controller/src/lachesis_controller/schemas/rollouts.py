"""Rollouts of desired state to hosts, and what a rollback restored."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from lachesis_controller.models import RolloutPhase, RolloutState, TargetPhase, TargetStatus


class RolloutTargetOut(BaseModel):
    host_id: str
    generation: int
    status: TargetStatus
    phase: TargetPhase = Field(
        description="quiesce: phase 1 sent; drained: the host quiesced and drained the moving "
        "flows; install: the new rules are sent (also every one-phase target)."
    )
    drained_at: datetime | None
    acked_at: datetime | None
    reason: str | None


class RestoredResource(BaseModel):
    kind: Literal["tenant", "stage", "rule", "policy", "allocation", "placement"]
    name: str = Field(description="Its name; a policy version is name/version, a placement host/device.")


class RolloutOut(BaseModel):
    id: str
    state: RolloutState
    reason: str | None
    cause: str
    phase: RolloutPhase | None = Field(
        description="Two-phase rollouts (changes that move flows, switch operations): the phase "
        "reached; hold: a switch quiesce waiting for its resume. Null: one phase."
    )
    rolled_back_by: str | None = Field(description="Rollout that rolled this one's hosts back after it failed.")
    restored: list[RestoredResource] | None = Field(
        default=None, description="After a rollback: the resources the database got back (what the hosts run again)."
    )
    traceparent: str | None
    created_at: datetime
    deadline: datetime
    completed_at: datetime | None
    targets: list[RolloutTargetOut]
