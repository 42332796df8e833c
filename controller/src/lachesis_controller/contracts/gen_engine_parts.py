"""Writes `contracts/engine_parts.py` from the stage contract (api-schemas/bus/common.schema.json):
each cache engine's write streams (`x-parts` on the `engine` enum) and how each stream writes
(`x-write-pattern` on the placement `part` enum). The contract says it once; the placement
broker and the stage resolver read the generated module, and the agents' Rust test
(agents/switch/tests/engine_parts.rs) checks its enums against the same file.

    python -m lachesis_controller.contracts.gen_engine_parts [--check]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lachesis_controller.contracts import regenerate

SCHEMA = Path(__file__).resolve().parents[4] / "api-schemas" / "bus" / "common.schema.json"
OUTPUT = Path(__file__).resolve().parent / "engine_parts.py"


def _find(node: Any, key: str) -> dict[str, Any]:
    """The first object under `node` that has `key`."""
    if isinstance(node, dict):
        if key in node:
            return node
        children = list(node.values())
    elif isinstance(node, list):
        children = node
    else:
        return {}
    for child in children:
        if found := _find(child, key):
            return found
    return {}


def _tuple(items: list[str]) -> str:
    """A tuple literal as `ruff format` writes it."""
    inner = ", ".join(json.dumps(i) for i in items)
    return f"({inner},)" if len(items) == 1 else f"({inner})"


def render(schema: dict[str, Any]) -> str:
    engine, part = _find(schema, "x-parts"), _find(schema, "x-write-pattern")
    parts, patterns = engine["x-parts"], part["x-write-pattern"]
    if sorted(parts) != sorted(engine["enum"]) or sorted(patterns) != sorted(part["enum"]):
        raise ValueError("x-parts must name every engine and x-write-pattern every part of the enums")
    unknown = sorted({p for ps in parts.values() for p in ps} - set(patterns))
    if unknown:
        raise ValueError(f"x-parts names parts the part enum does not have: {unknown}")
    lines = [
        '"""Generated from api-schemas/bus/common.schema.json by',
        '`python -m lachesis_controller.contracts.gen_engine_parts`: do not edit."""',
        "",
        "from typing import Literal",
        "",
        'Pattern = Literal["sequential", "random"]',
        "",
        "# Engine -> the write streams (engine parts) it has on flash.",
        "ENGINE_PARTS: dict[str, tuple[str, ...]] = {",
        *(f"    {json.dumps(e)}: {_tuple(ps)}," for e, ps in parts.items()),
        "}",
        "",
        "# Engine part -> how it writes: a log (sequential) or sets rewritten in place (random).",
        "PART_PATTERNS: dict[str, Pattern] = {",
        *(f"    {json.dumps(p)}: {json.dumps(w)}," for p, w in patterns.items()),
        "}",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    command = "python -m lachesis_controller.contracts.gen_engine_parts"
    return regenerate.main(
        argv, doc=__doc__, output=OUTPUT, render=lambda: render(json.loads(SCHEMA.read_text())), command=command
    )


if __name__ == "__main__":
    sys.exit(main())
