"""Plain-text tables and JSON for the terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def as_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def alive(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def describe_match(match: dict[str, Any]) -> str:
    parts = [f"{k}={_cell(v)}" for k, v in match.items() if v is not None]
    return " ".join(parts) or "*"


def describe_detours(detours: list[dict[str, Any]]) -> str:
    return ", ".join(f"{d['what']}->{d['to']['kind']}:{d['to']['target']}" for d in detours)
