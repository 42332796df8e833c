"""Declared jobs in the database and on the bus: each host's open jobs go to its agent as one
`declared-io` message in `lachesis:agent:{host}:declared-io` (rewritten whenever they change,
and by every loop pass if Redis lost it); the agent's reports (telemetry `declared_io`) come
back through `apply_report`.

States: `pending` (not reported yet), `running`, `paused`, then `done` (every declared byte
covered, reported no later than the deadline), `missed` (the deadline passed first; the
agent keeps reading until it is covered, then `finished_at` is set), `failed` (the agent
could not run it: `error`) or `cancelled` (DELETE). A job is judged by its reports' counters
and the time of the report that said it was covered, never by how long it took.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.bus.messages import TelemetryDeclaredJob
from lachesis_controller.declared_io.messages import SCHEMA, DeclaredIo, declared_io_key
from lachesis_controller.models import DeclaredJob

OPEN = ("pending", "running", "paused")
FINISHED = ("done", "failed", "cancelled")


def is_shipped(job: DeclaredJob) -> bool:
    """Whether the host's agent is to run it (a missed job runs on until covered)."""
    return job.state in OPEN or (job.state == "missed" and job.finished_at is None)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def job_message(job: DeclaredJob) -> dict[str, Any]:
    return {
        "id": job.id,
        "tenant": job.tenant,
        "files": job.files,
        "deadline": _rfc3339(job.deadline),
        "pace": job.pace,
        "paused": job.paused,
        "rate_bytes_per_s": job.rate_bytes_per_s,
    }


def host_jobs(session: Session, host_id: str) -> list[DeclaredJob]:
    rows = session.scalars(
        select(DeclaredJob).where(DeclaredJob.host_id == host_id).order_by(DeclaredJob.deadline, DeclaredJob.id)
    )
    return [j for j in rows if is_shipped(j)]


async def publish(session: Session, redis: Redis, host_ids: Iterable[str]) -> None:
    """Writes each host's open jobs to its key, unless the key already says so. Versions
    grow: past the one in the key, and with the clock (a key Redis lost starts above any
    version the agent saw)."""
    for host_id in sorted(set(host_ids)):
        jobs = [job_message(j) for j in host_jobs(session, host_id)]
        key = declared_io_key(host_id)
        old_text = await redis.get(key)
        old: dict[str, Any] | None = None
        if old_text:
            try:
                old = json.loads(old_text)
            except ValueError:
                old = None
        if old is not None and old.get("jobs") == jobs:
            continue
        if old is None and not jobs:
            continue
        version = max(int(time.time() * 1000), int((old or {}).get("version", 0)) + 1)
        msg = DeclaredIo.model_validate({"schema": SCHEMA, "host_id": host_id, "version": version, "jobs": jobs})
        await redis.set(key, json.dumps(msg.dump(), separators=(",", ":")))


def apply_report(job: DeclaredJob, report: TelemetryDeclaredJob, at: datetime) -> bool:
    """Takes the agent's report of `job` sent at `at`; returns whether the job left the
    host's open set (finished or failed) so the host's message must change."""
    if job.state in FINISHED or job.finished_at is not None:
        return False
    job.reported_at = at
    job.bytes_declared = report.bytes_declared
    job.dispatched_bytes = report.dispatched_bytes
    job.foreground_bytes = report.foreground_bytes
    job.shared_bytes = report.shared_bytes
    if report.state == "failed":
        job.state, job.error, job.finished_at = "failed", report.error, at
        return True
    if report.state == "done":
        job.finished_at = at
        job.checksums = [f.dump() for f in report.files or []]
        if job.state != "missed":
            job.state = "done" if at <= job.deadline else "missed"
        return True
    if job.state != "missed":
        job.state = report.state
    return False


def mark_missed(job: DeclaredJob, now: datetime) -> bool:
    """An open job past its deadline is missed (it stays shipped until covered)."""
    if job.state in OPEN and now > job.deadline:
        job.state = "missed"
        return True
    return False
