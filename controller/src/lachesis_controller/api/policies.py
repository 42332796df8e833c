"""Policies: a YAML (or JSON) document in, the exact per-host change out; applied, the
change ships as one rollout like any rule edit.

Everything is decided before the first write: parse with positions, schema, names, the
verifier, ownership. Apply then writes the whole change in one transaction, so a refused
or failed policy leaves the database as it was.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.api import etags
from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import Principal, forbidden
from lachesis_controller.auth.endpoint_roots import confine
from lachesis_controller.db import utcnow
from lachesis_controller.models import Host, PolicyVersion, Rule, Tenant
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.policy.compile import Compiled, compile_policy, duplicates
from lachesis_controller.policy.parse import Located, parse, validate
from lachesis_controller.policy.ruleset import current_rules, declared_stages, policies_in_force, stage_info
from lachesis_controller.policy.verify import verify
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas import PolicyOut, PolicyResult
from lachesis_controller.validation.bounds import MAX_RULES, MAX_TENANTS, within
from lachesis_controller.validation.problems import (
    ProblemError,
    conflict,
    invalid,
    not_found,
    problem_responses,
    unsafe,
)

router = APIRouter(prefix="/policies", tags=["policies"])

MAX_DOCUMENT_BYTES = 1 << 20
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")

_BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "object"}},
        },
        "description": "A policy document (policies/schema/policy.schema.json).",
    }
}


async def _read_document(request: Request) -> str:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in YAML_TYPES and content_type != "application/json":
        raise ProblemError(
            415, f"send the policy as application/yaml or application/json, got {content_type or 'no Content-Type'}",
            kind="unsupported-media-type",
        )
    body = await request.body()
    if len(body) > MAX_DOCUMENT_BYTES:
        raise ProblemError(413, f"a policy may be at most {MAX_DOCUMENT_BYTES} bytes", kind="content-too-large")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError(400, "the policy is not UTF-8 text", kind="malformed-yaml", title="Malformed YAML") from None
    if content_type == "application/json":
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProblemError(
                400, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                kind="malformed-json", title="Malformed JSON",
            ) from None
    return text


def _previous(session: Session, name: str) -> PolicyVersion | None:
    return session.scalars(
        select(PolicyVersion).where(PolicyVersion.name == name).order_by(PolicyVersion.version.desc()).limit(1)
    ).first()


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
            raise conflict(f"spec.tenants[{index}].name", f"tenant {tenant['name']!r} exists and is not policy {policy!r}'s")
    for index, rule in enumerate(compiled.rules):
        if rule["name"] not in owned_rules and session.get(Rule, rule["name"]) is not None:
            raise conflict(f"spec.rules[{index}].name", f"rule {rule['name']!r} exists and is not policy {policy!r}'s")
    other_stages = declared_stages(session, except_policy=policy)
    for index, stage in enumerate(compiled.stages):
        if stage["name"] in other_stages:
            raise conflict(f"spec.stages[{index}].name", f"stage {stage['name']!r} is declared by another policy")


def _check_references(session: Session, compiled: Compiled, remaining_rules: list[dict[str, Any]], owned: Compiled | None) -> None:
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
        if parent is not None and (parent not in stages or stages[parent].get("kind") != "cache" or stages[parent].get("level") != 2):
            errors.append((f"spec.stages[{index}].parent", f"{parent!r} is not a level-2 cache stage of this policy"))
    for rule in remaining_rules:
        if rule["match"].get("tenant") in dropped:
            errors.append(("spec.tenants", f"tenant {rule['match']['tenant']!r} would be removed but rule {rule['name']!r} names it"))
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
            for n in sorted(before.keys() & after.keys()) if before[n] != after[n]
        ],
    }


def _on(items: list[dict[str, Any]], host: str) -> dict[str, dict[str, Any]]:
    return {i["name"]: i for i in items if i.get("hosts") is None or host in i["hosts"]}


def _plan_diff(
    session: Session, rules_before: list[dict[str, Any]], rules_after: list[dict[str, Any]],
    stages_before: list[dict[str, Any]], stages_after: list[dict[str, Any]],
    tenants_before: dict[str, dict[str, Any]], tenants_after: dict[str, dict[str, Any]],
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


@router.post(
    "", status_code=201, response_model=PolicyResult, openapi_extra=_BODY_DOC,
    responses={200: {"model": PolicyResult, "description": "Dry run: what applying would change"},
               **problem_responses(400, 401, 403, 409, 412, 413, 415, 422)},
    summary="Apply a policy document, or with dry_run=true show the per-host change",
)
async def apply_policy(
    request: Request, response: Response, session: SessionDep, bus: BusDep, settings: SettingsDep,
    principal: PrincipalDep, dry_run: Annotated[bool, Query()] = False, if_match: etags.IfMatch = None,
) -> PolicyResult:
    text = await _read_document(request)
    located = parse(text)
    document = validate(located)
    compiled = compile_policy(document)
    if errors := duplicates(compiled):
        raise invalid(errors)
    name = document.metadata.name
    with session.begin():
        previous = _previous(session, name)
        etags.check(if_match, _etag(previous) if previous else None, f"policy {name!r}")
        owned = Compiled.from_dict(previous.compiled) if previous else None
        _check_scope(principal, compiled, owned)
        confine(session, principal, settings.endpoint_roots, compiled.host_paths())
        _check_names(session, compiled, owned, name)

        owned_rules = {r["name"] for r in owned.rules} if owned else set()
        rules_before = current_rules(session)
        remaining = [r for r in rules_before if r["name"] not in owned_rules]
        _check_references(session, compiled, remaining, owned)
        rules_after = sorted(remaining + compiled.rules, key=lambda r: (r["priority"], r["name"]))
        within(len(rules_after), MAX_RULES, "rules", "spec.rules")

        other_stages = [s for p in policies_in_force(session) if p.name != name for s in p.compiled.get("stages", [])]
        stages_before = other_stages + (owned.stages if owned else [])
        stages_after = other_stages + compiled.stages
        report = verify(
            rules_after, {s["name"]: stage_info(s) for s in stages_after},
            strict_targets=[r["name"] for r in compiled.rules],
        )
        if report.errors:
            raise _with_positions(unsafe(report.errors, report.warnings), compiled, located)

        tenants_before = {t.name: _tenant_dict(t) for t in session.scalars(select(Tenant))}
        dropped_tenants = ({t["name"] for t in owned.tenants} if owned else set()) - {t["name"] for t in compiled.tenants}
        tenants_after = {n: t for n, t in tenants_before.items() if n not in dropped_tenants}
        tenants_after.update({t["name"]: t for t in compiled.tenants})
        within(len(tenants_after), MAX_TENANTS, "tenants", "spec.tenants")
        diff = _plan_diff(session, rules_before, rules_after, stages_before, stages_after, tenants_before, tenants_after)
        version = (previous.version if previous else 0) + 1
        warnings = [w.as_dict() for w in report.warnings]
        if dry_run:
            response.status_code = 200
            return PolicyResult(name=name, version=version, dry_run=True, rollout_id=None, diff=diff, warnings=warnings)

        _write(session, compiled, owned, dropped_tenants)
        concerned = sorted(set(compiled.tenants_concerned()) | set(owned.tenants_concerned() if owned else []))
        # In the session before the rollout: the desired state it builds ships this
        # version's stages (stages/store.py reads the policies in force).
        policy_version = PolicyVersion(
            name=name, version=version, document=text, compiled=compiled.as_dict(), tenants=concerned,
            created_at=utcnow(), created_by=principal.actor, rollout_id=None,
        )
        session.add(policy_version)
        session.flush()
        rollout, publications = rollouts.start_rollout(
            session, cause=f"policy {name} v{version} applied", trigger="policy",
            host_ids=rollouts.all_host_ids(session), now=utcnow(),
            timeout_s=settings.rollout_timeout_s, traceparent=current_traceparent(),
        )
        policy_version.rollout_id = rollout.id
        audit.record(
            session, principal, "policy.apply", kind="policy", name=name,
            tenant=concerned[0] if len(concerned) == 1 else None,
            before=owned.as_dict() if owned else None, after=compiled.as_dict(), rollout_id=rollout.id,
        )
    await ship(bus, publications, response, rollout.id)
    response.headers["Location"] = f"/api/v1/policies/{name}"
    response.headers["ETag"] = f'"v{version}"'
    return PolicyResult(name=name, version=version, dry_run=False, rollout_id=rollout.id, diff=diff, warnings=warnings)


def _write(session: Session, compiled: Compiled, owned: Compiled | None, dropped_tenants: set[str]) -> None:
    now = utcnow()
    new_rules = {r["name"] for r in compiled.rules}
    for name in ({r["name"] for r in owned.rules} if owned else set()) - new_rules:
        if (rule := session.get(Rule, name)) is not None:
            session.delete(rule)
    session.flush()
    for spec in compiled.tenants:
        tenant = session.get(Tenant, spec["name"])
        if tenant is None:
            tenant = Tenant(name=spec["name"], created_at=now)
            session.add(tenant)
        tenant.classifiers, tenant.description, tenant.updated_at = spec["classifiers"], spec["description"], now
    session.flush()
    for spec in compiled.rules:
        rule = session.get(Rule, spec["name"])
        if rule is None:
            rule = Rule(name=spec["name"], created_at=now)
            session.add(rule)
        rule.priority, rule.tenant, rule.hosts = spec["priority"], spec["match"].get("tenant"), spec["hosts"]
        rule.match, rule.detours, rule.updated_at = spec["match"], spec["detours"], now
    session.flush()
    for name in dropped_tenants:
        if (tenant := session.get(Tenant, name)) is not None:
            session.delete(tenant)
    session.flush()


def _etag(policy: PolicyVersion) -> str:
    # Versions only grow, so the version names the state exactly.
    return f'"v{policy.version}"'


def _policy_out(policy: PolicyVersion) -> PolicyOut:
    return PolicyOut(
        name=policy.name, version=policy.version, created_at=policy.created_at,
        created_by=policy.created_by, rollout_id=policy.rollout_id, tenants=policy.tenants,
        document=policy.document, compiled=policy.compiled,
    )


def _visible(principal: Principal, policy: PolicyVersion) -> bool:
    return principal.tenant is None or set(policy.tenants) == {principal.tenant}


@router.get("", response_model=list[PolicyOut], summary="Policies in force (newest version of each)")
async def list_policies(
    request: Request, response: Response, session: SessionDep, principal: PrincipalDep, page: PageDep
) -> list[PolicyOut]:
    with session.begin():
        visible = [_policy_out(p) for p in policies_in_force(session) if _visible(principal, p)]
    return page.cut(visible, request, response)


@router.get("/{name}", response_model=PolicyOut, responses=problem_responses(403, 404))
async def get_policy(name: str, response: Response, session: SessionDep, principal: PrincipalDep) -> PolicyOut:
    with session.begin():
        policy = _previous(session, name)
        if policy is None:
            raise not_found("policy", name)
        if not _visible(principal, policy):
            raise forbidden(principal, f"read policy {name!r} (it concerns other tenants)")
        response.headers["ETag"] = _etag(policy)
        return _policy_out(policy)

