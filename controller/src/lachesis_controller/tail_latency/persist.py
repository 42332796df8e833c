"""The application's decisions in the database (`TailLatencyState`, one row per stage): the
loop writes a stage's row in the transaction of the rollout that ships its change, and a
loop that starts (a restarted controller, a new leader) resumes from the rows.

What is kept is what was decided (state, server, baseline, counts, the rollout that began
the forwarding) and what is shipped (`stages/forwarding.py` reads it). The agents' reports
(`last`, `log`) and the recovery count (`calm`) are not: they are counted again from the
reports that come in after the start.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from lachesis_controller.models import TailLatencyState
from lachesis_controller.tail_latency.decide import NORMAL, StageState


def load(session: Session) -> dict[str, StageState]:
    out = {}
    for r in session.scalars(select(TailLatencyState)):
        st = StageState(
            r.stage,
            r.tenant,
            "",
            state=r.state,
            forwarded_to=r.forwarded_to,
            baseline_us=r.baseline_us,
            forwards=r.forwards,
            reclaims=r.reclaims,
            since_rollout=r.since_rollout,
        )
        st.history.append(f"resumed {r.state}" + (f" to {r.forwarded_to}" if r.forwarded_to else ""))
        out[r.stage] = st
    return out


def save(session: Session, st: StageState, reclaim_bytes_per_s: int, now: datetime) -> None:
    """Writes `st` as it is now; `reclaim_bytes_per_s` is the stage's rate (shipped while
    reclaiming)."""
    fwd = st.forwarding(reclaim_bytes_per_s)
    row = session.get(TailLatencyState, st.stage)
    if row is None:
        row = TailLatencyState(stage=st.stage)
        session.add(row)
    row.tenant, row.state = st.tenant, st.state
    row.forwarded_to = fwd.to if fwd is not None else None
    row.reclaim_bytes_per_s = fwd.reclaim_bytes_per_s if fwd is not None else None
    row.baseline_us, row.forwards, row.reclaims = st.baseline_us, st.forwards, st.reclaims
    row.since_rollout = st.since_rollout if st.state != NORMAL else None
    row.updated_at = now


def forget(session: Session, stages: set[str]) -> None:
    if stages:
        session.execute(delete(TailLatencyState).where(TailLatencyState.stage.in_(sorted(stages))))
