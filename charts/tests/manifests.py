"""Rendered manifests checked offline against the Kubernetes API's schemas.

Built-in kinds go through kubernetes-validate (PyPI; it ships the OpenAPI-derived JSON
schemas of every Kubernetes release, so no cluster and no network are needed), strict:
a field Kubernetes does not know fails. Custom resources the chart renders are checked
against the schemas in schemas/. A kind with no schema anywhere is an error, so nothing
rendered goes unchecked.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate

SCHEMAS = Path(__file__).parent / "schemas"


class InvalidManifest(Exception):
    """A rendered object that the Kubernetes API would refuse; the message names it and the field."""


def custom_resource_schema(doc: dict) -> dict | None:
    group_version = doc["apiVersion"].replace("/", "-")
    path = SCHEMAS / f"{doc['kind'].lower()}-{group_version}.json"
    return json.loads(path.read_text()) if path.exists() else None


def validate_manifest(doc: dict, kube_version: str) -> None:
    name = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
    custom = custom_resource_schema(doc)
    try:
        if custom is not None:
            jsonschema.Draft202012Validator(custom).validate(doc)
        else:
            kubernetes_validate.validate(doc, kube_version, strict=True)
    except jsonschema.ValidationError as exc:
        field = ".".join(str(part) for part in exc.absolute_path) or "(top level)"
        raise InvalidManifest(f"{name}: {field}: {exc.message}") from None
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise InvalidManifest(f"{name}: no schema to check it against: {exc.message}") from None
