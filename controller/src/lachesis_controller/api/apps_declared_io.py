"""`/api/v1/apps/declared-io`: declared maintenance IO (DINGOS). `POST` declares a job (the
file ranges of a tenant on a host to read by a deadline), `GET` lists jobs or shows one with
its progress (bytes declared, read by the agent's dispatcher, covered by foreground reads),
`PATCH` pauses, resumes or re-paces it, `DELETE` cancels it. Bad input is a 4xx that changes
nothing; the host's agent is told through its `declared-io` key once the change is stored."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from fastapi import APIRouter, Query, Response
from sqlalchemy import func, select

from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import require_tenant
from lachesis_controller.auth.endpoint_roots import confine
from lachesis_controller.bus.client import REDIS_DOWN, Bus
from lachesis_controller.db import utcnow
from lachesis_controller.declared_io.jobs import FINISHED, publish
from lachesis_controller.declared_io.messages import MAX_JOBS
from lachesis_controller.models import DeclaredJob, Host, Tenant
from lachesis_controller.schemas.declared_io import (
    DeclaredFile,
    DeclaredJobOut,
    DeclaredJobPatch,
    DeclaredJobSpec,
    FileChecksum,
)
from lachesis_controller.validation.problems import conflict, invalid, not_found, problem_responses

router = APIRouter(prefix="/apps/declared-io", tags=["apps"])

WRITE_ERRORS = problem_responses(400, 401, 403, 404, 409, 415, 422)
log = logging.getLogger(__name__)


async def _tell(session: SessionDep, bus: Bus, host: str) -> None:
    # The change is stored: without Redis now, the loop's next pass tells the agent.
    try:
        await publish(session, bus.redis, [host])
    except REDIS_DOWN as exc:
        log.warning("declared IO: cannot tell %s now (%s); the loop will", host, exc)


def job_out(job: DeclaredJob) -> DeclaredJobOut:
    return DeclaredJobOut(
        id=job.id,
        host=job.host_id,
        tenant=job.tenant,
        files=[DeclaredFile.model_validate(f) for f in job.files],
        deadline=job.deadline,
        pace=job.pace,
        paused=job.paused,
        rate_bytes_per_s=job.rate_bytes_per_s,
        source=job.source,
        state=job.state,
        bytes_declared=job.bytes_declared,
        dispatched_bytes=job.dispatched_bytes,
        foreground_bytes=job.foreground_bytes,
        shared_bytes=job.shared_bytes,
        covered_bytes=job.dispatched_bytes + job.foreground_bytes + job.shared_bytes,
        error=job.error,
        checksums=[FileChecksum(**c) for c in job.checksums] if job.checksums is not None else None,
        created_at=job.created_at,
        created_by=job.created_by,
        reported_at=job.reported_at,
        finished_at=job.finished_at,
    )


def _actor(principal: object) -> str:
    name = getattr(principal, "name", None)
    return str(name) if name else "anonymous"


@router.post("", status_code=201, response_model=DeclaredJobOut, responses=WRITE_ERRORS)
async def declare(
    spec: DeclaredJobSpec,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> DeclaredJobOut:
    require_tenant(principal, spec.tenant, f"declare IO of tenant {spec.tenant!r}")
    now = utcnow()
    with session.begin():
        errors = []
        if session.get(Host, spec.host) is None:
            errors.append(("host", f"unknown host {spec.host!r}"))
        if session.get(Tenant, spec.tenant) is None:
            errors.append(("tenant", f"unknown tenant {spec.tenant!r}"))
        if spec.deadline <= now:
            errors.append(("deadline", f"{spec.deadline.isoformat()} is not in the future"))
        if errors:
            raise invalid(errors)
        confine(
            session,
            principal,
            settings.endpoint_roots,
            [(f"files[{i}].path", f.path) for i, f in enumerate(spec.files)],
        )
        job_id = spec.id or f"dio-{uuid.uuid4().hex[:12]}"
        if session.get(DeclaredJob, job_id) is not None:
            raise conflict("id", f"declared job {job_id!r} already exists")
        open_jobs = session.scalar(
            select(func.count())
            .select_from(DeclaredJob)
            .where(
                DeclaredJob.host_id == spec.host, DeclaredJob.finished_at.is_(None), DeclaredJob.state.not_in(FINISHED)
            )
        )
        if (open_jobs or 0) >= MAX_JOBS:
            raise conflict("host", f"host {spec.host!r} already runs {MAX_JOBS} declared jobs")
        job = DeclaredJob(
            id=job_id,
            host_id=spec.host,
            tenant=spec.tenant,
            files=[f.model_dump() for f in spec.files],
            deadline=spec.deadline,
            pace=spec.pace,
            paused=spec.paused,
            rate_bytes_per_s=spec.rate_bytes_per_s,
            source=None,
            state="pending",
            dispatched_bytes=0,
            foreground_bytes=0,
            shared_bytes=0,
            created_at=now,
            created_by=_actor(principal),
        )
        session.add(job)
        audit.record(
            session,
            principal,
            "declared_io.create",
            kind="declared_io",
            name=job_id,
            tenant=spec.tenant,
            before=None,
            after=job_out(job).model_dump(mode="json"),
            rollout_id=None,
        )
    await _tell(session, bus, spec.host)
    response.headers["Location"] = f"/api/v1/apps/declared-io/{job_id}"
    return job_out(job)


@router.get("", response_model=list[DeclaredJobOut], responses=problem_responses(401))
async def list_jobs(
    session: SessionDep,
    principal: PrincipalDep,
    host: str | None = None,
    state: str | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> list[DeclaredJobOut]:
    query = select(DeclaredJob).order_by(DeclaredJob.created_at.desc(), DeclaredJob.id)
    if principal.tenant is not None:
        query = query.where(DeclaredJob.tenant == principal.tenant)
    if host is not None:
        query = query.where(DeclaredJob.host_id == host)
    if state is not None:
        query = query.where(DeclaredJob.state == state)
    with session.begin():
        return [job_out(j) for j in session.scalars(query.limit(limit))]


def _get(session: SessionDep, principal: PrincipalDep, job_id: str) -> DeclaredJob:
    job = session.get(DeclaredJob, job_id)
    if job is None or not principal.sees_tenant(job.tenant):
        raise not_found("declared job", job_id)
    return job


@router.get("/{job_id}", response_model=DeclaredJobOut, responses=problem_responses(401, 404))
async def get_job(job_id: str, session: SessionDep, principal: PrincipalDep) -> DeclaredJobOut:
    with session.begin():
        return job_out(_get(session, principal, job_id))


def _change(
    session: SessionDep,
    principal: PrincipalDep,
    job_id: str,
    action: str,
    change: Callable[[DeclaredJob], None],
) -> tuple[DeclaredJobOut, str]:
    """Applies `change` to an unfinished job with its audit event; returns it and its host."""
    with session.begin():
        job = _get(session, principal, job_id)
        if job.state in FINISHED or job.finished_at is not None:
            raise conflict("state", f"declared job {job_id!r} is {job.state}; nothing left to change")
        before = job_out(job).model_dump(mode="json")
        change(job)
        out = job_out(job)
        audit.record(
            session,
            principal,
            f"declared_io.{action}",
            kind="declared_io",
            name=job_id,
            tenant=job.tenant,
            before=before,
            after=out.model_dump(mode="json"),
            rollout_id=None,
        )
        return out, job.host_id


@router.patch("/{job_id}", response_model=DeclaredJobOut, responses=WRITE_ERRORS)
async def change_job(
    job_id: str,
    patch: DeclaredJobPatch,
    session: SessionDep,
    bus: BusDep,
    principal: PrincipalDep,
) -> DeclaredJobOut:
    def apply(job: DeclaredJob) -> None:
        if patch.paused is not None:
            job.paused = patch.paused
        if patch.pace is not None:
            job.pace = patch.pace
        if "rate_bytes_per_s" in patch.model_fields_set:
            job.rate_bytes_per_s = patch.rate_bytes_per_s

    out, host = _change(session, principal, job_id, "update", apply)
    await _tell(session, bus, host)
    return out


@router.delete("/{job_id}", response_model=DeclaredJobOut, responses=problem_responses(401, 403, 404, 409))
async def cancel_job(job_id: str, session: SessionDep, bus: BusDep, principal: PrincipalDep) -> DeclaredJobOut:
    def cancel(job: DeclaredJob) -> None:
        job.state = "cancelled"

    out, host = _change(session, principal, job_id, "cancel", cancel)
    await _tell(session, bus, host)
    return out
