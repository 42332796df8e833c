"""`lachesis-controller`: serve the API with uvicorn on LACHESIS_BIND until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType

from .config import ConfigError, Settings


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("LACHESIS_LOG_LEVEL", "INFO").upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"lachesis-controller: {exc}", file=sys.stderr)
        sys.exit(2)
    # Imported only now so that a configuration mistake is reported at once.
    import uvicorn

    from .app import create_app

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
        timeout_graceful_shutdown=5,
    )
    if _stopped_by:
        logging.getLogger(__name__).info("exiting after %s", signal.Signals(_stopped_by[0]).name)


_stopped_by: list[int] = []


def _note_signal(sig: int, _frame: FrameType | None) -> None:
    _stopped_by.append(sig)


if __name__ == "__main__":
    main()
