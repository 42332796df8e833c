"""The tail-latency loop (a leader singleton): every pass reads the agents' endpoint reports
and forwarding logs from telemetry, steps each tail_latency stage's decision
(`decide.py`), and when what must be shipped changed writes it to the database
(`persist.py`, which `stages/forwarding.py` reads) and rolls out a new generation to the
stage's hosts in the same transaction (two-phase: the owner's flow is quiesced and drained
while its route changes). A loop that starts resumes the decisions from the database."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.db import utcnow
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.stages import forwarding
from lachesis_controller.stages.store import declared_stages
from lachesis_controller.tail_latency import persist
from lachesis_controller.tail_latency.decide import NORMAL, EndpointReport, LogReport, StageState, step

log = logging.getLogger(__name__)


class Publisher(Protocol):
    async def publish(self, publications: list[rollouts.Publication], *, source: str) -> Any: ...


class TailLatency:
    """The application's state per stage (what `GET /api/v1/apps/tail-latency` shows)."""

    def __init__(self) -> None:
        self.states: dict[str, StageState] = {}

    def resume(self, session: Session) -> None:
        """The decisions as the database has them (a loop that starts: after a restart, on a
        new leader, or on a replica that led before and may have missed changes)."""
        self.states.clear()
        self.states.update(persist.load(session))


def endpoint_reports(store: TelemetryStore, hosts: list[str] | None) -> dict[str, EndpointReport]:
    """addr -> the report of the host that sent that endpoint the most requests."""
    out: dict[str, EndpointReport] = {}
    for host, reports in store.endpoints().items():
        if hosts is not None and host not in hosts:
            continue
        for e in reports:
            r = EndpointReport(e.requests, e.recent_us, e.mean_us, e.slow)
            if e.addr not in out or out[e.addr].requests < r.requests:
                out[e.addr] = r
    return out


def log_report(store: TelemetryStore, name: str) -> LogReport | None:
    mine = [s.counters for s in store.stages() if s.counters.name == name]
    if not mine:
        return None
    return LogReport(
        forwarded_bytes=sum(s.bytes_written or 0 for s in mine),
        held_bytes=sum(s.dirty_bytes or 0 for s in mine),
        reclaimed_bytes=sum(s.reclaimed_bytes or 0 for s in mine),
    )


def step_all(
    app: TailLatency, declared: dict[str, dict[str, Any]], store: TelemetryStore, session: Session, now: datetime
) -> list[str]:
    """Steps every tail_latency stage with servers; returns the stages whose forwarding changed
    (already written to the session, for `stages/forwarding.py`)."""
    changed = []
    for name, stage in sorted(declared.items()):
        if stage.get("kind") != "tail_latency" or not stage.get("servers"):
            continue
        st = app.states.setdefault(name, StageState(name, stage.get("owner") or "", stage["servers"][0]))
        st.endpoint = stage["servers"][0]
        if step(st, stage, endpoint_reports(store, stage.get("hosts")), log_report(store, forwarding.log_name(name))):
            persist.save(session, st, reclaim_rate(stage), now)
            changed.append(name)
    gone = set(app.states) - {n for n, s in declared.items() if s.get("kind") == "tail_latency" and s.get("servers")}
    for name in gone:
        # A stage no longer declared: its route goes back to what its rules say (the agent's
        # retired log writes back what it holds).
        del app.states[name]
    persist.forget(session, gone)
    return changed


def reclaim_rate(stage: dict[str, Any]) -> int:
    return int(stage.get("reclaim_bytes_per_s", 64 << 20))


def start(
    sessions: sessionmaker[Session],
    store: TelemetryStore,
    stop: asyncio.Event,
    app: TailLatency,
    interval_s: float,
    *,
    bus: Publisher | None = None,
    rollout_timeout_s: float = 30.0,
) -> asyncio.Task[None]:
    async def run() -> None:
        resumed = False
        while not stop.is_set():
            try:
                with sessions() as s, s.begin():
                    if not resumed:
                        app.resume(s)
                        resumed = True
                        for st in app.states.values():
                            if st.state != NORMAL:
                                log.info("tail latency: %s resumes %s to %s", st.stage, st.state, st.forwarded_to)
                    declared = declared_stages(s)
                    now = utcnow()
                    changed = step_all(app, declared, store, s, now)
                    publications: list[rollouts.Publication] = []
                    if changed:
                        hosts = sorted(
                            {h for n in changed for h in (declared.get(n, {}).get("hosts") or rollouts.all_host_ids(s))}
                        )
                        rollout, publications = rollouts.start_rollout(
                            s,
                            cause=f"tail latency: {', '.join(f'{n} {app.states[n].state}' for n in changed if n in app.states)}",
                            trigger="tail-latency",
                            host_ids=hosts,
                            now=now,
                            timeout_s=rollout_timeout_s,
                            traceparent=None,
                        )
                        for n in changed:
                            tracked = app.states.get(n)
                            if tracked is not None and tracked.state != NORMAL and tracked.since_rollout is None:
                                tracked.since_rollout = rollout.id
                                persist.save(s, tracked, reclaim_rate(declared[n]), now)
                        log.info(
                            "tail latency: %s",
                            "; ".join(f"{n}: {app.states[n].history[-1]}" for n in changed if n in app.states),
                        )
                if publications and bus is not None:
                    await bus.publish(publications, source="tail-latency")
            except Exception:  # a pass that fails is logged; the next one starts afresh
                log.exception("tail latency pass failed")
                # Its decisions were rolled back with its transaction: take the database's again.
                resumed = False
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval_s)
            except TimeoutError:
                pass

    return asyncio.create_task(run(), name="tail-latency")
