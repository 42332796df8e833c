"""Rules: match and detours, as shipped to agents (the Match and Detour are the bus models)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, field_validator

from lachesis_controller.bus.messages import Detour, HostId, Match, Name
from lachesis_controller.schemas.base import RequestModel, at_field
from lachesis_controller.validation.bounds import (
    MAX_DETOURS,
    MAX_HOSTS_PER_ITEM,
    MAX_PATH_CHARS,
    check_detour_target,
    check_prefix_text,
    normal_path,
)


def _meaningful_match(match: Match) -> Match:
    if match.path_prefix is not None:
        at_field("path_prefix", normal_path, match.path_prefix, trailing_slash=True)
    if match.key_prefix is not None:
        at_field("key_prefix", check_prefix_text, match.key_prefix)
    return match


CheckedMatch = Annotated[
    Match,
    AfterValidator(_meaningful_match),
    Field(
        description=f"path_prefix: an absolute, normal path; path_prefix and key_prefix: at most {MAX_PATH_CHARS} "
        "characters, no control characters."
    ),
]


class RuleSpec(RequestModel):
    name: Name
    priority: int = Field(ge=0, le=1_000_000, description="Rules are evaluated in ascending priority, then name.")
    hosts: list[HostId] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_HOSTS_PER_ITEM,
        description="Hosts the rule is installed on; null (the default) means every host.",
    )
    match: CheckedMatch
    detours: list[Detour] = Field(
        min_length=1,
        max_length=MAX_DETOURS,
        description="A file target is an absolute, normal path or tcp://HOST:PORT/...; no control characters.",
    )

    @field_validator("detours")
    @classmethod
    def _meaningful_detours(cls, detours: list[Detour]) -> list[Detour]:
        for index, detour in enumerate(detours):
            at_field(f"detours[{index}].to.target", check_detour_target, detour.to.kind, detour.to.target)
        return detours


class RuleOut(BaseModel):
    name: str
    priority: int
    hosts: list[str] | None
    match: Match
    detours: list[Detour]
    created_at: datetime
    updated_at: datetime


class RuleChange(RuleOut):
    rollout_id: str = Field(description="Rollout that ships this change to the hosts.")
