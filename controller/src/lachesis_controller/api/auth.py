"""Authentication of /api/v1 and the coarse, per-route half of authorisation.

A middleware rather than a dependency so that it runs before FastAPI reads the body: an
unauthenticated or unauthorised caller gets 401/403, never a parse error about a body it
should not send. What depends on the resource (which tenant a rule belongs to) is checked
by the handlers with the Principal the middleware leaves in the request state.

Auth is on when LACHESIS_API_TOKEN is set; that token is the bootstrap admin, and the
tokens made through /api/v1/tokens are accepted besides it. With no bootstrap token the API
is open and every caller acts as an anonymous admin (a development set-up).
"""

from __future__ import annotations

import secrets

from fastapi.security import HTTPBearer
from sqlalchemy import select
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from lachesis_controller.auth.authz import ADMIN, OPERATOR, Principal, refusal
from lachesis_controller.auth.tokens import hash_secret
from lachesis_controller.models import ApiToken
from lachesis_controller.validation.bounds import under
from lachesis_controller.validation.problems import problem_response

PROTECTED_PREFIX = "/api/v1"
TOKENS_PREFIX = "/api/v1/tokens"
TENANTS_PREFIX = "/api/v1/tenants"
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})

# Declares the scheme in the OpenAPI document; the check itself is the middleware.
bearer_scheme = HTTPBearer(
    auto_error=False,
    description="LACHESIS_API_TOKEN (bootstrap admin) or a token made with POST /api/v1/tokens",
)

ANONYMOUS = Principal(actor="anonymous", role=ADMIN, tenant=None, token_id=None)
BOOTSTRAP = Principal(actor="bootstrap", role=ADMIN, tenant=None, token_id=None)


class BearerAuthMiddleware:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.bootstrap = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not under(scope.get("path", ""), PROTECTED_PREFIX):
            await self.app(scope, receive, send)
            return
        principal = ANONYMOUS if self.bootstrap is None else self._authenticate(scope)
        if principal is None:
            response = problem_response(
                Request(scope),
                401,
                "missing, unknown or revoked bearer token: send 'Authorization: Bearer <token>'",
                kind="unauthorized",
                headers={"WWW-Authenticate": 'Bearer realm="lachesis"'},
            )
            await response(scope, receive, send)
            return
        denied = _route_refusal(principal, scope.get("method", "GET"), scope.get("path", ""))
        if denied is not None:
            response = problem_response(Request(scope), 403, denied, kind="forbidden")
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    def _authenticate(self, scope: Scope) -> Principal | None:
        assert self.bootstrap is not None
        presented = _bearer(scope)
        if presented is None:
            return None
        if secrets.compare_digest(presented, self.bootstrap):
            return BOOTSTRAP
        digest = hash_secret(presented)
        sessions = scope["app"].state.sessions
        with sessions() as session, session.begin():
            token = session.scalars(
                select(ApiToken).where(ApiToken.token_hash == digest, ApiToken.revoked_at.is_(None))
            ).first()
        # The lookup is by an index on the hash, so its timing says nothing about the
        # secret; the compare below is constant-time all the same.
        if token is None or not secrets.compare_digest(token.token_hash, digest):
            return None
        return Principal(actor=f"token:{token.name}", role=token.role, tenant=token.tenant, token_id=token.id)


def _route_refusal(principal: Principal, method: str, path: str) -> str | None:
    """The checks that need only the method and path; None when the request may go on."""
    if under(path, TOKENS_PREFIX) and principal.role != ADMIN:
        return refusal(principal, "manage API tokens (admin only)")
    if method in READ_METHODS:
        return None
    if principal.role not in (ADMIN, OPERATOR):
        return refusal(principal, "change anything (read-only role)")
    if principal.tenant is not None and under(path, TENANTS_PREFIX):
        # A tenant's classifiers decide which IO is whose; letting a tenant edit them would
        # let it claim another tenant's IO.
        return refusal(principal, "create, change or delete tenants")
    return None


def _bearer(scope: Scope) -> bytes | None:
    headers: list[tuple[bytes, bytes]] = scope.get("headers", [])  # ASGI: (name, value), lower-case names
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = value.partition(b" ")
            if scheme.lower() != b"bearer" or not credentials.strip():
                return None
            return credentials.strip()
    return None
