"""RFC 9457 problem details: the one shape every error response of the API has."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://lachesis.dev/problems/"

log = logging.getLogger(__name__)


class FieldError(BaseModel):
    field: str
    message: str
    # Where the field is in a YAML or JSON policy document, 1-based; absent otherwise.
    line: int | None = None
    column: int | None = None


class Problem(BaseModel):
    """application/problem+json (RFC 9457). `errors` names each bad field of the request."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None


class ProblemError(Exception):
    def __init__(
        self,
        status: int,
        detail: str,
        *,
        kind: str,
        title: str | None = None,
        errors: Sequence[FieldError] | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind
        self.title = title or HTTPStatus(status).phrase
        self.errors = list(errors) if errors else None
        self.headers = headers
        self.extra = extra or {}


def not_found(what: str, name: str) -> ProblemError:
    return ProblemError(404, f"{what} {name!r} does not exist", kind="not-found")


def conflict(field: str, detail: str) -> ProblemError:
    return ProblemError(409, detail, kind="conflict", errors=[FieldError(field=field, message=detail)])


def invalid(errors: Iterable[tuple[str, str]]) -> ProblemError:
    """422 for input that is well-formed but names things that do not exist or clash."""
    field_errors = [FieldError(field=f, message=m) for f, m in errors]
    return ProblemError(
        422,
        _summary(field_errors),
        kind="validation-error",
        title="Invalid request",
        errors=field_errors,
    )


def problem_response(request: Request | None, status: int, detail: str, **fields: Any) -> JSONResponse:
    """The problem+json response of `ProblemError(status, detail, **fields)`."""
    return render(request, ProblemError(status, detail, **fields))


def render(request: Request | None, problem: ProblemError) -> JSONResponse:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + problem.kind,
        "title": problem.title,
        "status": problem.status,
        "detail": problem.detail,
    }
    if request is not None:
        body["instance"] = request.url.path
    if problem.errors:
        body["errors"] = [e.model_dump(exclude_none=True) for e in problem.errors]
    if problem.extra:
        body.update(problem.extra)
    return JSONResponse(body, status_code=problem.status, headers=problem.headers, media_type=PROBLEM_JSON)


def format_loc(loc: Sequence[str | int]) -> str:
    """("body", "hosts", 0, "x") -> "hosts[0].x": the body prefix is implied for a JSON API."""
    parts = list(loc)
    if parts and parts[0] == "body" and len(parts) > 1:
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "body"


def _summary(errors: Sequence[FieldError]) -> str:
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first.field}: {first.message}{more}"


def field_message(error: Mapping[str, Any]) -> str:
    """A pydantic error's message as a user should read it."""
    kind = error.get("type")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "field required"
    msg = str(error.get("msg", "invalid value"))
    # pydantic prefixes messages of custom validators; the prefix says nothing to a user.
    return msg.removeprefix("Value error, ")


def _position(text: Any, pos: int) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        return f"character {pos}"
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line} column {column} (character {pos})"


async def _validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    for error in errors:
        if error.get("type") == "json_invalid":
            loc = error.get("loc", ())
            pos = loc[1] if len(loc) > 1 and isinstance(loc[1], int) else 0
            reason = (error.get("ctx") or {}).get("error", "invalid JSON")
            where = _position(exc.body, pos)
            return problem_response(
                request,
                400,
                f"malformed JSON at {where}: {reason}",
                kind="malformed-json",
                title="Malformed JSON",
                errors=[FieldError(field="body", message=f"{reason} at {where}")],
            )
    content_type = request.headers.get("content-type", "")
    if isinstance(exc.body, bytes | bytearray) and "json" not in content_type:
        return problem_response(
            request,
            415,
            f"request body must be JSON (Content-Type: application/json), got {content_type or 'no Content-Type'}",
            kind="unsupported-media-type",
        )
    field_errors = [FieldError(field=format_loc(e.get("loc", ())), message=field_message(e)) for e in errors]
    if not field_errors:
        field_errors = [FieldError(field="body", message="invalid request")]
    return problem_response(
        request,
        422,
        _summary(field_errors),
        kind="validation-error",
        title="Invalid request",
        errors=field_errors,
    )


async def _problem_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return render(request, exc)


async def _http_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
    detail = exc.detail if isinstance(exc.detail, str) else phrase
    if status == 404 and detail == "Not Found":
        detail = f"no such resource: {request.url.path}"
    elif status == 405:
        detail = f"method {request.method} is not allowed on {request.url.path}"
    return problem_response(
        request,
        status,
        detail,
        kind=phrase.lower().replace(" ", "-"),
        headers=dict(exc.headers) if exc.headers else None,
    )


async def _unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
    # The traceback goes to the log only: a client learns nothing about the internals.
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(
        request,
        500,
        "the controller failed to handle this request; see its log",
        kind="internal-error",
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(ProblemError, _problem_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
    app.add_exception_handler(Exception, _unexpected_handler)


# Added to the OpenAPI description of every route that can answer with a problem.
def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {
        status: {
            "description": HTTPStatus(status).phrase,
            "model": Problem,
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in statuses
    }


def not_enforced(errors: Sequence[FieldError], hosts: Sequence[str]) -> ProblemError:
    """422 for input the agents of `hosts` could not enforce (a tenant classifier a data path
    of theirs cannot decide): refused before anything ships rather than shipped and ignored."""
    return ProblemError(
        422,
        _summary(errors),
        kind="not-enforced",
        title="Not enforceable by the agents",
        errors=errors,
        extra={"hosts": sorted(set(hosts))},
    )


def unsafe(findings: Sequence[Any], warnings: Sequence[Any]) -> ProblemError:
    """422 for a rule set the verifier refused; `violations` names the check and the rules."""
    field_errors = [FieldError(field="rules." + ",".join(f.rules), message=f"{f.check}: {f.message}") for f in findings]
    return ProblemError(
        422,
        "the rule set is unsafe: " + _summary(field_errors),
        kind="unsafe-rules",
        title="Rule set refused by the verifier",
        errors=field_errors,
        extra={
            "violations": [f.as_dict() for f in findings],
            "warnings": [w.as_dict() for w in warnings],
        },
    )
