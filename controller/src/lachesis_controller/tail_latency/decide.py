"""The tail-latency decision, a pure function of the stage, the previous state and the
agents' latest endpoint reports (so it is tested without processes).

Per `tail_latency` stage with `servers` (servers[0] is the owner's endpoint E):

| state | on a new report of E (its request count grew) | goes to |
|---|---|---|
| normal | a full window (32 requests) with recent > α × mean in `enter_reports` reports in a row | forwarding: writes into a log on the other server with the lowest recent latency; the mean at the first of those reports is the baseline |
| forwarding | recent ≤ (1 + (α − 1)/2) × baseline in `RECOVER_REPORTS` reports in a row | reclaiming: the log copies back at `reclaim_bytes_per_s` |
| reclaiming | recent > α × baseline in `enter_reports` reports in a row | forwarding again (the reclaim stops) |
| reclaiming | the log reports it holds nothing | normal: the log is taken out of the route |

Entry needs the slow condition in `enter_reports` new reports in a row (the stage's field,
default 2): a 32-request window on a shared host exceeds α now and then for one report (a
burst of other IO, a descheduled server) and forwarding on it costs two rollouts and a
reclaim for nothing. A count of reports, not an absolute latency floor, because what is
slow differs by device by orders of magnitude while a spike's length in reports does not.
The hysteresis band between α and the recovery threshold keeps a latency that hovers near
α from flapping the route; decisions are counted in reports (the agent's probes keep E
measured once no writes go to it), never in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from lachesis_controller.stages.forwarding import Forwarding, server_addr

WINDOW = 32
RECOVER_REPORTS = 3
ENTER_REPORTS = 2  # the stage's enter_reports when it has none (policy/document.py's default)
NORMAL, FORWARDING, RECLAIMING = "normal", "forwarding", "reclaiming"


@dataclass(frozen=True)
class EndpointReport:
    requests: int
    recent_us: float
    mean_us: float
    slow: bool


@dataclass(frozen=True)
class LogReport:
    """The forwarding log as the agents report it (summed over hosts)."""

    forwarded_bytes: int
    held_bytes: int
    reclaimed_bytes: int


@dataclass
class StageState:
    stage: str
    tenant: str
    endpoint: str
    state: str = NORMAL
    forwarded_to: str | None = None
    baseline_us: float | None = None
    last_requests: int = 0
    calm: int = 0
    # Slow reports in a row while normal, and E's mean at the first of them (not persisted:
    # counted again from the reports after a start, like calm).
    hot: int = 0
    hot_mean_us: float | None = None
    forwards: int = 0
    reclaims: int = 0
    # The rollout that began the current forwarding (persist.py).
    since_rollout: str | None = None
    last: EndpointReport | None = None
    log: LogReport | None = None
    history: list[str] = field(default_factory=list)

    def forwarding(self, reclaim_bytes_per_s: int | None) -> Forwarding | None:
        if self.state == NORMAL or self.forwarded_to is None:
            return None
        return Forwarding(self.forwarded_to, reclaim_bytes_per_s if self.state == RECLAIMING else None)


def recover_threshold(alpha: float, baseline_us: float) -> float:
    return (1 + (alpha - 1) / 2) * baseline_us


def _least_loaded(servers: list[str], endpoints: Mapping[str, EndpointReport]) -> str:
    """The other server with the lowest recent latency; unreported ones after reported ones
    (in declared order)."""

    def key(i_s: tuple[int, str]) -> tuple[int, float, int]:
        e = endpoints.get(server_addr(i_s[1]))
        return (0, e.recent_us, i_s[0]) if e is not None and not e.slow else (1, 0.0, i_s[0])

    return min(enumerate(servers[1:]), key=key)[1]


def step(
    st: StageState, stage: Mapping[str, Any], endpoints: Mapping[str, EndpointReport], log: LogReport | None
) -> bool:
    """Advances `st` by the latest reports; True when the forwarding to ship changed."""
    st.log = log
    e = endpoints.get(server_addr(stage["servers"][0]))
    if (
        st.state == RECLAIMING
        and log is not None
        and log.held_bytes == 0
        and (e is None or e.requests > st.last_requests)
    ):
        st.state, st.forwarded_to, st.baseline_us, st.calm, st.since_rollout = NORMAL, None, None, 0, None
        st.history.append("reclaimed")
        return True
    if e is None or e.requests <= st.last_requests:
        return False
    st.last_requests, st.last = e.requests, e
    alpha = float(stage.get("alpha", 2.0))
    if st.state == NORMAL:
        if not (e.requests >= WINDOW and e.recent_us > alpha * (st.hot_mean_us or e.mean_us)):
            st.hot, st.hot_mean_us = 0, None
            return False
        st.hot += 1
        st.hot_mean_us = st.hot_mean_us or e.mean_us
        if st.hot >= int(stage.get("enter_reports", ENTER_REPORTS)):
            st.state, st.baseline_us, st.calm = FORWARDING, st.hot_mean_us, 0
            st.hot, st.hot_mean_us = 0, None
            st.forwarded_to = _least_loaded(list(stage["servers"]), endpoints)
            st.forwards += 1
            st.history.append(f"forward to {st.forwarded_to}")
            return True
        return False
    baseline = st.baseline_us or e.mean_us
    if st.state == FORWARDING:
        st.calm = st.calm + 1 if e.recent_us <= recover_threshold(alpha, baseline) else 0
        if st.calm >= RECOVER_REPORTS:
            st.state, st.calm, st.hot = RECLAIMING, 0, 0
            st.reclaims += 1
            st.history.append("reclaim")
            return True
        return False
    # Reclaiming: back to forwarding needs the same count of slow reports as entry (the
    # copy-back's own writes to E make one window look slow).
    if e.recent_us <= alpha * baseline:
        st.hot = 0
        return False
    st.hot += 1
    if st.hot >= int(stage.get("enter_reports", ENTER_REPORTS)):
        st.state, st.calm, st.hot = FORWARDING, 0, 0
        st.history.append("slow again: forward")
        return True
    return False
