"""The declared-IO loop (a leader singleton): every pass takes the agents' latest reports of
their jobs (telemetry `declared_io`), marks jobs done, failed or missed, declares the next
job of every recurring scrub that is due (stages of kind `scrub`, from policies or REST), and
rewrites the key of each host whose open jobs changed (or whose key Redis lost)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Callable
from datetime import datetime, timedelta

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from lachesis_controller.bus.agent_telemetry import TelemetryStore
from lachesis_controller.bus.client import REDIS_DOWN
from lachesis_controller.db import utcnow
from lachesis_controller.declared_io.jobs import apply_report, is_shipped, mark_missed, publish
from lachesis_controller.models import DeclaredJob, Host
from lachesis_controller.stages.store import declared_stages

log = logging.getLogger(__name__)


def scrub_job_id(stage: str, host_id: str, n: int) -> str:
    """`<stage slug>-<hash of stage and host>-<n>`: a valid name, unique per stage and host."""
    slug = re.sub(r"[^a-z0-9]+", "-", stage).strip("-")[:36].strip("-") or "scrub"
    digest = hashlib.sha256(f"{stage}\0{host_id}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}-{n}"


def declare_due_scrubs(session: Session, now: datetime) -> set[str]:
    """Declares the next job of every scrub stage on each of its hosts whose last job from
    it was declared `every_s` ago or more (or never); returns the hosts given one."""
    changed: set[str] = set()
    scrubs = {name: stage for name, stage in declared_stages(session).items() if stage.get("kind") == "scrub"}
    if not scrubs:
        return changed
    # Ids only, and only when a scrub is declared: this loop runs every period, and loading
    # every host as an object was a quarter of the controller's CPU at 5,000 hosts
    # (docs/benchmarks/controller.md).
    hosts = list(session.scalars(select(Host.id).order_by(Host.id)))
    enrolled = set(hosts)
    for name, stage in scrubs.items():
        for host_id in stage.get("hosts") or hosts:
            if host_id not in enrolled:
                continue
            last = session.scalars(
                select(DeclaredJob)
                .where(DeclaredJob.source == name, DeclaredJob.host_id == host_id)
                .order_by(DeclaredJob.created_at.desc())
                .limit(1)
            ).first()
            if last is not None and (is_shipped(last) or now < last.created_at + timedelta(seconds=stage["every_s"])):
                continue
            n = 1 + int(last.id.rsplit("-", 1)[1]) if last is not None else 1
            session.add(
                DeclaredJob(
                    id=scrub_job_id(name, host_id, n),
                    host_id=host_id,
                    tenant=stage["owner"],
                    files=[{"path": p, "offset": 0, "length": None} for p in stage["paths"]],
                    deadline=now + timedelta(seconds=stage.get("window_s") or stage["every_s"]),
                    pace=stage.get("pace", "deadline"),
                    paused=False,
                    rate_bytes_per_s=stage.get("rate_bytes_per_s"),
                    source=name,
                    state="pending",
                    dispatched_bytes=0,
                    foreground_bytes=0,
                    shared_bytes=0,
                    created_at=now,
                    created_by=f"scrub:{name}",
                )
            )
            changed.add(host_id)
            log.info("scrub %s: declared job %d on %s", name, n, host_id)
    return changed


def take_reports(session: Session, telemetry: TelemetryStore, now: datetime) -> set[str]:
    """Applies the agents' latest reports; returns the hosts whose open jobs changed."""
    changed: set[str] = set()
    open_jobs = session.scalars(select(DeclaredJob).where(DeclaredJob.finished_at.is_(None)))
    for job in open_jobs:
        if job.state in ("failed", "cancelled", "done"):
            continue
        latest = telemetry.declared_io(job.host_id)
        if latest is not None:
            at, reports = latest
            report = next((r for r in reports if r.id == job.id), None)
            if report is not None and (job.reported_at is None or at >= job.reported_at):
                if apply_report(job, report, at):
                    changed.add(job.host_id)
        mark_missed(job, now)
    return changed


async def step(
    sessions: sessionmaker[Session], redis: Redis, telemetry: TelemetryStore, clock: Callable[[], datetime] = utcnow
) -> None:
    now = clock()
    with sessions() as session, session.begin():
        changed = take_reports(session, telemetry, now) | declare_due_scrubs(session, now)
        hosts = {j.host_id for j in session.scalars(select(DeclaredJob)) if is_shipped(j)} | changed
    with sessions() as session:
        # Every pass also repairs a key Redis lost (publish writes only what differs).
        await publish(session, redis, hosts)


async def run(
    sessions: sessionmaker[Session], redis: Redis, telemetry: TelemetryStore, stop: asyncio.Event, interval_s: float
) -> None:
    down = False
    while not stop.is_set():
        try:
            await step(sessions, redis, telemetry)
            down = False
        except asyncio.CancelledError:
            raise
        except REDIS_DOWN as exc:
            if not down:
                log.warning("declared IO loop: Redis unavailable (%s)", exc)
                down = True
        except Exception:
            log.exception("declared IO loop pass failed")
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
        except TimeoutError:
            pass


def start(
    sessions: sessionmaker[Session], redis: Redis, telemetry: TelemetryStore, stop: asyncio.Event, interval_s: float
) -> asyncio.Task[None]:
    return asyncio.create_task(run(sessions, redis, telemetry, stop, interval_s), name="declared-io")
