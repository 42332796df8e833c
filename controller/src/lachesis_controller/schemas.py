"""Request and response bodies of the REST API.

Match, detour and classifier are the bus models themselves (messages.py), so what the API
accepts is exactly what can be shipped to an agent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from lachesis_controller.bus.messages import Capabilities, Classifier, Detour, HostId, Match, Name
from lachesis_controller.validation.bounds import (
    MAX_CLASSIFIERS,
    MAX_DETOURS,
    MAX_HOSTS_PER_ITEM,
    MAX_PATH_CHARS,
    check_classifier_value,
    check_detour_target,
    check_prefix_text,
    normal_path,
)


class RequestModel(BaseModel):
    # Strict: "priority": "10" is a mistake to report, not to guess at.
    model_config = ConfigDict(extra="forbid", strict=True)


def _at(field: str, check: Any, *args: Any, **kwargs: Any) -> None:
    # One error per field, named: pydantic would only name the list or model that holds it.
    try:
        check(*args, **kwargs)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None


def _meaningful_match(match: Match) -> Match:
    if match.path_prefix is not None:
        _at("path_prefix", normal_path, match.path_prefix, trailing_slash=True)
    if match.key_prefix is not None:
        _at("key_prefix", check_prefix_text, match.key_prefix)
    return match


CheckedMatch = Annotated[
    Match,
    AfterValidator(_meaningful_match),
    Field(
        description=f"path_prefix: an absolute, normal path; path_prefix and key_prefix: at most {MAX_PATH_CHARS} "
        "characters, no control characters."
    ),
]


class TenantSpec(RequestModel):
    name: Name
    classifiers: list[Classifier] = Field(
        max_length=MAX_CLASSIFIERS,
        description="How the agents recognise this tenant's IO; any classifier matching is enough. "
        "A path_prefix is an absolute, normal path; no value holds control characters.",
    )
    description: str | None = Field(default=None, max_length=1024)

    @field_validator("classifiers")
    @classmethod
    def _meaningful(cls, classifiers: list[Classifier]) -> list[Classifier]:
        for index, classifier in enumerate(classifiers):
            _at(f"classifiers[{index}].value", check_classifier_value, classifier.kind, classifier.value)
        return classifiers


class RuleSpec(RequestModel):
    name: Name
    priority: int = Field(
        ge=0, le=1_000_000, description="Rules are evaluated in ascending priority, then name."
    )
    hosts: list[HostId] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_HOSTS_PER_ITEM,
        description="Hosts the rule is installed on; null (the default) means every host.",
    )
    match: CheckedMatch
    detours: list[Detour] = Field(
        min_length=1, max_length=MAX_DETOURS,
        description="A file target is an absolute, normal path or tcp://HOST:PORT/...; no control characters.",
    )

    @field_validator("detours")
    @classmethod
    def _meaningful_detours(cls, detours: list[Detour]) -> list[Detour]:
        for index, detour in enumerate(detours):
            _at(f"detours[{index}].to.target", check_detour_target, detour.to.kind, detour.to.target)
        return detours



class TenantOut(BaseModel):
    name: str
    classifiers: list[Classifier]
    description: str | None
    created_at: datetime
    updated_at: datetime


class TenantChange(TenantOut):
    rollout_id: str = Field(description="Rollout that ships this change to the hosts.")


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


class HostOut(BaseModel):
    id: str
    agent_version: str
    capabilities: Capabilities
    enrolled_at: datetime = Field(description="First registration.")
    registered_at: datetime = Field(description="Latest registration (agent start or reconnect).")
    last_seen: datetime
    alive: bool | None = Field(
        description="Whether the agent's heartbeat key exists; null when Redis cannot be asked."
    )
    desired_generation: int
    acked_generation: int


RolloutState = Literal["pending", "succeeded", "failed", "timed_out"]
TargetStatus = Literal["pending", "applied", "rejected"]
TargetPhase = Literal["quiesce", "drained", "install"]


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
    phase: Literal["quiesce", "hold", "install"] | None = Field(
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


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ok"]
    checks: dict[str, str]


Role = Literal["admin", "operator", "viewer"]


class TokenSpec(RequestModel):
    name: Name = Field(description="Unique label of the token, shown in the audit trail as token:<name>.")
    role: Role
    tenant: Name | None = Field(
        default=None,
        description="Set: the token sees and changes only this tenant (roles operator and viewer only).",
    )


class TokenOut(BaseModel):
    id: str
    name: str
    role: Role
    tenant: str | None
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class TokenCreated(TokenOut):
    token: str = Field(description="The bearer secret. Shown only in this response; the controller keeps a hash.")


class AuditEventOut(BaseModel):
    id: int
    at: datetime
    actor: str = Field(description="bootstrap, anonymous (auth off) or token:<name>.")
    action: str = Field(description="<kind>.<verb>, e.g. rule.update.")
    resource_kind: str
    resource_name: str
    tenant: str | None
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    rollout_id: str | None


class PolicyResult(BaseModel):
    name: str
    version: int = Field(description="Version this document has (dry run: would have) once applied.")
    dry_run: bool
    rollout_id: str | None = Field(description="Rollout shipping the change; null on a dry run.")
    diff: dict[str, Any] = Field(
        description="tenants, rules and stages added/removed/changed overall, and per host under hosts."
    )
    warnings: list[dict[str, Any]] = Field(description="Verifier warnings (check, rules, message).")


class PolicyOut(BaseModel):
    name: str
    version: int
    created_at: datetime
    created_by: str
    rollout_id: str | None
    tenants: list[str]
    document: str = Field(description="The document as it was sent.")
    compiled: dict[str, Any] = Field(description="The tenants, stages and rules it compiled to.")
