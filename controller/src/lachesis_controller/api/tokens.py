"""API tokens (admin only, enforced by the auth middleware): create shows the secret once,
list never shows it, revoke keeps the row so the audit trail still names the token."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response
from sqlalchemy import select

from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import ADMIN
from lachesis_controller.auth.tokens import hash_secret, new_secret
from lachesis_controller.db import utcnow
from lachesis_controller.models import ApiToken, Tenant
from lachesis_controller.schemas.tokens import TokenCreated, TokenOut, TokenSpec
from lachesis_controller.validation.problems import ProblemError, conflict, invalid, not_found, problem_responses

router = APIRouter(prefix="/tokens", tags=["tokens"])


def token_out(token: ApiToken) -> TokenOut:
    return TokenOut(
        id=token.id,
        name=token.name,
        role=token.role,
        tenant=token.tenant,
        created_at=token.created_at,
        created_by=token.created_by,
        revoked_at=token.revoked_at,
    )


@router.post(
    "",
    status_code=201,
    response_model=TokenCreated,
    responses=problem_responses(400, 401, 403, 409, 415, 422),
)
async def create_token(
    spec: TokenSpec, response: Response, session: SessionDep, principal: PrincipalDep
) -> TokenCreated:
    if spec.tenant is not None and spec.role == ADMIN:
        # Admin means managing tokens, which is not a tenant's business.
        raise invalid([("role", "a tenant-scoped token can be operator or viewer, not admin")])
    secret = new_secret()
    with session.begin():
        if session.scalars(select(ApiToken.id).where(ApiToken.name == spec.name)).first():
            raise conflict("name", f"a token named {spec.name!r} already exists")
        if spec.tenant is not None and session.get(Tenant, spec.tenant) is None:
            # A token for a tenant made later would see it at once; make the tenant first.
            raise invalid([("tenant", f"no tenant named {spec.tenant!r}")])
        token = ApiToken(
            id=str(uuid.uuid4()),
            name=spec.name,
            role=spec.role,
            tenant=spec.tenant,
            token_hash=hash_secret(secret),
            created_at=utcnow(),
            created_by=principal.actor,
            revoked_at=None,
        )
        session.add(token)
        out = token_out(token)
        audit.record(
            session,
            principal,
            "token.create",
            kind="token",
            name=spec.name,
            tenant=spec.tenant,
            before=None,
            after=audit.snapshot(out),
            rollout_id=None,
        )
    response.headers["Location"] = f"/api/v1/tokens/{token.id}"
    return TokenCreated(**out.model_dump(), token=secret)


@router.get("", response_model=list[TokenOut], summary="All tokens, revoked ones included")
async def list_tokens(request: Request, response: Response, session: SessionDep, page: PageDep) -> list[TokenOut]:
    with session.begin():
        rows = session.scalars(select(ApiToken).order_by(ApiToken.created_at, ApiToken.name))
        return page.cut([token_out(t) for t in rows], request, response)


@router.delete(
    "/{token_id}",
    response_model=TokenOut,
    responses=problem_responses(401, 403, 404, 409),
    summary="Revoke a token: it stops working at once",
)
async def revoke_token(token_id: str, session: SessionDep, principal: PrincipalDep) -> TokenOut:
    with session.begin():
        token = session.get(ApiToken, token_id)
        if token is None:
            raise not_found("token", token_id)
        if token.revoked_at is not None:
            raise ProblemError(409, f"token {token.name!r} is already revoked", kind="conflict")
        before = audit.snapshot(token_out(token))
        token.revoked_at = utcnow()
        out = token_out(token)
        audit.record(
            session,
            principal,
            "token.revoke",
            kind="token",
            name=token.name,
            tenant=token.tenant,
            before=before,
            after=audit.snapshot(out),
            rollout_id=None,
        )
    return out
