"""Reading `apply -f` files: YAML (one or more documents) or JSON, each document
`{kind: Tenant|Rule, spec: {...}}` or a policy (`apiVersion: lachesis.dev/v1`, `kind:
Policy`, `metadata`, `spec`); a list of such documents works too.

Every document is checked against the API's own request models before anything is sent,
so a mistake anywhere in the file changes nothing on the controller. Errors name the file
and line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from lachesis_controller.policy.document import PolicyDocument
from lachesis_controller.schemas.rules import RuleSpec
from lachesis_controller.schemas.tenants import TenantSpec
from lachesis_controller.validation.problems import format_loc

from .errors import CliError

KINDS: dict[str, tuple[str, type[BaseModel]]] = {
    "Tenant": ("tenants", TenantSpec),
    "Rule": ("rules", RuleSpec),
}


POLICY = "Policy"


@dataclass(frozen=True)
class Document:
    kind: str
    spec: dict[str, Any]
    where: str  # "file:line", for messages
    # Policies only: the document as YAML text, padded so that its line numbers are the
    # file's and the controller's line/column errors point into the file.
    text: str | None = None

    @property
    def name(self) -> str:
        if self.kind == POLICY:
            return str(self.spec["metadata"]["name"])
        return str(self.spec["name"])

    @property
    def collection(self) -> str:
        return "policies" if self.kind == POLICY else KINDS[self.kind][0]

    @property
    def label(self) -> str:
        return f"{self.kind.lower()}/{self.name}"


def load(path: Path) -> list[Document]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read: {exc}") from None

    if path.suffix.lower() == ".json":
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        values = [loaded]
    else:
        try:
            values = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            raise CliError(_yaml_error(path, exc)) from None
    nodes = _nodes(text)

    documents: list[Document] = []
    entries: list[tuple[Any, Any]] = []
    for index, value in enumerate(values):
        node = nodes[index] if index < len(nodes) else None
        if isinstance(value, list):
            items = node.value if isinstance(node, yaml.SequenceNode) else [None] * len(value)
            entries += list(zip(value, items, strict=False))
        elif value is not None:
            entries.append((value, node))
    if not entries:
        raise CliError(f"{path}: no documents (expected kind: Tenant|Rule and spec: {{...}})")
    problems: list[str] = []
    for value, node in entries:
        try:
            documents.append(_document(path, value, node, text))
        except CliError as exc:
            problems.append(exc.message)
    if problems:
        raise CliError("\n".join(problems))
    seen: dict[tuple[str, str], str] = {}
    for doc in documents:
        key = (doc.kind, doc.name)
        if key in seen:
            raise CliError(f"{doc.where}: {doc.label} is also defined at {seen[key]}")
        seen[key] = doc.where
    return documents


def _document(path: Path, value: Any, node: yaml.Node | None, text: str) -> Document:
    where = f"{path}:{_line(node)}" if node is not None else str(path)
    if not isinstance(value, dict):
        raise CliError(f"{where}: a document must be a mapping with kind and spec")
    if "apiVersion" in value:
        return _policy(path, value, node, text, where)
    unknown = sorted(set(map(str, value)) - {"kind", "spec"})
    if unknown:
        raise CliError(f"{where}: unknown key(s) {', '.join(unknown)} (a document has kind and spec)")
    kind = value.get("kind")
    if kind not in KINDS:
        raise CliError(f"{where}: kind must be one of {', '.join(KINDS)}, not {kind!r} (a Policy also has apiVersion)")
    spec = value.get("spec")
    if not isinstance(spec, dict):
        raise CliError(f"{where}: {kind} needs a spec mapping")
    try:
        KINDS[kind][1].model_validate(spec)
    except ValidationError as exc:
        spec_node = _child(node, "spec")
        lines = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            at = _line(_find(spec_node, loc)) if spec_node is not None else None
            prefix = f"{path}:{at}" if at else where
            message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
            lines.append(f"{prefix}: {kind} spec.{format_loc(('body', *loc))}: {message.removeprefix('Value error, ')}")
        raise CliError("\n".join(lines)) from None
    return Document(kind=kind, spec=spec, where=where)


def _policy(path: Path, value: dict[str, Any], node: yaml.Node | None, text: str, where: str) -> Document:
    try:
        PolicyDocument.model_validate(value)
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            loc = tuple(
                p for p in error["loc"] if p not in {"cache", "qos", "replica_set", "tail_latency", "fdp_placement"}
            )
            at = _line(_find(node, loc)) if node is not None else None
            message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
            lines.append(
                f"{path}:{at or '?'}: Policy {format_loc(('body', *loc))}: {message.removeprefix('Value error, ')}"
            )
        raise CliError("\n".join(lines)) from None
    if node is not None and path.suffix.lower() != ".json":
        body = (
            "\n" * node.start_mark.line
            + " " * node.start_mark.column
            + text[node.start_mark.index : node.end_mark.index]
        )
    else:
        body = yaml.safe_dump(value, sort_keys=False)
    return Document(kind=POLICY, spec=value, where=where, text=body)


def _yaml_error(path: Path, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = f"{problem} ({context})" if context else problem
    if mark is not None:
        return f"{path}:{mark.line + 1}:{mark.column + 1}: invalid YAML: {detail}"
    return f"{path}: invalid YAML: {detail}"


def _nodes(text: str) -> list[yaml.Node]:
    """Positions only; the values come from safe_load (JSON that YAML cannot compose just
    loses line numbers)."""
    try:
        return [n for n in yaml.compose_all(text, Loader=yaml.SafeLoader) if n is not None]
    except yaml.YAMLError:
        return []


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _child(node: yaml.Node | None, key: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        pairs: list[tuple[yaml.Node, yaml.Node]] = node.value
        for key_node, value_node in pairs:
            if key_node.value == key:
                return value_node
        return None
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        items: list[yaml.Node] = node.value
        return items[key]
    return None


def _find(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """Deepest node along loc: a missing field points at the mapping that lacks it."""
    for part in loc:
        child = _child(node, part)
        if child is None:
            return node
        node = child
    return node
