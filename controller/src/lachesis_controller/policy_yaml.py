"""Reading a policy from YAML or JSON text, keeping where every value was written so that
an error can name its line and column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from .policy_model import PolicyDocument
from .problems import FieldError, ProblemError, format_loc


class Located:
    """The parsed value plus a map from field path to (line, column), both 1-based."""

    def __init__(self, value: Any, marks: dict[tuple[str | int, ...], tuple[int, int]]) -> None:
        self.value = value
        self.marks = marks

    def where(self, loc: Sequence[str | int]) -> tuple[int, int] | None:
        # The deepest path that was written: a missing field is reported at its parent.
        path = tuple(loc)
        while path:
            if path in self.marks:
                return self.marks[path]
            path = path[:-1]
        return self.marks.get(())


def parse(text: str) -> Located:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        value = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else "unknown position"
        reason = exc.problem or "invalid YAML"
        raise ProblemError(
            400, f"malformed YAML at {where}: {reason}", kind="malformed-yaml", title="Malformed YAML",
            errors=[FieldError(field="body", message=f"{reason} at {where}")],
        ) from None
    except yaml.YAMLError as exc:
        raise ProblemError(400, f"malformed YAML: {exc}", kind="malformed-yaml", title="Malformed YAML") from None
    marks: dict[tuple[str | int, ...], tuple[int, int]] = {}
    if node is not None:
        _collect(node, (), marks)
    return Located(value, marks)


def _collect(node: yaml.Node, path: tuple[str | int, ...], marks: dict[tuple[str | int, ...], tuple[int, int]]) -> None:
    marks[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = path + (str(key.value),)
            _collect(value, child, marks)
            # Point at the key, where a reader looks for the field.
            marks[child] = (key.start_mark.line + 1, key.start_mark.column + 1)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _collect(item, path + (index,), marks)


def validate(located: Located) -> PolicyDocument:
    """The document, or 422 whose errors name each bad field with its line and column."""
    if not isinstance(located.value, dict):
        raise ProblemError(
            422, "a policy is a mapping with apiVersion, kind, metadata and spec", kind="validation-error",
            title="Invalid policy", errors=[FieldError(field="body", message="expected a mapping")],
        )
    try:
        return PolicyDocument.model_validate(located.value)
    except ValidationError as exc:
        raise policy_error(located, exc) from None


def policy_error(located: Located, exc: ValidationError) -> ProblemError:
    errors = []
    for error in exc.errors():
        loc = _model_path(error.get("loc", ()))
        message = _message(error)
        where = located.where(loc)
        field = format_loc(loc)
        line, column = where if where else (None, None)
        errors.append(FieldError(field=field, message=message, line=line, column=column))
    first = errors[0]
    position = f"line {first.line}, column {first.column}: " if first.line else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ProblemError(
        422, f"{position}{first.field}: {first.message}{more}", kind="validation-error",
        title="Invalid policy", errors=errors,
    )


STAGE_TAGS = frozenset({"cache", "qos", "replica_set", "tail_latency", "fdp_placement"})


def _model_path(loc: Sequence[str | int]) -> tuple[str | int, ...]:
    # A discriminated union puts its tag in the path (spec.stages.0.cache.size_bytes): it
    # is not a field of the document, so drop it.
    out: list[str | int] = []
    for part in loc:
        if len(out) >= 2 and out[-2] == "stages" and isinstance(out[-1], int) and part in STAGE_TAGS:
            continue
        out.append(part)
    return tuple(out)


def _message(error: dict[str, Any]) -> str:
    kind = error.get("type")
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "missing":
        return "field required"
    return str(error.get("msg", "invalid value")).removeprefix("Value error, ")
