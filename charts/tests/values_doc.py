"""The chart README's values table, made from values.yaml's comments (the one place each
field is described). `python charts/tests/values_doc.py` rewrites the table;
test_chart.py fails while the README's table differs from what this makes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[1] / "lachesis"
START, END = "<!-- values table: made by charts/tests/values_doc.py -->", "<!-- end of values table -->"
KEY = re.compile(r"^(\s*)(- )?([A-Za-z_][\w.-]*):")


def rows(text: str) -> list[tuple[str, str, str]]:
    """(dotted path, default as JSON, description) for every commented key."""
    values = yaml.safe_load(text)
    out, parents, comment = [], [], []  # parents: (indent, path segment)
    item = False  # a "- # comment" line opened a list item
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or stripped.startswith("- #"):
            item = item or stripped.startswith("- #")
            body = stripped.lstrip("- ").lstrip("#").strip()
            comment = [body.removeprefix("-- ")] if body.startswith("-- ") else comment + [body]
            continue
        match = KEY.match(line)
        if not match:
            comment = []
            continue
        indent = len(match.group(1)) + len(match.group(2) or "")
        while parents and parents[-1][0] >= indent:
            parents.pop()
        segment = match.group(3)
        if match.group(2) or item:  # the first key of a list item: the list's [0]
            parents[-1] = (parents[-1][0], parents[-1][1].split("[")[0] + "[0]")
        item = False
        parents.append((indent, segment))
        if comment:
            path = [p for _, p in parents]
            out.append((".".join(path), json.dumps(lookup(values, path)), " ".join(comment)))
        comment = []
    return out


def lookup(values: object, path: list[str]) -> object:
    for segment in path:
        name, _, index = segment.partition("[")
        values = values[name]  # type: ignore[index]
        if index:
            values = values[int(index.rstrip("]"))]  # type: ignore[index]
    return values


def table(text: str) -> str:
    lines = ["| value | default | what it is |", "|---|---|---|"]
    for path, default, description in rows(text):
        shown = default if len(default) <= 40 else "(see values.yaml)"
        escaped = description.replace("|", "\\|")
        lines.append(f"| `{path}` | `{shown}` | {escaped} |")
    return "\n".join(lines)


def readme_with_table(readme: str, values_text: str) -> str:
    head, _, rest = readme.partition(START)
    _, _, tail = rest.partition(END)
    return f"{head}{START}\n{table(values_text)}\n{END}{tail}"


if __name__ == "__main__":
    readme = CHART / "README.md"
    readme.write_text(readme_with_table(readme.read_text(), (CHART / "values.yaml").read_text()))
    sys.exit(0)
