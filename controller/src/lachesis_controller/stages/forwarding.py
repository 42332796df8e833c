"""Tail-latency forwarding in force (sRoute §6.5.1): for each `tail_latency` stage with
`servers` whose owner's writes are forwarded, the server its log lives on and whether it is
being reclaimed. `tail_latency/` decides it; `resolve.py` ships it as a remote `log` stage in
front of the owner's endpoint.

Soft state of the controller process, like telemetry. Losing it (a restart, a failover to
another replica) ships the owner's route without the log: the agent's switch retires the
log by writing back everything it holds to the endpoint at once and only then drops it, so
nothing is lost, only the pacing of the reclaim.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# Where forwarding logs live under the serving agent's root.
LOG_ROOT = "/lachesis-forward"


@dataclass(frozen=True)
class Forwarding:
    """`to`: tcp://HOST:PORT/dir of the server the log lives on; `reclaim_bytes_per_s`: set
    while the log is copied back to the owner's endpoint."""

    to: str
    reclaim_bytes_per_s: int | None = None


_lock = threading.Lock()
_state: dict[str, Forwarding] = {}


def current() -> dict[str, Forwarding]:
    """Stage name -> its forwarding, a copy."""
    with _lock:
        return dict(_state)


def put(stage: str, forwarding: Forwarding | None) -> None:
    with _lock:
        if forwarding is None:
            _state.pop(stage, None)
        else:
            _state[stage] = forwarding


def log_name(stage: str) -> str:
    """The shipped log stage of a tail_latency stage (a stage name of at most 128 characters)."""
    return ("fwd/" + stage)[:128].rstrip("/-")


def server_addr(target: str) -> str:
    """HOST:PORT of a tcp://HOST:PORT/dir target."""
    return target.removeprefix("tcp://").split("/", 1)[0]
