"""Liveness and readiness."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    status: Literal["ok"]
    checks: dict[str, str]
    # Whether this replica holds the leader lease (runs the singletons); a follower is ready
    # all the same: it serves the API.
    leader: bool
