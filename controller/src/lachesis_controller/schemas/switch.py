"""Quiesce and resume of IO flows (the switch's gates)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from lachesis_controller.bus.messages import HostId
from lachesis_controller.schemas.rules import CheckedMatch
from lachesis_controller.validation.bounds import MAX_HOSTS_PER_ITEM


class Scope(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hosts: list[HostId] | None = Field(
        default=None, max_length=MAX_HOSTS_PER_ITEM, description="Hosts to act on; null: every host."
    )
    flow: CheckedMatch | None = Field(default=None, description="IO header match of the flow; null: all IO.")


class ResumeOut(BaseModel):
    resumed: list[str] = Field(description="Rollouts whose held quiesce was ended.")
