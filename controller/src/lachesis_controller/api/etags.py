"""Entity tags for optimistic concurrency: a client sends back the ETag it read in
If-Match, and a write based on a stale read is refused with 412 instead of silently
overwriting someone else's change."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import Header
from pydantic import BaseModel

from lachesis_controller.validation.problems import ProblemError

IfMatch = Annotated[
    str | None,
    Header(
        alias="If-Match",
        description="ETag from a previous read; the write is refused with 412 if the resource changed since.",
    ),
]


def etag_of(value: BaseModel | dict[str, Any]) -> str:
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    return f'"{digest.hexdigest()[:32]}"'


def check(if_match: str | None, current: str | None, what: str) -> None:
    """`current` is None when the resource does not exist."""
    if if_match is None:
        return
    tags = [t.strip() for t in if_match.split(",")]
    if current is not None and ("*" in tags or current in tags or f"W/{current}" in tags):
        return
    state = "does not exist" if current is None else f"has changed (its ETag is now {current})"
    raise ProblemError(
        412,
        f"{what} {state}: read it again and retry",
        kind="precondition-failed",
        extra={"etag": current} if current else None,
    )
