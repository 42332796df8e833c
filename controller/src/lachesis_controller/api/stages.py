"""Stages: Moirai's cache API (create, configure, remove, stats) on the agents' real stages.

A stage is declared here or by a policy (policies own theirs: change them through the
policy). Every change is a new generation for the hosts the stage applies to; the agents
build, resize in place or replace the stage (api-schemas/README.md, "Stages"). What each host
runs and measures comes back on telemetry and is served with the declaration.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import TypeAdapter, ValidationError
from sqlalchemy.orm import Session

from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import Principal, forbidden, require_tenant
from lachesis_controller.bus.agent_telemetry import HostStage, TelemetryStore
from lachesis_controller.config import Settings
from lachesis_controller.db import utcnow
from lachesis_controller.models import Rule, Stage, Tenant
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.policy.document import Stage as StageSpec
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas.stages import (
    StageChange,
    StageHost,
    StageOut,
    StagePartOut,
    StagePatch,
    StagePointOut,
)
from lachesis_controller.stages import store
from lachesis_controller.stages.resolve import shipped_stages
from lachesis_controller.validation.problems import ProblemError, conflict, invalid, not_found, problem_responses

router = APIRouter(prefix="/stages", tags=["stages"])

WRITE_ERRORS = problem_responses(400, 401, 403, 404, 409, 415, 422)
STAGE_SPEC: TypeAdapter[StageSpec] = TypeAdapter(StageSpec)


def _telemetry(request: Request) -> TelemetryStore:
    telemetry: TelemetryStore = request.app.state.telemetry
    return telemetry


def shipped_by_host(session: Session) -> dict[str, dict[str, dict[str, Any]]]:
    """Host -> stage name -> the stage as shipped to it (resolved once per request)."""
    sizes, servers = store.allocation_sizes(session), store.server_sizes(session)
    everything = list(store.declared_stages(session).values())
    return {
        host_id: {s["name"]: s for s in shipped_stages(everything, store.host_view(session, host_id), sizes, servers)}
        for host_id in rollouts.all_host_ids(session)
    }


def _host_rows(
    declared: dict[str, Any], reports: list[HostStage], hosts: dict[str, dict[str, dict[str, Any]]]
) -> list[StageHost]:
    by_host = {r.host_id: r for r in reports if r.counters.name == declared["name"]}
    out = []
    for host_id, shipped in hosts.items():
        if declared["name"] not in shipped and host_id not in by_host:
            continue
        r = by_host.get(host_id)
        c = r.counters if r is not None else None
        hits, misses = (c.hits, c.misses) if c is not None else (None, None)
        out.append(
            StageHost(
                host_id=host_id,
                allocated_bytes=shipped.get(declared["name"], {}).get("size_bytes"),
                reported_at=r.at if r is not None else None,
                installed_bytes=c.installed_bytes if c else None,
                hits=hits,
                misses=misses,
                hit_ratio=hits / (hits + misses)
                if hits is not None and misses is not None and hits + misses > 0
                else None,
                bytes_read_hit=c.bytes_read_hit if c else None,
                bytes_read_miss=c.bytes_read_miss if c else None,
                bytes_written=c.bytes_written if c else None,
                evictions=c.evictions if c else None,
                writebacks=c.writebacks if c else None,
                dirty_bytes=c.dirty_bytes if c else None,
                demoted_blocks=c.demoted_blocks if c else None,
                demotion_hits=c.demotion_hits if c else None,
                front_end=(c.front_end or "fs") if c else None,
                parts=[StagePartOut(**p.model_dump()) for p in c.parts] if c and c.parts else None,
                series=[
                    StagePointOut(
                        at=p.at, size_bytes=p.size_bytes, installed_bytes=p.installed_bytes, hit_ratio=p.hit_ratio
                    )
                    for p in (r.series if r is not None else [])
                ],
            )
        )
    return out


def _out(
    session: Session,
    declared: dict[str, Any],
    reports: list[HostStage],
    hosts: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> StageOut:
    spec = {k: v for k, v in declared.items() if k != "source"}
    return StageOut(
        name=declared["name"],
        kind=declared["kind"],
        owner=declared.get("owner"),
        source=declared["source"],
        declared=spec,
        hosts=_host_rows(declared, reports, hosts if hosts is not None else shipped_by_host(session)),
    )


def _get(session: Session, principal: Principal, name: str) -> dict[str, Any]:
    declared = store.declared_stages(session).get(name)
    if declared is None or not principal.sees_tenant(declared.get("owner")):
        raise not_found("stage", name)
    return declared


def _check(session: Session, spec: dict[str, Any], principal: Principal, action: str) -> None:
    owner = spec.get("owner")
    if owner is None and principal.tenant is not None:
        raise forbidden(principal, f"{action} (shared stages belong to all tenants)")
    require_tenant(principal, owner, action)
    errors = []
    for field in ("owner", "shared_with"):
        names = [owner] if field == "owner" else spec.get("shared_with", [])
        for i, name in enumerate(names):
            if name is not None and session.get(Tenant, name) is None:
                errors.append((field if field == "owner" else f"shared_with[{i}]", f"no tenant named {name!r}"))
    parent = spec.get("parent")
    if parent is not None:
        p = store.declared_stages(session).get(parent)
        if p is None or p["kind"] != "cache" or p.get("level") != 2:
            errors.append(("parent", f"{parent!r} is not a declared level-2 cache stage"))
    if errors:
        raise invalid(errors)


def _rollout(
    session: Session, settings: Settings, cause: str, spec: dict[str, Any]
) -> tuple[str, list[rollouts.Publication]]:
    hosts = spec.get("hosts")
    rollout, publications = rollouts.start_rollout(
        session,
        cause=cause,
        trigger="stage",
        host_ids=rollouts.all_host_ids(session) if hosts is None else hosts,
        now=utcnow(),
        timeout_s=settings.rollout_timeout_s,
        traceparent=current_traceparent(),
    )
    return rollout.id, publications


def _validated(body: dict[str, Any]) -> dict[str, Any]:
    try:
        return STAGE_SPEC.validate_python(body).model_dump(mode="json")
    except ValidationError as exc:
        raise invalid((".".join(str(p) for p in e["loc"]) or "body", e["msg"]) for e in exc.errors()) from None


@router.get("", response_model=list[StageOut], summary="Every declared stage with what each host runs and measures")
async def list_stages(request: Request, session: SessionDep, principal: PrincipalDep) -> list[StageOut]:
    reports = _telemetry(request).stages()
    with session.begin():
        hosts = shipped_by_host(session)
        return [
            _out(session, s, reports, hosts)
            for s in store.declared_stages(session).values()
            if principal.sees_tenant(s.get("owner"))
        ]


@router.get(
    "/{name:path}/stats",
    response_model=list[StageHost],
    responses=problem_responses(401, 403, 404),
    summary="A stage's statistics per host (getCacheStats)",
)
async def stage_stats(name: str, request: Request, session: SessionDep, principal: PrincipalDep) -> list[StageHost]:
    with session.begin():
        return _out(session, _get(session, principal, name), _telemetry(request).stages()).hosts


@router.get("/{name:path}", response_model=StageOut, responses=problem_responses(401, 403, 404))
async def get_stage(name: str, request: Request, session: SessionDep, principal: PrincipalDep) -> StageOut:
    with session.begin():
        return _out(session, _get(session, principal, name), _telemetry(request).stages())


@router.post(
    "",
    status_code=201,
    response_model=StageChange,
    responses=WRITE_ERRORS,
    summary="Create a stage (a cache, a rate limit, a log writer, ...) on the hosts it names",
)
async def create_stage(
    body: StageSpec,
    request: Request,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> StageChange:
    spec = body.model_dump(mode="json")
    with session.begin():
        if spec["name"] in store.declared_stages(session):
            raise conflict("name", f"stage {spec['name']!r} already exists")
        _check(session, spec, principal, f"create stage {spec['name']!r}")
        now = utcnow()
        session.add(
            Stage(
                name=spec["name"],
                kind=spec["kind"],
                owner=spec.get("owner"),
                spec=spec,
                created_at=now,
                updated_at=now,
                created_by=principal.actor,
            )
        )
        session.flush()
        rollout_id, publications = _rollout(session, settings, f"stage {spec['name']} created", spec)
        audit.record(
            session,
            principal,
            "stage.create",
            kind="stage",
            name=spec["name"],
            tenant=spec.get("owner"),
            before=None,
            after=spec,
            rollout_id=rollout_id,
        )
        out = _out(session, {**spec, "source": "api"}, _telemetry(request).stages())
    await ship(bus, publications, response, rollout_id)
    response.headers["Location"] = f"/api/v1/stages/{spec['name']}"
    return StageChange(**out.model_dump(), rollout_id=rollout_id)


def _own(session: Session, principal: Principal, name: str, action: str) -> Stage:
    declared = _get(session, principal, name)
    if declared["source"] != "api":
        raise ProblemError(409, f"stage {name!r} is declared by {declared['source']}; change it there", kind="conflict")
    row = session.get(Stage, name)
    assert row is not None
    _check(session, row.spec, principal, action)
    return row


@router.patch(
    "/{name:path}",
    response_model=StageChange,
    responses=WRITE_ERRORS,
    summary="Configure a stage: resize it, change its write mode or limits (live, no remount)",
)
async def configure_stage(
    name: str,
    patch: StagePatch,
    request: Request,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> StageChange:
    changes = patch.model_dump(exclude_unset=True)
    if not changes:
        raise invalid([("body", "name at least one field to change")])
    with session.begin():
        row = _own(session, principal, name, f"configure stage {name!r}")
        before = dict(row.spec)
        spec = _validated({**row.spec, **changes})
        row.spec, row.updated_at = spec, utcnow()
        session.flush()
        rollout_id, publications = _rollout(session, settings, f"stage {name} configured", spec)
        audit.record(
            session,
            principal,
            "stage.configure",
            kind="stage",
            name=name,
            tenant=spec.get("owner"),
            before=before,
            after=spec,
            rollout_id=rollout_id,
        )
        out = _out(session, {**spec, "source": "api"}, _telemetry(request).stages())
    await ship(bus, publications, response, rollout_id)
    return StageChange(**out.model_dump(), rollout_id=rollout_id)


@router.delete(
    "/{name:path}",
    status_code=204,
    responses=WRITE_ERRORS,
    summary="Remove a stage (the agents write back what it holds first)",
)
async def delete_stage(
    name: str,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> None:
    with session.begin():
        row = _own(session, principal, name, f"delete stage {name!r}")
        users = [
            r.name
            for r in session.query(Rule).all()
            if any(d["to"]["kind"] == "stage" and d["to"]["target"] == name for d in r.detours)
        ]
        children = [s["name"] for s in store.declared_stages(session).values() if s.get("parent") == name]
        if users or children:
            raise conflict(
                "name",
                f"stage {name!r} is still used by {', '.join(['rule ' + u for u in users] + ['stage ' + c for c in children])}",
            )
        spec = dict(row.spec)
        session.delete(row)
        session.flush()
        rollout_id, publications = _rollout(session, settings, f"stage {name} deleted", spec)
        audit.record(
            session,
            principal,
            "stage.delete",
            kind="stage",
            name=name,
            tenant=spec.get("owner"),
            before=spec,
            after=None,
            rollout_id=rollout_id,
        )
    await ship(bus, publications, response, rollout_id)
