"""Tail-latency forwarding in force (sRoute §6.5.1): for each `tail_latency` stage with
`servers` whose owner's writes are forwarded, the server its log lives on and whether it is
being reclaimed. `tail_latency/` decides it; `resolve.py` ships it as a remote `log` stage in
front of the owner's endpoint.

It is read from the database (`TailLatencyState`, written by `tail_latency/` in the
transaction of the rollout that ships it), so every replica's rollouts, a restarted
controller's and a new leader's ship the same forwarding: a route shipped without its log
would make the agent write back everything the log holds at once, unpaced.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.models import TailLatencyState

# Where forwarding logs live under the serving agent's root.
LOG_ROOT = "/lachesis-forward"


@dataclass(frozen=True)
class Forwarding:
    """`to`: tcp://HOST:PORT/dir of the server the log lives on; `reclaim_bytes_per_s`: set
    while the log is copied back to the owner's endpoint."""

    to: str
    reclaim_bytes_per_s: int | None = None


def current(session: Session) -> dict[str, Forwarding]:
    """Stage name -> its forwarding in force."""
    rows = session.scalars(select(TailLatencyState).where(TailLatencyState.forwarded_to.is_not(None)))
    return {r.stage: Forwarding(r.forwarded_to, r.reclaim_bytes_per_s) for r in rows if r.forwarded_to}


def log_name(stage: str) -> str:
    """The shipped log stage of a tail_latency stage (a stage name of at most 128 characters)."""
    return ("fwd/" + stage)[:128].rstrip("/-")


def server_addr(target: str) -> str:
    """HOST:PORT of a tcp://HOST:PORT/dir target."""
    return target.removeprefix("tcp://").split("/", 1)[0]
