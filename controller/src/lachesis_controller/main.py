"""`lachesis-controller [--insecure-no-auth]`: serve the API with uvicorn on LACHESIS_BIND
until SIGTERM/SIGINT. Without LACHESIS_API_TOKEN it refuses to start (exit 2) unless told
--insecure-no-auth (or LACHESIS_INSECURE_NO_AUTH=1).

`lachesis-controller openapi [--check] [--output PATH]`: write the app's OpenAPI document to
api-schemas/openapi.json (with --check: exit 1 if the file differs)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from lachesis_controller.config import ConfigError, Settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="lachesis-controller", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve the API without LACHESIS_API_TOKEN: every caller is an anonymous admin",
    )
    commands = parser.add_subparsers(dest="command")
    openapi = commands.add_parser("openapi", help="write (or --check) api-schemas/openapi.json")
    openapi.add_argument("--output", type=Path, default=OPENAPI_PATH)
    openapi.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if args.command == "openapi":
        sys.exit(export_openapi(args.output, check=args.check))
    try:
        flags = {"LACHESIS_INSECURE_NO_AUTH": "1"} if args.insecure_no_auth else {}
        settings = Settings.from_env(None, **flags)
    except ConfigError as exc:
        print(f"lachesis-controller: {exc}", file=sys.stderr)
        sys.exit(2)
    logging.basicConfig(
        level=settings.log_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Imported only now so that a configuration mistake is reported at once.
    import uvicorn

    from lachesis_controller.app import create_app

    # uvicorn turns SIGTERM and SIGINT into a graceful shutdown (in-flight requests finish,
    # the lifespan stops the background tasks) and then re-raises the signal through the
    # handler that was installed before it. One that only records the signal makes that
    # re-raise harmless, so a requested stop exits 0 rather than dying by the signal.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _note_signal)
    uvicorn.run(
        create_app(settings),
        host=settings.bind_host,
        port=settings.bind_port,
        log_config=None,  # keep the logging set up above: one format, all on stderr
        access_log=settings.access_log,
        # Named rather than left to "auto": asyncio's loop and h11 were a measurable share of
        # a request's CPU under 200 clients (docs/benchmarks/controller.md, sixth round),
        # and a lock that lost either package should fail here, not quietly slow down.
        loop="uvloop",
        http="httptools",
        timeout_graceful_shutdown=5,
    )
    if _stopped_by:
        logging.getLogger(__name__).info("exiting after %s", signal.Signals(_stopped_by[0]).name)


# src/lachesis_controller/main.py -> repository root
OPENAPI_PATH = Path(__file__).resolve().parents[3] / "api-schemas" / "openapi.json"


def export_openapi(output: Path, *, check: bool) -> int:
    from lachesis_controller.app import openapi_document

    text = openapi_document()
    if check:
        current = output.read_text() if output.exists() else ""
        if current != text:
            print(f"{output} is out of date; run lachesis-controller openapi", file=sys.stderr)
            return 1
        return 0
    output.write_text(text)
    print(f"wrote {output}")
    return 0


_stopped_by: list[int] = []


def _note_signal(sig: int, _frame: FrameType | None) -> None:
    _stopped_by.append(sig)


if __name__ == "__main__":
    main()
