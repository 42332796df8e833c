"""The rule set and declared stages as the verifier sees them, read from the database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from lachesis_controller.models import PolicyVersion, Rule
from lachesis_controller.policy.verify import StageInfo


def rule_dict(rule: Rule) -> dict[str, Any]:
    return {
        "name": rule.name,
        "priority": rule.priority,
        "hosts": rule.hosts,
        "match": rule.match,
        "detours": rule.detours,
    }


def current_rules(session: Session) -> list[dict[str, Any]]:
    return [rule_dict(r) for r in session.scalars(select(Rule).order_by(Rule.priority, Rule.name))]


def policies_in_force(session: Session) -> list[PolicyVersion]:
    newest = (
        select(PolicyVersion.name, func.max(PolicyVersion.version).label("version"))
        .group_by(PolicyVersion.name)
        .subquery()
    )
    return list(
        session.scalars(
            select(PolicyVersion)
            .join(newest, (PolicyVersion.name == newest.c.name) & (PolicyVersion.version == newest.c.version))
            .order_by(PolicyVersion.name)
        )
    )


def stage_info(stage: dict[str, Any]) -> StageInfo:
    files = tuple(stage.get("write_set", [])) + tuple(stage.get("read_set", [])) + tuple(stage.get("candidates", []))
    return StageInfo(
        name=stage["name"],
        owner=stage.get("owner"),
        shared_with=tuple(stage.get("shared_with", [])),
        files=files,
    )


def declared_stages(session: Session, *, except_policy: str | None = None) -> dict[str, StageInfo]:
    stages: dict[str, StageInfo] = {}
    for policy in policies_in_force(session):
        if policy.name == except_policy:
            continue
        for stage in policy.compiled.get("stages", []):
            stages[stage["name"]] = stage_info(stage)
    return stages
