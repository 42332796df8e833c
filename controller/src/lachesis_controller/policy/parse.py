"""Reading a policy from YAML or JSON text, keeping where every value was written so that
an error can name its line and column."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from lachesis_controller.policy.document import PolicyDocument, Stage
from lachesis_controller.validation.body_limits import MAX_BODY_DEPTH
from lachesis_controller.validation.problems import FieldError, ProblemError, field_message, format_loc


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


# A policy of thousands of rules is some tens of thousands of nodes. Aliases may share a
# list or two, but every alias repeats what it names wherever it is used, so the budget is
# on the expanded document: a few hundred bytes of nested aliases (billion laughs) would
# otherwise expand to gigabytes in the constructor and in everything that walks the result.
MAX_ALIASES = 100
MAX_EXPANDED_NODES = 100_000
MAX_DEPTH = MAX_BODY_DEPTH


class _TooBig(Exception):
    def __init__(self, message: str, mark: yaml.Mark) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses, while composing, documents too deep or expanding too far:
    the composer is where aliases are resolved, and it recurses (a deep document would
    overflow the stack)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._expanded = 0
        # Per composed node: (nodes it expands to, levels it nests), aliases included.
        self._extent: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # types-PyYAML leaves Parser.peek_event unannotated (it returns the next yaml.Event).
        mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _TooBig(f"has more than {MAX_ALIASES} aliases", mark)
            node = super().compose_node(parent, index)
            if id(node) not in self._extent:
                raise _TooBig("has an alias inside the node it names", mark)
            size, height = self._extent[id(node)]
            self._count(size, self._depth + height, mark)
            return node
        self._count(1, self._depth + 1, mark)
        before = self._expanded
        self._depth += 1
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._extent[id(node)] = (1 + self._expanded - before, 1 + max(map(self._height, _children(node)), default=0))
        return node

    def _height(self, node: yaml.Node) -> int:
        return self._extent[id(node)][1]

    def _count(self, nodes: int, depth: int, mark: yaml.Mark) -> None:
        self._expanded += nodes
        if depth > MAX_DEPTH:
            raise _TooBig(f"nests deeper than {MAX_DEPTH} levels", mark)
        if self._expanded > MAX_EXPANDED_NODES:
            raise _TooBig(f"expands beyond {MAX_EXPANDED_NODES} nodes through its aliases", mark)


def _children(node: yaml.Node | None) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def parse(text: str) -> Located:
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        value = loader.construct_document(node) if node is not None else None
    except _TooBig as exc:
        line, column = exc.mark.line + 1, exc.mark.column + 1
        raise ProblemError(
            422,
            f"line {line}, column {column}: the document {exc.message}",
            kind="document-out-of-bounds",
            title="Policy document out of bounds",
            errors=[FieldError(field="body", message=f"the document {exc.message}", line=line, column=column)],
            extra={"max_aliases": MAX_ALIASES, "max_expanded_nodes": MAX_EXPANDED_NODES, "max_depth": MAX_DEPTH},
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark else "unknown position"
        reason = exc.problem or "invalid YAML"
        raise ProblemError(
            400,
            f"malformed YAML at {where}: {reason}",
            kind="malformed-yaml",
            title="Malformed YAML",
            errors=[FieldError(field="body", message=f"{reason} at {where}")],
        ) from None
    except yaml.YAMLError as exc:
        raise ProblemError(400, f"malformed YAML: {exc}", kind="malformed-yaml", title="Malformed YAML") from None
    finally:
        loader.dispose()
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
            422,
            "a policy is a mapping with apiVersion, kind, metadata and spec",
            kind="validation-error",
            title="Invalid policy",
            errors=[FieldError(field="body", message="expected a mapping")],
        )
    try:
        return PolicyDocument.model_validate(located.value)
    except ValidationError as exc:
        raise policy_error(located, exc) from None


def policy_error(located: Located, exc: ValidationError) -> ProblemError:
    errors = []
    for error in exc.errors():
        loc = _model_path(error.get("loc", ()))
        message = field_message(error)
        where = located.where(loc)
        field = format_loc(loc)
        line, column = where if where else (None, None)
        errors.append(FieldError(field=field, message=message, line=line, column=column))
    first = errors[0]
    position = f"line {first.line}, column {first.column}: " if first.line else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return ProblemError(
        422,
        f"{position}{first.field}: {first.message}{more}",
        kind="validation-error",
        title="Invalid policy",
        errors=errors,
    )


# Every kind of policy.document.Stage: one left out would stay in its fields' paths.
STAGE_TAGS = frozenset(
    typing.get_args(cls.model_fields["kind"].annotation)[0] for cls in typing.get_args(typing.get_args(Stage)[0])
)


def _model_path(loc: Sequence[str | int]) -> tuple[str | int, ...]:
    # A discriminated union puts its tag in the path (spec.stages.0.cache.size_bytes): it
    # is not a field of the document, so drop it.
    out: list[str | int] = []
    for part in loc:
        if len(out) >= 2 and out[-2] == "stages" and isinstance(out[-1], int) and part in STAGE_TAGS:
            continue
        out.append(part)
    return tuple(out)
