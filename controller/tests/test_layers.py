"""The controller's package structure: layers import only downwards (REST at the top, the
contracts and validation at the bottom) and no modules import each other in a circle.
A failure names the import that breaks the rule."""

from __future__ import annotations

from pathlib import Path

import grimp

import lachesis_controller

# Top to bottom; packages in one set are siblings that must not import each other.
LAYERS: list[str | set[str]] = [
    "main",
    "app",
    "api",
    {"detours", "allocation", "sustainability", "declared_io", "tail_latency"},
    "rollout",
    "stages",
    "policy",
    "schemas",
    {"bus", "auth", "placement", "ha"},
    "observability",
    "models",
    "db",
    "config",
    "validation",
    "contracts",
]
# What may stand at the package's top level besides package folders.
TOP_LEVEL_MODULES = {"__init__", "app", "main", "config", "db", "models"}

GRAPH = grimp.build_graph("lachesis_controller")


def _named(layer: str | set[str]) -> set[str]:
    return {layer} if isinstance(layer, str) else layer


def test_every_package_has_a_layer() -> None:
    root = Path(lachesis_controller.__file__).parent
    packages = {p.parent.name for p in root.glob("*/__init__.py")} - {"migrations"}
    modules = {p.stem for p in root.glob("*.py")}
    assert modules <= TOP_LEVEL_MODULES, f"modules at the top level: {sorted(modules - TOP_LEVEL_MODULES)}"
    layered = set().union(*(_named(layer) for layer in LAYERS))
    assert packages | (modules - {"__init__"}) == layered


def test_layers_import_only_downwards() -> None:
    illegal = GRAPH.find_illegal_dependencies_for_layers(
        layers=[grimp.Layer(*sorted(_named(layer)), independent=True) for layer in LAYERS],
        containers={"lachesis_controller"},
    )
    found = sorted(
        f"{d.importer} -> {d.imported} via {[(r.heads, r.middle, r.tails) for r in d.routes][:2]}" for d in illegal
    )
    assert found == []


def test_no_import_cycles() -> None:
    modules = sorted(GRAPH.modules)
    edges = {m: sorted(GRAPH.find_modules_directly_imported_by(m)) for m in modules}
    # Tarjan's strongly connected components: a component of more than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    assert cycles == []
