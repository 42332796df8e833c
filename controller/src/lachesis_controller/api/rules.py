"""Rules: the sSwitch forwarding table. A change is a new generation for the hosts the rule
is (or was) installed on."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.api import etags
from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.api.read_cache import Answer, cached
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import Principal, require_tenant
from lachesis_controller.auth.endpoint_roots import confine, file_targets
from lachesis_controller.bus.messages import Detour, Match
from lachesis_controller.config import Settings
from lachesis_controller.db import utcnow
from lachesis_controller.models import Host, Rule, Tenant
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.policy.enforced import check_rule_ops
from lachesis_controller.policy.ruleset import current_rules, declared_stages, rule_dict
from lachesis_controller.policy.verify import verify
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas.rules import RuleChange, RuleOut, RuleSpec
from lachesis_controller.validation.bounds import MAX_RULES, require_room
from lachesis_controller.validation.problems import conflict, invalid, not_found, problem_responses, unsafe

router = APIRouter(prefix="/rules", tags=["rules"])


def rule_out(rule: Rule) -> RuleOut:
    return RuleOut(
        name=rule.name,
        priority=rule.priority,
        hosts=rule.hosts,
        match=Match.model_validate(rule.match),
        detours=[Detour.model_validate(d) for d in rule.detours],
        created_at=rule.created_at,
        updated_at=rule.updated_at,
    )


def _change(rule: Rule, rollout_id: str) -> RuleChange:
    out = rule_out(rule)
    return RuleChange(**{name: getattr(out, name) for name in RuleOut.model_fields}, rollout_id=rollout_id)


def _check_references(session: Session, spec: RuleSpec, principal: Principal, settings: Settings) -> None:
    """Everything a rule names must exist, and its host paths lie under its tenant's roots:
    422 naming each bad field, before any write."""
    confine(session, principal, settings.endpoint_roots, file_targets([d.dump() for d in spec.detours], "detours"))
    errors: list[tuple[str, str]] = []
    if spec.match.tenant is not None and session.get(Tenant, spec.match.tenant) is None:
        errors.append(("match.tenant", f"no tenant named {spec.match.tenant!r}"))
    seen: set[str] = set()
    for index, host_id in enumerate(spec.hosts or []):
        if host_id in seen:
            errors.append((f"hosts[{index}]", f"host {host_id!r} is listed twice"))
        elif session.get(Host, host_id) is None:
            errors.append((f"hosts[{index}]", f"no host named {host_id!r} has registered"))
        seen.add(host_id)
    if errors:
        raise invalid(errors)
    tenants = {t.name: t.classifiers for t in session.scalars(select(Tenant))}
    check_rule_ops(
        session,
        [{"name": spec.name, "hosts": spec.hosts, "match": spec.match.dump()}],
        tenants,
        lambda _r, o: f"match.ops[{o}]",
    )


def _audit(
    session: Session,
    principal: Principal,
    action: str,
    name: str,
    tenant: str | None,
    before: RuleOut | None,
    after: RuleOut | None,
    rollout_id: str,
) -> None:
    audit.record(
        session,
        principal,
        action,
        kind="rule",
        name=name,
        tenant=tenant,
        before=audit.snapshot(before),
        after=audit.snapshot(after),
        rollout_id=rollout_id,
    )


def _verify(session: Session, rule: Rule) -> None:
    """Refuse the change if the rule set with it would be unsafe (policy/verify.py). Runs
    after the change is in the session, before the commit: a refusal rolls it back."""
    rules = [r for r in current_rules(session) if r["name"] != rule.name] + [rule_dict(rule)]
    report = verify(rules, declared_stages(session))
    mine = [f for f in report.errors if rule.name in f.rules]
    if mine:
        raise unsafe(mine, report.warnings)


def _targets(session: Session, *host_lists: list[str] | None) -> list[str]:
    """Hosts that must get a new generation: the union of the rule's host lists (old and
    new), or every host when any of them is null."""
    if any(hosts is None for hosts in host_lists):
        return rollouts.all_host_ids(session)
    return sorted({h for hosts in host_lists for h in hosts or []})


def _apply_spec(rule: Rule, spec: RuleSpec) -> None:
    rule.priority = spec.priority
    rule.tenant = spec.match.tenant
    rule.hosts = list(spec.hosts) if spec.hosts is not None else None
    rule.match = spec.match.dump()
    rule.detours = [d.dump() for d in spec.detours]


def _rollout(
    session: Session, settings: Settings, cause: str, host_ids: list[str]
) -> tuple[str, list[rollouts.Publication]]:
    rollout, publications = rollouts.start_rollout(
        session,
        cause=cause,
        trigger="rule",
        host_ids=host_ids,
        now=utcnow(),
        timeout_s=settings.rollout_timeout_s,
        traceparent=current_traceparent(),
    )
    return rollout.id, publications


# exclude_unset keeps `match` as it was given: a field left out stays out, not null.
@router.post(
    "",
    status_code=201,
    response_model=RuleChange,
    response_model_exclude_unset=True,
    responses=problem_responses(400, 401, 403, 409, 415, 422),
)
async def create_rule(
    spec: RuleSpec,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> RuleChange:
    require_tenant(principal, spec.match.tenant, f"create rule {spec.name!r}")
    with session.begin():
        if session.get(Rule, spec.name) is not None:
            raise conflict("name", f"rule {spec.name!r} already exists")
        require_room(session, Rule, MAX_RULES, "rules")
        _check_references(session, spec, principal, settings)
        now = utcnow()
        rule = Rule(name=spec.name, created_at=now, updated_at=now)
        _apply_spec(rule, spec)
        _verify(session, rule)
        session.add(rule)
        rollout_id, publications = _rollout(
            session, settings, f"rule {spec.name} created", _targets(session, rule.hosts)
        )
        _audit(session, principal, "rule.create", spec.name, rule.tenant, None, rule_out(rule), rollout_id)
    await ship(bus, publications, response, rollout_id)
    response.headers["Location"] = f"/api/v1/rules/{spec.name}"
    response.headers["ETag"] = etags.etag_of(rule_out(rule))
    return _change(rule, rollout_id)


@router.get(
    "",
    response_model=list[RuleOut],
    response_model_exclude_unset=True,
    summary="All rules in evaluation order (priority, then name)",
)
async def list_rules(request: Request, principal: PrincipalDep, page: PageDep) -> Response:
    def build(session: Session) -> Answer:
        query = select(Rule).order_by(Rule.priority, Rule.name)
        if principal.tenant is not None:
            query = query.where(Rule.tenant == principal.tenant)
        items, headers = page.split([rule_out(r) for r in session.scalars(query)], request)
        return Answer(_RULES.dump_json(items, exclude_unset=True), headers)

    return (await cached(request, "rules", (principal.tenant, request.url.query), build)).response()


@router.get(
    "/{name}",
    response_model=RuleOut,
    response_model_exclude_unset=True,
    responses=problem_responses(403, 404),
)
async def get_rule(name: str, request: Request, principal: PrincipalDep) -> Response:
    def build(session: Session) -> Answer:
        rule = session.get(Rule, name)
        if rule is None:
            raise not_found("rule", name)
        out = rule_out(rule)
        return Answer(_RULE.dump_json(out, exclude_unset=True), {"ETag": etags.etag_of(out)}, owner=rule.tenant)

    answer = await cached(request, "rules", (name,), build)
    # At every read, kept or not: the answer is the same for every caller, who may see it is not.
    require_tenant(principal, answer.owner, f"read rule {name!r}")
    return answer.response()


# How FastAPI would write the response models (read_cache.py keeps the bytes).
_RULES = TypeAdapter(list[RuleOut])
_RULE = TypeAdapter(RuleOut)


@router.put(
    "/{name}",
    response_model=RuleChange,
    response_model_exclude_unset=True,
    responses=problem_responses(400, 401, 403, 404, 412, 415, 422),
    summary="Replace a rule",
)
async def replace_rule(
    name: str,
    spec: RuleSpec,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    if_match: etags.IfMatch = None,
) -> RuleChange:
    if spec.name != name:
        raise invalid([("name", f"must equal the name in the path ({name!r}); renaming is delete + create")])
    with session.begin():
        rule = session.get(Rule, name)
        if rule is None:
            raise not_found("rule", name)
        require_tenant(principal, rule.tenant, f"change rule {name!r}")
        require_tenant(principal, spec.match.tenant, f"move rule {name!r} to another tenant")
        before = rule_out(rule)
        etags.check(if_match, etags.etag_of(before), f"rule {name!r}")
        _check_references(session, spec, principal, settings)
        old_hosts = rule.hosts
        _apply_spec(rule, spec)
        rule.updated_at = utcnow()
        _verify(session, rule)
        rollout_id, publications = _rollout(
            session, settings, f"rule {name} updated", _targets(session, old_hosts, rule.hosts)
        )
        _audit(session, principal, "rule.update", name, rule.tenant, before, rule_out(rule), rollout_id)
    await ship(bus, publications, response, rollout_id)
    response.headers["ETag"] = etags.etag_of(rule_out(rule))
    return _change(rule, rollout_id)


@router.delete(
    "/{name}",
    response_model=RuleChange,
    response_model_exclude_unset=True,
    responses=problem_responses(401, 403, 404, 412),
)
async def delete_rule(
    name: str,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    if_match: etags.IfMatch = None,
) -> RuleChange:
    with session.begin():
        rule = session.get(Rule, name)
        if rule is None:
            raise not_found("rule", name)
        require_tenant(principal, rule.tenant, f"delete rule {name!r}")
        etags.check(if_match, etags.etag_of(rule_out(rule)), f"rule {name!r}")
        host_ids = _targets(session, rule.hosts)
        session.delete(rule)
        rollout_id, publications = _rollout(session, settings, f"rule {name} deleted", host_ids)
        _audit(session, principal, "rule.delete", name, rule.tenant, rule_out(rule), None, rollout_id)
    await ship(bus, publications, response, rollout_id)
    return _change(rule, rollout_id)
