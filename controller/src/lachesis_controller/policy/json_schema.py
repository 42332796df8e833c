"""Write the policy JSON Schema (policies/schema/policy.schema.json) from policy/document.py.

python -m lachesis_controller.policy.json_schema           # write
python -m lachesis_controller.policy.json_schema --check   # exit 1 if the file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lachesis_controller.policy.document import PolicyDocument

DEFAULT_PATH = Path(__file__).resolve().parents[4] / "policies" / "schema" / "policy.schema.json"


def render() -> str:
    schema = PolicyDocument.model_json_schema()
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://lachesis.dev/schemas/policy.schema.json",
        "title": "Lachesis policy (lachesis.dev/v1)",
        **{k: v for k, v in schema.items() if k != "title"},
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH)
    args = parser.parse_args()
    text = render()
    if args.check:
        sys.exit(0 if args.path.exists() and args.path.read_text() == text else 1)
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text)
    print(f"wrote {args.path}")


if __name__ == "__main__":
    main()
