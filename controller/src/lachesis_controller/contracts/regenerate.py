"""The command line every generator in contracts/ shares: write the module, or with `--check`
say whether the committed one is what the contract generates today."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(argv: list[str] | None, *, doc: str | None, output: Path, render: Callable[[], str], command: str) -> int:
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed module differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if output.read_text() != text:
            print(f"{output} is out of date: run {command}", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    print(f"wrote {output}")
    return 0
