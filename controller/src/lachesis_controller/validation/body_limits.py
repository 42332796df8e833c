"""Bounds on every request body, checked before any route parses it.

A body larger than the size limit is refused with 413 before it is read in full; a JSON
body that nests deeper than the depth limit is refused with 422 before a recursive parser
(json, pydantic) can run out of stack. YAML bodies are bounded by policy/parse.py, which
composes them itself.
"""

from __future__ import annotations

import re
from array import array
from itertools import accumulate

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lachesis_controller.validation.problems import FieldError, problem_response

# 1 MiB holds a policy of thousands of rules; nothing the API takes is legitimately larger.
MAX_BODY_BYTES = 1 << 20
# The deepest document the API defines (a policy's spec.rules[].detours[].to) nests 7 levels.
MAX_BODY_DEPTH = 32

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
# Opening brackets count +1, closing ones -1 (255 read as a signed byte), all else is dropped.
_STEPS = bytes(1 if b in b"[{" else 255 if b in b"]}" else 0 for b in range(256))
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES, max_depth: int = MAX_BODY_DEPTH) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(request, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(request, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        if body and _is_json(request.headers.get("content-type")):
            offset = too_deep(body, self.max_depth)
            if offset is not None:
                line, column = _line_column(body, offset)
                detail = f"the JSON body nests deeper than {self.max_depth} levels at line {line} column {column}"
                response = problem_response(
                    request,
                    422,
                    detail,
                    kind="too-deep",
                    title="Body nested too deeply",
                    errors=[FieldError(field="body", message=detail, line=line, column=column)],
                    extra={"max_depth": self.max_depth},
                )
                await response(scope, receive, send)
                return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _too_large(self, request: Request, receive: Receive, send: Send) -> None:
        response = problem_response(
            request,
            413,
            f"the request body is larger than the limit of {self.max_bytes} bytes",
            kind="content-too-large",
            extra={"max_bytes": self.max_bytes},
        )
        await response(request.scope, receive, send)


def too_deep(body: bytes, max_depth: int) -> int | None:
    """Offset of the bracket that nests the JSON text deeper than max_depth, or None."""
    # Fast path over the brackets outside strings; only a refused body is walked token by token.
    brackets = _JSON_STRING.sub(b"", body).translate(_STEPS, _NOT_BRACKETS)
    if max(accumulate(array("b", brackets)), default=0) <= max_depth:
        return None
    depth = 0
    for token in _JSON_TOKEN.finditer(body):
        char = token.group()[:1]
        if char in b"[{":
            depth += 1
            if depth > max_depth:
                return token.start()
        elif char in b"]}":
            depth -= 1
    return None


def _is_json(content_type: str | None) -> bool:
    # FastAPI parses a body without a Content-Type as JSON too.
    if not content_type:
        return True
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _line_column(body: bytes, offset: int) -> tuple[int, int]:
    line = body.count(b"\n", 0, offset) + 1
    return line, offset - (body.rfind(b"\n", 0, offset) + 1) + 1
