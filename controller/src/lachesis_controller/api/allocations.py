"""Cache allocation: each tenant's current and proposed share of the cache, the point on its
hit-ratio curve that share sits on, and the guarantees that come first (allocation/)."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from lachesis_controller.allocation import (
    Curve,
    CurveError,
    FixedSize,
    Guarantee,
    GuaranteesInfeasible,
    TenantDemand,
    allocate,
    weighted_hit_rate,
)
from lachesis_controller.allocation.service import curve_checks, guarantee_of
from lachesis_controller.allocation.service import shares as tenant_shares
from lachesis_controller.api import etags
from lachesis_controller.api.changes import ship
from lachesis_controller.api.deps import BusDep, PrincipalDep, SessionDep, SettingsDep
from lachesis_controller.api.pagination import PageDep
from lachesis_controller.auth import audit
from lachesis_controller.auth.authz import require_tenant
from lachesis_controller.db import utcnow
from lachesis_controller.models import AllocationCurve, AllocationGuarantee, CacheAllocation, Tenant
from lachesis_controller.observability.tracing import current_traceparent
from lachesis_controller.rollout import engine as rollouts
from lachesis_controller.schemas.allocations import (
    AllocationSummary,
    BandwidthIn,
    CurveCheckOut,
    FixedSizeIn,
    GuaranteeBody,
    GuaranteeOut,
    MinHitRatioIn,
    ProposalOut,
    ProposalRequest,
    Summaries,
    TenantAllocationOut,
    TenantShare,
)
from lachesis_controller.validation.problems import FieldError, ProblemError, invalid, not_found, problem_responses

router = APIRouter(prefix="/allocations", tags=["allocations"])

CURRENT, PROPOSED = "current", "proposed"
# Bounds on one request's work: 5,000 tenants × 1,000 increments is the design point.
MAX_INCREMENTS = 100_000
MAX_CELLS = 20_000_000


def _guarantee(spec: MinHitRatioIn | BandwidthIn | FixedSizeIn) -> Guarantee:
    return guarantee_of(spec.kind, spec.model_dump())


_GUARANTEES_IN: dict[str, type[MinHitRatioIn | BandwidthIn | FixedSizeIn]] = {
    "min_hit_ratio": MinHitRatioIn,
    "bandwidth": BandwidthIn,
    "fixed_size": FixedSizeIn,
}


def _guarantee_in(row: AllocationGuarantee) -> MinHitRatioIn | BandwidthIn | FixedSizeIn:
    return _GUARANTEES_IN[row.kind].model_validate(row.spec)


def _summary(row: CacheAllocation) -> AllocationSummary:
    return AllocationSummary(
        state=row.state,
        capacity_bytes=row.capacity_bytes,
        epsilon_bytes=row.epsilon_bytes,
        method=row.method,
        utility=row.utility,
        upper_bound=row.upper_bound,
        optimal=row.optimal,
        computed_at=row.computed_at,
        computed_by=row.computed_by,
    )


def _tenant_names(session: Session) -> set[str]:
    return set(session.scalars(select(Tenant.name)))


@router.get("", response_model=list[TenantAllocationOut])
async def list_allocations(
    request: Request, response: Response, session: SessionDep, principal: PrincipalDep, page: PageDep
) -> list[TenantAllocationOut]:
    store = getattr(request.app.state, "telemetry", None)
    checks = curve_checks(store) if store is not None else {}
    with session.begin():
        rows = {r.state: r for r in session.scalars(select(CacheAllocation))}
        guarantees = {g.tenant: g for g in session.scalars(select(AllocationGuarantee))}
        names = _tenant_names(session) | set().union(*(r.tenants.keys() for r in rows.values()))
        out = []
        for name in sorted(names):
            if not principal.sees_tenant(name):
                continue
            shares = {s: rows[s].tenants.get(name) if s in rows else None for s in (CURRENT, PROPOSED)}
            g = guarantees.get(name)
            out.append(
                TenantAllocationOut(
                    tenant=name,
                    current=TenantShare.model_validate(shares[CURRENT]) if shares[CURRENT] else None,
                    proposed=TenantShare.model_validate(shares[PROPOSED]) if shares[PROPOSED] else None,
                    guarantee=_guarantee_in(g) if g else None,
                    curve_check=CurveCheckOut.model_validate(asdict(checks[name])) if name in checks else None,
                )
            )
    return page.cut(out, request, response)


@router.get("/summary", response_model=Summaries)
async def get_summary(response: Response, session: SessionDep) -> Summaries:
    with session.begin():
        rows = {r.state: r for r in session.scalars(select(CacheAllocation))}
        out = Summaries(
            current=_summary(rows[CURRENT]) if CURRENT in rows else None,
            proposed=_summary(rows[PROPOSED]) if PROPOSED in rows else None,
        )
    response.headers["ETag"] = etags.etag_of(out)
    return out


@router.post(
    "/proposals",
    response_model=ProposalOut,
    responses=problem_responses(400, 401, 403, 415, 422),
    summary="Compute a proposed allocation from supplied or stored curves",
)
async def propose(spec: ProposalRequest, session: SessionDep, principal: PrincipalDep) -> ProposalOut:
    require_tenant(principal, None, "propose a cache allocation")
    epsilon = spec.epsilon_bytes if spec.epsilon_bytes is not None else 0.001 * spec.capacity_bytes
    if epsilon > spec.capacity_bytes:
        raise invalid([("epsilon_bytes", "must not exceed capacity_bytes")])
    if spec.capacity_bytes / epsilon > MAX_INCREMENTS:
        raise invalid([("epsilon_bytes", f"more than {MAX_INCREMENTS:,} increments of the capacity; use a larger one")])
    with session.begin():
        tenants = _tenant_names(session)
        unknown = [
            (f"{field}.{name}" if field != "idle" else f"idle[{i}]", f"tenant {name!r} does not exist")
            for field, names in (
                ("curves", spec.curves or {}),
                ("guarantees", spec.guarantees or {}),
                ("idle", spec.idle),
            )
            for i, name in enumerate(names)
            if name not in tenants
        ]
        if unknown:
            raise invalid(unknown)
        now = utcnow()
        demands_curves: dict[str, tuple[Curve, float]] = {}
        for row in session.scalars(select(AllocationCurve).where(AllocationCurve.tenant.in_(tenants))):
            demands_curves[row.tenant] = (Curve.from_points(row.sizes, row.miss_ratios), row.weight)
        errors = []
        for name, c in (spec.curves or {}).items():
            try:
                demands_curves[name] = (Curve.from_points(c.sizes, c.miss_ratios), c.weight)
            except CurveError as e:
                errors.append((f"curves.{name}", str(e)))
                continue
            session.merge(
                AllocationCurve(
                    tenant=name,
                    sizes=c.sizes,
                    miss_ratios=c.miss_ratios,
                    weight=c.weight,
                    updated_at=now,
                )
            )
        if errors:
            raise invalid(errors)
        if not demands_curves:
            raise invalid([("curves", "no tenant has a curve: supply some (or let telemetry store them)")])
        guarantees: dict[str, Guarantee] = {
            g.tenant: _guarantee(_guarantee_in(g)) for g in session.scalars(select(AllocationGuarantee))
        }
        guarantees.update({n: _guarantee(g) for n, g in (spec.guarantees or {}).items()})
        missing = sorted(
            set(guarantees) - set(demands_curves) - {n for n, g in guarantees.items() if isinstance(g, FixedSize)}
        )
        if missing:
            raise invalid([(f"guarantees.{n}", "a hit-ratio guarantee needs the tenant's curve") for n in missing])
        idle = set(spec.idle)
        demands = {n: TenantDemand(c, w, guarantees.get(n), idle=n in idle) for n, (c, w) in demands_curves.items()}
        for n, g in guarantees.items():
            if n not in demands:  # a fixed size without a curve: a flat curve that never hits
                demands[n] = TenantDemand(Curve.from_points([0.0], [1.0]), 0.0, g, idle=n in idle)
        if len(demands) * min(spec.capacity_bytes / epsilon, MAX_INCREMENTS) > MAX_CELLS:
            raise invalid(
                [
                    (
                        "epsilon_bytes",
                        f"{len(demands)} tenants × {spec.capacity_bytes / epsilon:,.0f} increments "
                        f"is more than {MAX_CELLS:,} curve evaluations; use a larger increment",
                    )
                ]
            )
        try:
            result = allocate(demands, spec.capacity_bytes, epsilon=epsilon, method=spec.method)
        except GuaranteesInfeasible as e:
            raise ProblemError(
                422,
                str(e),
                kind="infeasible-guarantees",
                title="Guarantees cannot all be met",
                errors=[FieldError(field=f"guarantees.{u.tenant}", message=u.reason) for u in e.unmet],
                extra={"unmet": [{"tenant": u.tenant, "needs_bytes": u.needs, "reason": u.reason} for u in e.unmet]},
            ) from None
        shares = tenant_shares(demands, result)
        current = session.get(CacheAllocation, CURRENT)
        gain = None
        if current is not None:
            sizes = {n: float(s["size_bytes"]) for n, s in current.tenants.items()}
            gain = result.utility - weighted_hit_rate(demands, sizes)
        proposal = session.merge(
            CacheAllocation(
                state=PROPOSED,
                capacity_bytes=spec.capacity_bytes,
                epsilon_bytes=epsilon,
                method=spec.method,
                utility=result.utility,
                upper_bound=result.upper_bound,
                optimal=result.optimal,
                tenants=shares,
                computed_at=now,
                computed_by=principal.actor,
            )
        )
        summary = _summary(proposal)
        audit.record(
            session,
            principal,
            "allocation.propose",
            kind="allocation",
            name=PROPOSED,
            tenant=None,
            before=None,
            after={
                "utility": result.utility,
                "capacity_bytes": spec.capacity_bytes,
                "tenants": {n: s["size_bytes"] for n, s in shares.items()},
            },
            rollout_id=None,
        )
    return ProposalOut(
        summary=summary, tenants={n: TenantShare.model_validate(s) for n, s in shares.items()}, gain=gain
    )


@router.post(
    "/apply",
    response_model=AllocationSummary,
    responses=problem_responses(401, 403, 409, 412),
    summary="Make the proposed allocation the current one",
)
async def apply_proposal(
    response: Response,
    session: SessionDep,
    principal: PrincipalDep,
    bus: BusDep,
    settings: SettingsDep,
    if_match: etags.IfMatch = None,
) -> AllocationSummary:
    require_tenant(principal, None, "apply a cache allocation")
    with session.begin():
        proposed = session.get(CacheAllocation, PROPOSED)
        if proposed is None:
            raise ProblemError(
                409, "there is no proposed allocation: POST /api/v1/allocations/proposals first", kind="conflict"
            )
        etags.check(if_match, etags.etag_of(_summary(proposed)), "the proposed allocation")
        current = session.merge(
            CacheAllocation(
                state=CURRENT,
                capacity_bytes=proposed.capacity_bytes,
                epsilon_bytes=proposed.epsilon_bytes,
                method=proposed.method,
                utility=proposed.utility,
                upper_bound=proposed.upper_bound,
                optimal=proposed.optimal,
                tenants=dict(proposed.tenants),
                computed_at=proposed.computed_at,
                computed_by=proposed.computed_by,
            )
        )
        out = _summary(current)
        session.flush()
        # The agents size their caches from the desired state: a new generation carries it.
        rollout, publications = rollouts.start_rollout(
            session,
            cause="cache allocation applied",
            trigger="allocation",
            host_ids=rollouts.all_host_ids(session),
            now=utcnow(),
            timeout_s=settings.rollout_timeout_s,
            traceparent=current_traceparent(),
        )
        audit.record(
            session,
            principal,
            "allocation.apply",
            kind="allocation",
            name=CURRENT,
            tenant=None,
            before=None,
            after={"tenants": {n: s["size_bytes"] for n, s in proposed.tenants.items()}},
            rollout_id=rollout.id,
        )
    await ship(bus, publications, response, rollout.id)
    response.headers["ETag"] = etags.etag_of(out)
    return out


@router.get("/guarantees", response_model=list[GuaranteeOut])
async def list_guarantees(
    request: Request, response: Response, session: SessionDep, principal: PrincipalDep, page: PageDep
) -> list[GuaranteeOut]:
    with session.begin():
        rows = session.scalars(select(AllocationGuarantee).order_by(AllocationGuarantee.tenant))
        out = [
            GuaranteeOut(tenant=g.tenant, guarantee=_guarantee_in(g)) for g in rows if principal.sees_tenant(g.tenant)
        ]
    return page.cut(out, request, response)


@router.put(
    "/guarantees/{tenant}",
    response_model=GuaranteeOut,
    responses=problem_responses(400, 401, 403, 404, 415, 422),
    summary="Set a tenant's guarantee (min hit ratio, bandwidth SLA or fixed size)",
)
async def put_guarantee(tenant: str, body: GuaranteeBody, session: SessionDep, principal: PrincipalDep) -> GuaranteeOut:
    # A tenant's own token may not raise its own guarantee: it takes space from the others.
    require_tenant(principal, None, f"set the cache guarantee of tenant {tenant!r}")
    with session.begin():
        if session.get(Tenant, tenant) is None:
            raise not_found("tenant", tenant)
        before = session.get(AllocationGuarantee, tenant)
        before_snap = before.spec if before else None
        g = body.guarantee
        session.merge(
            AllocationGuarantee(
                tenant=tenant,
                kind=g.kind,
                spec=g.model_dump(mode="json"),
                updated_at=utcnow(),
            )
        )
        audit.record(
            session,
            principal,
            "guarantee.update",
            kind="guarantee",
            name=tenant,
            tenant=tenant,
            before=before_snap,
            after=g.model_dump(mode="json"),
            rollout_id=None,
        )
    return GuaranteeOut(tenant=tenant, guarantee=g)


@router.delete(
    "/guarantees/{tenant}",
    status_code=204,
    responses=problem_responses(401, 403, 404),
    summary="Remove a tenant's guarantee",
)
async def delete_guarantee(tenant: str, session: SessionDep, principal: PrincipalDep) -> Response:
    require_tenant(principal, None, f"remove the cache guarantee of tenant {tenant!r}")
    with session.begin():
        row = session.get(AllocationGuarantee, tenant)
        if row is None:
            raise not_found("guarantee of tenant", tenant)
        session.delete(row)
        audit.record(
            session,
            principal,
            "guarantee.delete",
            kind="guarantee",
            name=tenant,
            tenant=tenant,
            before=row.spec,
            after=None,
            rollout_id=None,
        )
    return Response(status_code=204)
