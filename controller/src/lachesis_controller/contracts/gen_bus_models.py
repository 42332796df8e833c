"""Writes `contracts/bus_models.py`, the pydantic models of the bus messages, from their JSON
Schemas (api-schemas/bus/*.schema.json) with datamodel-code-generator (pinned in the
controller's dev group: another version may write other code, and the freshness test would
say so).

    python -m lachesis_controller.contracts.gen_bus_models [--check]

The library writes the classes, fields, constraints, enums, aliases and required-ness. Three
steps around it, each for something the library does not do the way the contract needs:

1. Before: the schemas are merged into one document in memory, and every object and shared
   enum is given the name the controller's code imports (`NAMES`: the schemas' $defs keys and
   inline objects would give `To`, `PlacementItem`, `Item`...). Descriptions are dropped
   (they are read in the schemas, one click away), except the few the REST API's document
   shows for the bus models it embeds (`API_DOCS`), kept so api-schemas/openapi.json does not
   change. The stage's `kind` becomes a discriminator, and the ratelimit stage's top-level
   `anyOf` ("one of these is set") is left to `bus_base.RateLimitStageRules` instead of four
   near-identical classes. The desired state's properties are put in the order the
   controller has always sent them (`WIRE_ORDER`).
2. The library, with `bus_base.BusModel` as the base class, `bus_base.Timestamp` for
   date-times, and the checks no schema keyword gives pydantic: `bus_base`'s field checks on
   the fields they check (`FIELD_CHECKS`, and `unique_items` wherever a schema says
   `uniqueItems`), and `RateLimitStageRules` as its class's base (`RULES`).
3. After, on the syntax tree: type aliases written as plain aliases (a TypeAliasType would
   become a named $defs entry in openapi.json), `Absent[T]` for an optional field the schema
   allows no null in (the library writes `T | None`, which would accept a null the agent
   refuses), and JSON numbers as `int | float` (a `float` would dump 0 as 0.0 and break the
   round trip); then `ruff format`.
"""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from lachesis_controller.contracts import regenerate

ROOT = Path(__file__).resolve().parents[4]
BUS = ROOT / "api-schemas" / "bus"
OUTPUT = Path(__file__).resolve().parent / "bus_models.py"
COMMAND = "python -m lachesis_controller.contracts.gen_bus_models"
# The messages bus/messages.py serves; declared-io and detour-* have their own modules.
MESSAGES = ("ack", "desired-state", "heartbeat", "registration", "telemetry")

# (schema file, JSON pointer in it) -> the class or alias name in bus_models.py. Every $defs
# entry of a message schema must be named here; common.schema.json's default to PascalCase.
NAMES: dict[tuple[str, str], str] = {
    ("common", "/$defs/classifier/properties/kind"): "ClassifierKind",
    ("common", "/$defs/match/properties/range/anyOf/0"): "ByteRange",
    ("common", "/$defs/detour/properties/to"): "DetourTarget",
    ("common", "/$defs/stage"): "StageConfig",
    ("common", "/$defs/cache_stage"): "CacheStageConfig",
    ("common", "/$defs/cache_stage/properties/engine"): "CacheEngine",
    ("common", "/$defs/cache_stage/properties/placement/items"): "PartHandle",
    ("common", "/$defs/cache_stage/properties/placement/items/properties/part"): "EnginePart",
    ("common", "/$defs/cache_stage/properties/serves/anyOf/0/items"): "ServeDir",
    ("common", "/$defs/ratelimit_stage"): "RateLimitStageConfig",
    ("common", "/$defs/log_stage"): "LogStageConfig",
    ("ack", ""): "Ack",
    ("ack", "/properties/phase"): "Phase",
    ("desired-state", ""): "DesiredState",
    ("desired-state", "/properties/phase"): "Phase",
    ("desired-state", "/properties/caches/items"): "CacheSize",
    ("heartbeat", ""): "Heartbeat",
    ("registration", ""): "Registration",
    ("registration", "/properties/capabilities"): "Capabilities",
    ("registration", "/properties/capabilities/properties/devices/items"): "Device",
    ("registration", "/properties/capabilities/properties/kernel"): "Kernel",
    ("registration", "/properties/capabilities/properties/data_paths"): "DataPaths",
    ("registration", "/$defs/data_path"): "DataPath",
    ("telemetry", ""): "Telemetry",
    ("telemetry", "/$defs/counter"): "Counter",
    ("telemetry", "/$defs/latency"): "LatencyUs",
    ("telemetry", "/$defs/endpoint"): "TelemetryEndpoint",
    ("telemetry", "/$defs/declared_job"): "TelemetryDeclaredJob",
    ("telemetry", "/$defs/declared_job/properties/files/items"): "TelemetryDeclaredFile",
    ("telemetry", "/$defs/tenant"): "TelemetryTenant",
    ("telemetry", "/$defs/tenant/properties/latency_us_p99"): "LatencyP99",
    ("telemetry", "/$defs/cache"): "TelemetryCache",
    ("telemetry", "/$defs/curve"): "TelemetryCurve",
    ("telemetry", "/$defs/device"): "TelemetryDevice",
    ("telemetry", "/$defs/device/properties/handles/items"): "TelemetryHandle",
    ("telemetry", "/$defs/stage"): "TelemetryStage",
    ("telemetry", "/$defs/stage/properties/parts/items"): "TelemetryPart",
    ("telemetry", "/$defs/stage/properties/qos"): "TelemetryQos",
}

# Descriptions api-schemas/openapi.json shows for the bus models the REST API embeds (rules'
# matches, hosts' capabilities): name or (name, field) -> text.
API_DOCS: dict[str | tuple[str, str], str] = {
    "Name": "Lower-case DNS-label-like name of a tenant or rule.",
    "HostId": "Stable host identifier.",
    "StageName": "What rules name as a stage target.",
    "Match": "IO header fields a rule matches; an absent or null field matches anything.",
    "ByteRange": "Byte range [start, end) of an IO; a rule matches IO overlapping it.",
    "DataPath": "One data path the agent runs, the tenant classifier kinds it decides and the\n"
    "operations its IO carries (rules' `match.ops` it can match).",
    "DataPaths": "The data paths the agent runs; one not listed is not run.",
    ("DataPaths", "fuse"): "The FUSE switch (--mount): file IO, classified at open.",
    ("DataPaths", "kv"): "The key-value front end (--kv-listen): requests, classified by key or port.",
}

BASE = "lachesis_controller.contracts.bus_base"
# Classes with a model-level check -> their hand-written base.
RULES: dict[str, str | list[str]] = {"RateLimitStageConfig": f"{BASE}.RateLimitStageRules"}
# (class, field) -> the bus_base function that checks it; every uniqueItems field gets unique_items.
FIELD_CHECKS = {("ByteRange", "end"): "end_after_start", ("TelemetryCurve", "miss_ratios"): "one_miss_ratio_per_size"}

# The key order of the messages the controller writes, where it is not the schema's: their text
# is stored and spliced by key (rollout/render.py's templates, migration 0008), so it stays
# the order agents have been sent. A property missing here (or one too many) is refused.
WIRE_ORDER = {
    "DesiredState": (
        "schema",
        "host_id",
        "generation",
        "rollout_id",
        "issued_at",
        "traceparent",
        "phase",
        "quiesce",
        "restores",
        "caches",
        "tenants",
        "rules",
        "stages",
    ),
}


def _pascal(key: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in key.split("_"))


def _pointer(node: Any, pointer: str) -> tuple[Any, str | int]:
    """The parent of the node at `pointer` and its key there."""
    *path, last = pointer.split("/")[1:]
    for key in path:
        node = node[int(key) if isinstance(node, list) else key]
    return node, int(last) if isinstance(node, list) else last


def _walk(node: Any, visit: Any) -> Any:
    """A copy of `node` with `visit(dict)` applied to every object, children first."""
    if isinstance(node, list):
        return [_walk(item, visit) for item in node]
    if isinstance(node, dict):
        return visit({key: _walk(value, visit) for key, value in node.items()})
    return node


def _undocumented(node: Any) -> Any:
    return _walk(node, lambda n: {k: v for k, v in n.items() if not (k == "description" and isinstance(v, str))})


def _rename_ref(node: dict[str, Any], local: dict[str, str], common: dict[str, str]) -> dict[str, Any]:
    """`node` with its $ref (to common.schema.json or to its own file's $defs) renamed."""
    target = node.get("$ref")
    if not isinstance(target, str):
        return node
    where, _, key = target.rpartition("/")
    names = common if where.startswith("common.schema.json") else local
    return {**node, "$ref": f"#/$defs/{names[key]}"}


def merge(schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One JSON Schema whose $defs are every class and alias of bus_models.py, by name."""
    defs: dict[str, Any] = {}
    for file, schema in schemas.items():
        schema = copy.deepcopy(schema)
        local = {key: NAMES.get((file, f"/$defs/{key}"), _pascal(key)) for key in schema.get("$defs", {})}
        if file != "common":
            unnamed = [key for key in schema.get("$defs", {}) if (file, f"/$defs/{key}") not in NAMES]
            if unnamed:
                raise ValueError(f"{file}.schema.json: name its $defs {unnamed} in NAMES")
        common = {key: NAMES.get(("common", f"/$defs/{key}"), _pascal(key)) for key in schemas["common"]["$defs"]}
        schema = _walk(schema, lambda node: _rename_ref(node, local, common))
        hoist = sorted(((p, n) for (f, p), n in NAMES.items() if f == file), key=lambda pn: -pn[0].count("/"))
        for pointer, name in hoist:
            if pointer == "":
                node = schema
            else:
                parent, key = _pointer(schema, pointer)
                node = parent[key]
                parent[key] = {"$ref": f"#/$defs/{name}"}
            if name in defs and _undocumented(defs[name]) != _undocumented(node):
                raise ValueError(f"{name} is two different schemas")
            defs[name] = node
        # What is left of the file's $defs (hoisted ones are now a $ref to their new place).
        for key, node in schema.pop("$defs", {}).items():
            if node.keys() != {"$ref"}:
                defs[local[key]] = node
    for node in defs.values():
        for key in ("$schema", "$id", "$defs"):
            node.pop(key, None)
    return {"$defs": defs}


def prepare(merged: dict[str, Any]) -> dict[str, Any]:
    """The merged schema as the generator should read it (see the module's step 1)."""

    def strip(node: dict[str, Any]) -> dict[str, Any]:
        # A string under "title" or "description" is a keyword; a property of that name is an object.
        node = {k: v for k, v in node.items() if not (k in ("title", "description") and isinstance(v, str))}
        if node.get("uniqueItems"):
            # Carried to the field's JSON Schema (x- keys are passed through without the x-).
            node = {**{k: v for k, v in node.items() if k != "uniqueItems"}, "x-uniqueItems": True}
        return node

    defs = {name: _walk(node, strip) for name, node in merged["$defs"].items()}
    for where, text in API_DOCS.items():
        if isinstance(where, str):
            defs[where]["description"] = text
        else:
            defs[where[0]]["properties"][where[1]]["description"] = text
    for name, order in WIRE_ORDER.items():
        properties = defs[name]["properties"]
        if sorted(order) != sorted(properties):
            raise ValueError(f"WIRE_ORDER[{name!r}] must list exactly the properties {sorted(properties)}")
        defs[name]["properties"] = {key: properties[key] for key in order}
    defs["RateLimitStageConfig"].pop("anyOf")
    defs["StageConfig"]["discriminator"] = {"propertyName": "kind"}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": defs}


def _admits_null(node: dict[str, Any], defs: dict[str, Any]) -> bool:
    if "$ref" in node:
        return _admits_null(defs[node["$ref"].rpartition("/")[2]], defs)
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_admits_null(alt, defs) for key in ("anyOf", "oneOf") for alt in node.get(key, []))


def absent_fields(schema: dict[str, Any]) -> set[tuple[str, str]]:
    """(class, field) of every optional field whose schema has no null."""
    defs = schema["$defs"]
    return {
        (name, field)
        for name, node in defs.items()
        for field, prop in node.get("properties", {}).items()
        if field not in node.get("required", []) and not _admits_null(prop, defs)
    }


def field_checks(schema: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """The library's `validators` option: FIELD_CHECKS, and unique_items for every uniqueItems field."""
    checks = dict(FIELD_CHECKS)
    for name, node in schema["$defs"].items():
        for field, prop in node.get("properties", {}).items():
            if prop.get("x-uniqueItems"):
                checks[(name, field)] = "unique_items"
    fields: dict[tuple[str, str], list[str]] = {}
    for (name, field), function in sorted(checks.items()):
        fields.setdefault((name, function), []).append(field)
    validators: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for (name, function), names in fields.items():
        validators.setdefault(name, {"validators": []})["validators"].append(
            {"fields": names, "function": f"{BASE}.{function}", "mode": "after"}
        )
    return validators


def generate_models(schema: dict[str, Any]) -> str:
    # A dev dependency: imported here, so the controller itself never needs it.
    from datamodel_code_generator import InputFileType, LiteralType, PythonVersion, generate
    from datamodel_code_generator.enums import DataModelType, ExtraFields
    from datamodel_code_generator.validators import ModelValidators

    code = generate(
        json.dumps(schema),
        input_file_type=InputFileType.JsonSchema,
        output_model_type=DataModelType.PydanticV2BaseModel,
        target_python_version=PythonVersion.PY_311,
        base_class=f"{BASE}.BusModel",
        base_class_map=RULES,
        validators={name: ModelValidators.model_validate(v) for name, v in field_checks(schema).items()},
        type_overrides={"Timestamp": f"{BASE}.Timestamp"},
        use_annotated=True,
        field_constraints=True,
        use_union_operator=True,
        use_standard_collections=True,
        use_type_alias=True,
        use_schema_description=True,
        use_exact_imports=True,
        enum_field_as_literal=LiteralType.All,
        extra_fields=ExtraFields.Forbid,
        field_extra_keys_without_x_prefix={"x-uniqueItems"},
        skip_root_model=True,
        disable_timestamp=True,
        formatters=[],
    )
    if not isinstance(code, str):
        raise TypeError(f"expected one module from datamodel-code-generator, got {type(code)}")
    return code


class _After(ast.NodeTransformer):
    """Step 3 of the module's docstring, on the library's output."""

    def __init__(self, absent: set[tuple[str, str]]) -> None:
        self.absent = absent
        self.cls = ""

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        self.cls = node.name
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AnnAssign:
        self.generic_visit(node)
        name = node.target.id.removesuffix("_") if isinstance(node.target, ast.Name) else ""
        if (self.cls, name) not in self.absent:
            return node
        # `T | None`, alone or first in `Annotated[T | None, Field(...)]`.
        annotated = node.annotation if _is_annotated(node.annotation) else None
        elts = None
        if isinstance(annotated, ast.Subscript) and isinstance(annotated.slice, ast.Tuple):
            elts = annotated.slice.elts
        optional = elts[0] if elts else node.annotation
        if not (
            isinstance(optional, ast.BinOp)
            and isinstance(optional.right, ast.Constant)
            and optional.right.value is None
        ):
            raise ValueError(f"{self.cls}.{name}: expected T | None, got {ast.unparse(optional)}")
        absent = ast.Subscript(value=ast.Name("Absent"), slice=optional.left)
        if elts:
            elts[0] = absent
        else:
            node.annotation = absent
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.Assign:
        self.generic_visit(node)
        call = node.value
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "TypeAliasType":
            node.value = call.args[1]
        return node

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id == "float":
            return ast.BinOp(left=ast.Name("int"), op=ast.BitOr(), right=ast.Name("float"))
        return node


def _is_annotated(node: ast.expr) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Annotated"


HEADER = f'''"""Generated from api-schemas/bus/*.schema.json by `{COMMAND}`:
do not edit. The hand-written part is bus_base.py; bus/messages.py is what the rest imports."""
'''


def render(schemas: dict[str, dict[str, Any]]) -> str:
    schema = prepare(merge(schemas))
    tree = ast.parse(generate_models(schema))
    tree.body = [
        stmt
        for stmt in tree.body
        if not (isinstance(stmt, ast.ImportFrom) and stmt.module == "typing_extensions")
        and not (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__")
    ]
    tree = _After(absent_fields(schema)).visit(tree)
    imports = f"from __future__ import annotations\n\nfrom {BASE} import Absent\n"
    source = HEADER + "\n" + imports + ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    return _format(source)


def _format(source: str) -> str:
    """Imports sorted and pruned, then `ruff format`: the repository's style, so the lint passes."""
    ruff = Path(sys.executable).parent / "ruff"
    config = ["--config", str(ROOT / "ruff.toml")]
    fixed = subprocess.run(
        [str(ruff), "check", *config, "--select", "I,F401", "--fix", "--quiet", "--stdin-filename", str(OUTPUT), "-"],
        input=source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return subprocess.run(
        [str(ruff), "format", *config, "--stdin-filename", str(OUTPUT), "-"],
        input=fixed,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def load() -> dict[str, dict[str, Any]]:
    files = ("common", *MESSAGES)
    return {file: json.loads((BUS / f"{file}.schema.json").read_text()) for file in files}


def main(argv: list[str] | None = None) -> int:
    return regenerate.main(argv, doc=__doc__, output=OUTPUT, render=lambda: render(load()), command=COMMAND)


if __name__ == "__main__":
    sys.exit(main())
