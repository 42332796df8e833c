"""Applying a policy document: everything is decided before the first write (parse with
positions, schema, names, ownership, references, the verifier, bounds), then the whole
change is written in the caller's transaction, so a refused or failed policy leaves the
database as it was. The REST router (api/policies.py) runs this and starts the rollout.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.auth.authz import Principal, forbidden
from lachesis_controller.auth.endpoint_roots import confine
from lachesis_controller.db import utcnow
from lachesis_controller.models import Host, PolicyVersion, Rule, Tenant
from lachesis_controller.policy.compile import Compiled, compile_policy, duplicates
from lachesis_controller.policy.enforced import check_classifiers, check_rule_ops
from lachesis_controller.policy.parse import Located, parse, validate
from lachesis_controller.policy.ruleset import current_rules, declared_stages, policies_in_force, stage_info
from lachesis_controller.policy.verify import verify
from lachesis_controller.validation.bounds import MAX_RULES, MAX_TENANTS, within
from lachesis_controller.validation.problems import ProblemError, conflict, invalid, unsafe


@dataclass(frozen=True)
class Document:
    """A policy document parsed (with the positions of its nodes) and compiled."""

    text: str
    located: Located
    compiled: Compiled
    name: str


@dataclass(frozen=True)
class Plan:
    """What applying a document changes, checked and not yet written."""

    document: Document
    owned: Compiled | None  # what the policy's previous version made
    version: int
    dropped_tenants: set[str]
    diff: dict[str, Any]
    warnings: list[dict[str, Any]]


def read(text: str) -> Document:
    """Parse, validate and compile; a refusal names the line and field."""
    located = parse(text)
    document = validate(located)
    compiled = compile_policy(document)
    if errors := duplicates(compiled):
        raise invalid(errors)
    return Document(text, located, compiled, document.metadata.name)


def previous_version(session: Session, name: str) -> PolicyVersion | None:
    return session.scalars(
        select(PolicyVersion).where(PolicyVersion.name == name).order_by(PolicyVersion.version.desc()).limit(1)
    ).first()


def plan(
    session: Session,
    principal: Principal,
    endpoint_roots: tuple[str, ...],
    doc: Document,
    previous: PolicyVersion | None,
) -> Plan:
    """Every check, and the per-host change; raises a ProblemError on the first refusal."""
    compiled, name = doc.compiled, doc.name
    owned = Compiled.from_dict(previous.compiled) if previous else None
    _check_scope(principal, compiled, owned)
    confine(session, principal, endpoint_roots, compiled.host_paths())
    _check_names(session, compiled, owned, name)

    owned_rules = {r["name"] for r in owned.rules} if owned else set()
    rules_before = current_rules(session)
    remaining = [r for r in rules_before if r["name"] not in owned_rules]
    _check_references(session, compiled, remaining, owned)
    check_classifiers(
        session,
        compiled.tenants,
        lambda t, c: f"spec.tenants[{t}].classifiers[{c}].kind",
        lambda t, c: doc.located.where(("spec", "tenants", t, "classifiers", c, "kind")),
    )
    tenants_known = {t.name: t.classifiers for t in session.scalars(select(Tenant))}
    tenants_known.update({t["name"]: t["classifiers"] for t in compiled.tenants})
    check_rule_ops(
        session,
        compiled.rules,
        tenants_known,
        lambda r, o: f"spec.rules[{r}].match.ops[{o}]",
        lambda r, o: doc.located.where(("spec", "rules", r, "match", "ops", o)),
    )
    rules_after = sorted(remaining + compiled.rules, key=lambda r: (r["priority"], r["name"]))
    within(len(rules_after), MAX_RULES, "rules", "spec.rules")

    other_stages = [s for p in policies_in_force(session) if p.name != name for s in p.compiled.get("stages", [])]
    stages_before = other_stages + (owned.stages if owned else [])
    stages_after = other_stages + compiled.stages
    report = verify(
        rules_after,
        {s["name"]: stage_info(s) for s in stages_after},
        strict_targets=[r["name"] for r in compiled.rules],
    )
    if report.errors:
        raise _with_positions(unsafe(report.errors, report.warnings), compiled, doc.located)

    tenants_before = {t.name: _tenant_dict(t) for t in session.scalars(select(Tenant))}
    dropped_tenants = ({t["name"] for t in owned.tenants} if owned else set()) - {t["name"] for t in compiled.tenants}
    tenants_after = {n: t for n, t in tenants_before.items() if n not in dropped_tenants}
    tenants_after.update({t["name"]: t for t in compiled.tenants})
    within(len(tenants_after), MAX_TENANTS, "tenants", "spec.tenants")
    diff = _plan_diff(session, rules_before, rules_after, stages_before, stages_after, tenants_before, tenants_after)
    version = (previous.version if previous else 0) + 1
    return Plan(doc, owned, version, dropped_tenants, diff, [w.as_dict() for w in report.warnings])


def write(session: Session, plan: Plan, principal: Principal) -> PolicyVersion:
    """Write the planned change and the new version (its rollout_id is the caller's to set)."""
    compiled, owned = plan.document.compiled, plan.owned
    _write(session, compiled, owned, plan.dropped_tenants)
    # In the session before the rollout: the desired state it builds ships this
    # version's stages (stages/store.py reads the policies in force).
    policy_version = PolicyVersion(
        name=plan.document.name,
        version=plan.version,
        document=plan.document.text,
        compiled=compiled.as_dict(),
        tenants=concerned(plan),
        created_at=utcnow(),
        created_by=principal.actor,
        rollout_id=None,
    )
    session.add(policy_version)
    session.flush()
    return policy_version


def concerned(plan: Plan) -> list[str]:
    """The tenants the new or the previous version concerns."""
    owned = plan.owned
    return sorted(set(plan.document.compiled.tenants_concerned()) | set(owned.tenants_concerned() if owned else []))


def _check_scope(principal: Principal, compiled: Compiled, previous: Compiled | None) -> None:
    if principal.tenant is None:
        return
    if compiled.tenants:
        raise forbidden(principal, "declare tenants in a policy")
    concerned = set(compiled.tenants_concerned()) | set(previous.tenants_concerned() if previous else [])
    if concerned - {principal.tenant} or any(r["match"].get("tenant") is None for r in compiled.rules):
        raise forbidden(principal, "apply a policy that concerns other tenants or all tenants")
    if any(s.get("owner") is None for s in compiled.stages):
        raise forbidden(principal, "declare shared stages")


def _check_names(session: Session, compiled: Compiled, owned: Compiled | None, policy: str) -> None:
    """A policy may only create names nobody has, or replace what its previous version made."""
    owned_tenants = {t["name"] for t in owned.tenants} if owned else set()
    owned_rules = {r["name"] for r in owned.rules} if owned else set()
    for index, tenant in enumerate(compiled.tenants):
        if tenant["name"] not in owned_tenants and session.get(Tenant, tenant["name"]) is not None:
            raise conflict(
                f"spec.tenants[{index}].name", f"tenant {tenant['name']!r} exists and is not policy {policy!r}'s"
            )
    for index, rule in enumerate(compiled.rules):
        if rule["name"] not in owned_rules and session.get(Rule, rule["name"]) is not None:
            raise conflict(f"spec.rules[{index}].name", f"rule {rule['name']!r} exists and is not policy {policy!r}'s")
    other_stages = declared_stages(session, except_policy=policy)
    for index, stage in enumerate(compiled.stages):
        if stage["name"] in other_stages:
            raise conflict(f"spec.stages[{index}].name", f"stage {stage['name']!r} is declared by another policy")


def _check_references(
    session: Session, compiled: Compiled, remaining_rules: list[dict[str, Any]], owned: Compiled | None
) -> None:
    declared = {t["name"] for t in compiled.tenants}
    dropped = ({t["name"] for t in owned.tenants} if owned else set()) - declared
    known = (set(session.scalars(select(Tenant.name))) - dropped) | declared
    hosts = set(session.scalars(select(Host.id)))
    stages = {s["name"]: s for s in compiled.stages}
    errors: list[tuple[str, str]] = []
    for index, rule in enumerate(compiled.rules):
        tenant = rule["match"].get("tenant")
        if tenant is not None and tenant not in known:
            errors.append((f"spec.rules[{index}].match.tenant", f"no tenant named {tenant!r}"))
        for h_index, host in enumerate(rule["hosts"] or []):
            if host not in hosts:
                errors.append((f"spec.rules[{index}].hosts[{h_index}]", f"no host named {host!r} has registered"))
    for index, stage in enumerate(compiled.stages):
        for field, names in (("owner", [stage.get("owner")]), ("shared_with", stage.get("shared_with", []))):
            for name in names:
                if name is not None and name not in known:
                    errors.append((f"spec.stages[{index}].{field}", f"no tenant named {name!r}"))
        parent = stage.get("parent")
        if parent is not None and (
            parent not in stages or stages[parent].get("kind") != "cache" or stages[parent].get("level") != 2
        ):
            errors.append((f"spec.stages[{index}].parent", f"{parent!r} is not a level-2 cache stage of this policy"))
    for rule in remaining_rules:
        if rule["match"].get("tenant") in dropped:
            errors.append(
                (
                    "spec.tenants",
                    f"tenant {rule['match']['tenant']!r} would be removed but rule {rule['name']!r} names it",
                )
            )
    if errors:
        raise invalid(errors)


def _with_positions(problem: ProblemError, compiled: Compiled, located: Located) -> ProblemError:
    """Point each refusal at the first of its rules that this document declares."""
    index = {r["name"]: i for i, r in enumerate(compiled.rules)}
    for error, violation in zip(problem.errors or [], problem.extra.get("violations", []), strict=False):
        mine = [index[name] for name in violation["rules"] if name in index]
        if mine and (where := located.where(("spec", "rules", mine[0], "name"))):
            error.line, error.column = where
    return problem


def _diff(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "added": [after[n] for n in sorted(after.keys() - before.keys())],
        "removed": sorted(before.keys() - after.keys()),
        "changed": [
            {"name": n, "before": before[n], "after": after[n]}
            for n in sorted(before.keys() & after.keys())
            if before[n] != after[n]
        ],
    }


def _on(items: list[dict[str, Any]], host: str) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items if i.get("hosts") is None or host in i["hosts"]}


def _plan_diff(
    session: Session,
    rules_before: list[dict[str, Any]],
    rules_after: list[dict[str, Any]],
    stages_before: list[dict[str, Any]],
    stages_after: list[dict[str, Any]],
    tenants_before: dict[str, dict[str, Any]],
    tenants_after: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    hosts = {}
    for host in sorted(session.scalars(select(Host.id))):
        rules = _diff(_on(rules_before, host), _on(rules_after, host))
        stages = _diff(_on(stages_before, host), _on(stages_after, host))
        hosts[host] = {"rules": rules, "stages": stages}
    return {
        "tenants": _diff(tenants_before, tenants_after),
        "rules": _diff({r["name"]: r for r in rules_before}, {r["name"]: r for r in rules_after}),
        "stages": _diff({s["name"]: s for s in stages_before}, {s["name"]: s for s in stages_after}),
        "hosts": hosts,
    }


def _tenant_dict(tenant: Tenant) -> dict[str, Any]:
    return {"name": tenant.name, "classifiers": tenant.classifiers, "description": tenant.description}


def _write(session: Session, compiled: Compiled, owned: Compiled | None, dropped_tenants: set[str]) -> None:
    now = utcnow()
    new_rules = {r["name"] for r in compiled.rules}
    _delete(session, Rule, ({r["name"] for r in owned.rules} if owned else set()) - new_rules)
    for spec in compiled.tenants:
        tenant = _get_or_add(session, Tenant, spec["name"], now)
        tenant.classifiers, tenant.description, tenant.updated_at = spec["classifiers"], spec["description"], now
    session.flush()
    for spec in compiled.rules:
        rule = _get_or_add(session, Rule, spec["name"], now)
        rule.priority, rule.tenant, rule.hosts = spec["priority"], spec["match"].get("tenant"), spec["hosts"]
        rule.match, rule.detours, rule.updated_at = spec["match"], spec["detours"], now
    session.flush()
    _delete(session, Tenant, dropped_tenants)


def _get_or_add(session: Session, model: type[Tenant] | type[Rule], name: str, now: datetime) -> Any:
    row = session.get(model, name)
    if row is None:
        row = model(name=name, created_at=now)
        session.add(row)
    return row


def _delete(session: Session, model: type[Tenant] | type[Rule], names: set[str]) -> None:
    for name in names:
        if (row := session.get(model, name)) is not None:
            session.delete(row)
    session.flush()
