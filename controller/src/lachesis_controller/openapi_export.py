"""Write the app's OpenAPI document to api-schemas/openapi.json.

    python -m lachesis_controller.openapi_export           # write
    python -m lachesis_controller.openapi_export --check   # exit 1 if the file differs
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .app import create_app
from .config import Settings

# src/lachesis_controller/openapi_export.py -> repository root
DEFAULT_PATH = Path(__file__).resolve().parents[3] / "api-schemas" / "openapi.json"


def render() -> str:
    # Fixed settings: the document must not depend on the environment it is generated in.
    settings = Settings(
        database_url="sqlite://", redis_url="redis://127.0.0.1:6380/0", bind_host="127.0.0.1",
        bind_port=8080, api_token=None, insecure_no_auth=True, rollout_timeout_s=30.0, reconcile_interval_s=1.0,
    )
    return json.dumps(create_app(settings).openapi(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date; run python -m lachesis_controller.openapi_export", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
