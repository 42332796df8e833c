"""Bearer-token check for /api/v1 when LACHESIS_API_TOKEN is set.

A middleware rather than a dependency so that it runs before FastAPI reads the body: an
unauthenticated caller gets 401, never a parse error about a body it should not send.
"""

from __future__ import annotations

import secrets

from fastapi.security import HTTPBearer
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..problems import problem_response

PROTECTED_PREFIX = "/api/v1"

# Declares the scheme in the OpenAPI document; the check itself is the middleware.
bearer_scheme = HTTPBearer(auto_error=False, description="LACHESIS_API_TOKEN, when the controller has one")


class BearerAuthMiddleware:
    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.expected is not None
            and scope["type"] == "http"
            and _protected(scope.get("path", ""))
            and not self._authorized(scope)
        ):
            response = problem_response(
                Request(scope), 401,
                "missing or wrong bearer token: send 'Authorization: Bearer <LACHESIS_API_TOKEN>'",
                kind="unauthorized", headers={"WWW-Authenticate": 'Bearer realm="lachesis"'},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        assert self.expected is not None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                return secrets.compare_digest(value, self.expected)
        return False


def _protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")
