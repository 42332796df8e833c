"""Policy document -> the tenants, rules and stage intents it stands for.

Tenants and rules become the same rows the REST API writes, so the rollout machinery ships
them unchanged. Stages are kept as desired state (per host, in the policy version) until
the agents run them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lachesis_controller.auth.endpoint_roots import file_targets
from lachesis_controller.policy.document import PolicyDocument


@dataclass(frozen=True)
class Compiled:
    tenants: list[dict[str, Any]]
    stages: list[dict[str, Any]]
    rules: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {"tenants": self.tenants, "stages": self.stages, "rules": self.rules}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Compiled:
        return cls(data.get("tenants", []), data.get("stages", []), data.get("rules", []))

    def host_paths(self) -> list[tuple[str, str]]:
        """(field, path) of every host path the document names: file detour targets, log
        directories, replica sets, tail-latency candidates (auth/endpoint_roots.py confines them)."""
        paths = [p for i, r in enumerate(self.rules) for p in file_targets(r["detours"], f"spec.rules[{i}].detours")]
        for i, stage in enumerate(self.stages):
            if "dir" in stage:
                paths.append((f"spec.stages[{i}].dir", stage["dir"]))
            for key in ("write_set", "read_set", "candidates"):
                paths += [(f"spec.stages[{i}].{key}[{j}]", p) for j, p in enumerate(stage.get(key, []))]
        return paths

    def tenants_concerned(self) -> list[str]:
        names = {t["name"] for t in self.tenants}
        names |= {r["match"]["tenant"] for r in self.rules if r["match"].get("tenant")}
        names |= {s["owner"] for s in self.stages if s.get("owner")}
        return sorted(names)


def compile_policy(document: PolicyDocument) -> Compiled:
    spec = document.spec
    tenants = [
        {"name": t.name, "classifiers": [c.dump() for c in t.classifiers], "description": t.description}
        for t in spec.tenants
    ]
    stages = [s.model_dump(mode="json") for s in spec.stages]
    rules = [
        {
            "name": r.name,
            "priority": r.priority,
            "hosts": list(r.hosts) if r.hosts is not None else None,
            "match": r.match.dump(),
            "detours": [d.dump() for d in r.detours],
        }
        for r in spec.rules
    ]
    return Compiled(tenants, stages, rules)


def duplicates(compiled: Compiled) -> list[tuple[str, str]]:
    """(field, message) for names given twice within one document."""
    errors = []
    for section in ("tenants", "stages", "rules"):
        seen: set[str] = set()
        for index, item in enumerate(getattr(compiled, section)):
            if item["name"] in seen:
                errors.append((f"spec.{section}[{index}].name", f"{item['name']!r} is declared twice"))
            seen.add(item["name"])
    return errors
