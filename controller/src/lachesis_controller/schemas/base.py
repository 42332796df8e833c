"""The base of every request body."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class RequestModel(BaseModel):
    # Strict: "priority": "10" is a mistake to report, not to guess at.
    model_config = ConfigDict(extra="forbid", strict=True)


def at_field(field: str, check: Any, *args: Any, **kwargs: Any) -> None:
    # One error per field, named: pydantic would only name the list or model that holds it.
    try:
        check(*args, **kwargs)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from None
