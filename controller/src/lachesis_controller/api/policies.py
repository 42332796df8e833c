"""Policies: a YAML (or JSON) document in, the exact per-host change out; applied, the
change ships as one rollout like any rule edit. The checks and the write are
policy/service.py's; this router reads the body, holds the transaction and starts the rollout.
"""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from lachesis_controller.api import etags
from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import Principal, forbidden
from lachesis_controller.db import utcnow
from lachesis_controller.models import PolicyVersion
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.policy import service as policy_service
from lachesis_controller.policy.ruleset import policies_in_force
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas.policies import PolicyOut, PolicyResult
from lachesis_controller.validation.problems import ProblemError, not_found, problem_responses

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
            415,
            f"send the policy as application/yaml or application/json, got {content_type or 'no Content-Type'}",
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
                400,
                f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
                kind="malformed-json",
                title="Malformed JSON",
            ) from None
    return text


@router.post(
    "",
    status_code=201,
    response_model=PolicyResult,
    openapi_extra=_BODY_DOC,
    responses={
        200: {"model": PolicyResult, "description": "Dry run: what applying would change"},
        **problem_responses(400, 401, 403, 409, 412, 413, 415, 422),
    },
    summary="Apply a policy document, or with dry_run=true show the per-host change",
)
async def apply_policy(
    request: Request,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    dry_run: Annotated[bool, Query()] = False,
    if_match: etags.IfMatch = None,
) -> PolicyResult:
    doc = policy_service.read(await _read_document(request))
    name = doc.name
    with session.begin():
        previous = policy_service.previous_version(session, name)
        etags.check(if_match, _etag(previous) if previous else None, f"policy {name!r}")
        plan = policy_service.plan(session, principal, settings.endpoint_roots, doc, previous)
        if dry_run:
            response.status_code = 200
            return PolicyResult(
                name=name,
                version=plan.version,
                dry_run=True,
                rollout_id=None,
                diff=plan.diff,
                warnings=plan.warnings,
            )
        policy_version = policy_service.write(session, plan, principal)
        rollout, publications = rollouts.start_rollout(
            session,
            cause=f"policy {name} v{plan.version} applied",
            trigger="policy",
            host_ids=rollouts.all_host_ids(session),
            now=utcnow(),
            timeout_s=settings.rollout_timeout_s,
            traceparent=current_traceparent(),
        )
        policy_version.rollout_id = rollout.id
        concerned = policy_service.concerned(plan)
        audit.record(
            session,
            principal,
            "policy.apply",
            kind="policy",
            name=name,
            tenant=concerned[0] if len(concerned) == 1 else None,
            before=plan.owned.as_dict() if plan.owned else None,
            after=doc.compiled.as_dict(),
            rollout_id=rollout.id,
        )
    await ship(bus, publications, response, rollout.id)
    response.headers["Location"] = f"/api/v1/policies/{name}"
    response.headers["ETag"] = f'"v{plan.version}"'
    return PolicyResult(
        name=name,
        version=plan.version,
        dry_run=False,
        rollout_id=rollout.id,
        diff=plan.diff,
        warnings=plan.warnings,
    )


def _etag(policy: PolicyVersion) -> str:
    # Versions only grow, so the version names the state exactly.
    return f'"v{policy.version}"'


def _policy_out(policy: PolicyVersion) -> PolicyOut:
    return PolicyOut(
        name=policy.name,
        version=policy.version,
        created_at=policy.created_at,
        created_by=policy.created_by,
        rollout_id=policy.rollout_id,
        tenants=policy.tenants,
        document=policy.document,
        compiled=policy.compiled,
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
        policy = policy_service.previous_version(session, name)
        if policy is None:
            raise not_found("policy", name)
        if not _visible(principal, policy):
            raise forbidden(principal, f"read policy {name!r} (it concerns other tenants)")
        response.headers["ETag"] = _etag(policy)
        return _policy_out(policy)
