"""Tenants: who the IO belongs to. Every host gets every tenant, so any change here is a
new generation for all hosts."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from pydantic import TypeAdapter
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.api import etags
from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.api.read_cache import Answer, cached
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import require_tenant
from lachesis_controller.bus.messages import Classifier
from lachesis_controller.config import Settings
from lachesis_controller.db import utcnow
from lachesis_controller.models import Rule, Stage, Tenant
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.policy.enforced import check_classifiers
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas.tenants import TenantChange, TenantOut, TenantSpec
from lachesis_controller.validation.bounds import MAX_TENANTS, require_room
from lachesis_controller.validation.problems import conflict, invalid, not_found, problem_responses

router = APIRouter(prefix="/tenants", tags=["tenants"])

WRITE_ERRORS = problem_responses(400, 401, 403, 409, 415, 422)


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        name=tenant.name,
        classifiers=[Classifier.model_validate(c) for c in tenant.classifiers],
        description=tenant.description,
        created_at=tenant.created_at,
        updated_at=tenant.updated_at,
    )


def _change(tenant: Tenant, rollout_id: str) -> TenantChange:
    return TenantChange(**tenant_out(tenant).model_dump(), rollout_id=rollout_id)


def _check_enforced(session: Session, spec: TenantSpec) -> None:
    """Every host gets every tenant: refuse a classifier a host's data path could not decide."""
    check_classifiers(
        session,
        [{"name": spec.name, "classifiers": [c.dump() for c in spec.classifiers]}],
        lambda _t, c: f"classifiers[{c}].kind",
    )


def _rollout(session: Session, settings: Settings, cause: str) -> tuple[str, list[rollouts.Publication]]:
    now = utcnow()
    rollout, publications = rollouts.start_rollout(
        session,
        cause=cause,
        trigger="tenant",
        host_ids=None,  # every host
        now=now,
        timeout_s=settings.rollout_timeout_s,
        traceparent=current_traceparent(),
    )
    return rollout.id, publications


@router.post("", status_code=201, response_model=TenantChange, responses=WRITE_ERRORS)
async def create_tenant(
    spec: TenantSpec,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
) -> TenantChange:
    with session.begin():
        if session.get(Tenant, spec.name) is not None:
            raise conflict("name", f"tenant {spec.name!r} already exists")
        require_room(session, Tenant, MAX_TENANTS, "tenants")
        _check_enforced(session, spec)
        now = utcnow()
        tenant = Tenant(
            name=spec.name,
            description=spec.description,
            classifiers=[c.dump() for c in spec.classifiers],
            created_at=now,
            updated_at=now,
        )
        session.add(tenant)
        rollout_id, publications = _rollout(session, settings, f"tenant {spec.name} created")
        audit.record(
            session,
            principal,
            "tenant.create",
            kind="tenant",
            name=spec.name,
            tenant=spec.name,
            before=None,
            after=audit.snapshot(tenant_out(tenant)),
            rollout_id=rollout_id,
        )
    await ship(bus, publications, response, rollout_id)
    response.headers["Location"] = f"/api/v1/tenants/{spec.name}"
    response.headers["ETag"] = etags.etag_of(tenant_out(tenant))
    return _change(tenant, rollout_id)


@router.get("", response_model=list[TenantOut])
async def list_tenants(request: Request, principal: PrincipalDep, page: PageDep) -> Response:
    def build(session: Session) -> Answer:
        query = select(Tenant).order_by(Tenant.name)
        if principal.tenant is not None:
            query = query.where(Tenant.name == principal.tenant)
        items, headers = page.split([tenant_out(t) for t in session.scalars(query)], request)
        return Answer(_TENANTS.dump_json(items), headers)

    return (await cached(request, "tenants", (principal.tenant, request.url.query), build)).response()


@router.get("/{name}", response_model=TenantOut, responses=problem_responses(403, 404))
async def get_tenant(name: str, request: Request, principal: PrincipalDep) -> Response:
    require_tenant(principal, name, f"read tenant {name!r}")

    def build(session: Session) -> Answer:
        tenant = session.get(Tenant, name)
        if tenant is None:
            raise not_found("tenant", name)
        out = tenant_out(tenant)
        return Answer(_TENANT.dump_json(out), {"ETag": etags.etag_of(out)})

    return (await cached(request, "tenants", (name,), build)).response()


# How FastAPI would write the response models (read_cache.py keeps the bytes).
_TENANTS = TypeAdapter(list[TenantOut])
_TENANT = TypeAdapter(TenantOut)


@router.put(
    "/{name}",
    response_model=TenantChange,
    responses=problem_responses(400, 401, 403, 404, 412, 415, 422),
    summary="Replace a tenant's classifiers and description",
)
async def replace_tenant(
    name: str,
    spec: TenantSpec,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    if_match: etags.IfMatch = None,
) -> TenantChange:
    if spec.name != name:
        raise invalid([("name", f"must equal the name in the path ({name!r}); renaming is delete + create")])
    with session.begin():
        tenant = session.get(Tenant, name)
        if tenant is None:
            raise not_found("tenant", name)
        before = audit.snapshot(tenant_out(tenant))
        etags.check(if_match, etags.etag_of(tenant_out(tenant)), f"tenant {name!r}")
        _check_enforced(session, spec)
        tenant.classifiers = [c.dump() for c in spec.classifiers]
        tenant.description = spec.description
        tenant.updated_at = utcnow()
        rollout_id, publications = _rollout(session, settings, f"tenant {name} updated")
        audit.record(
            session,
            principal,
            "tenant.update",
            kind="tenant",
            name=name,
            tenant=name,
            before=before,
            after=audit.snapshot(tenant_out(tenant)),
            rollout_id=rollout_id,
        )
    await ship(bus, publications, response, rollout_id)
    response.headers["ETag"] = etags.etag_of(tenant_out(tenant))
    return _change(tenant, rollout_id)


@router.delete(
    "/{name}",
    response_model=TenantChange,
    responses=problem_responses(401, 403, 404, 409, 412),
    summary="Delete a tenant no rule names",
)
async def delete_tenant(
    name: str,
    response: Response,
    session: SessionDep,
    bus: BusDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    if_match: etags.IfMatch = None,
) -> TenantChange:
    with session.begin():
        tenant = session.get(Tenant, name)
        if tenant is None:
            raise not_found("tenant", name)
        etags.check(if_match, etags.etag_of(tenant_out(tenant)), f"tenant {name!r}")
        users = [f"rule {r}" for r in session.scalars(select(Rule.name).where(Rule.tenant == name).order_by(Rule.name))]
        # A stage it owns holds it too (the foreign key would refuse the delete with a 500).
        users += [
            f"stage {s}" for s in session.scalars(select(Stage.name).where(Stage.owner == name).order_by(Stage.name))
        ]
        if users:
            raise conflict("name", f"tenant {name!r} is used by {', '.join(users)}: delete them first")
        session.delete(tenant)
        rollout_id, publications = _rollout(session, settings, f"tenant {name} deleted")
        audit.record(
            session,
            principal,
            "tenant.delete",
            kind="tenant",
            name=name,
            tenant=name,
            before=audit.snapshot(tenant_out(tenant)),
            after=None,
            rollout_id=rollout_id,
        )
    await ship(bus, publications, response, rollout_id)
    return _change(tenant, rollout_id)
