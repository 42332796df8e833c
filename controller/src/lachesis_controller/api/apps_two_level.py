"""`GET /api/v1/apps/two-level`: per tenant with a two-level cache (a level-1 cache stage with
`two_level`, its parent the server-level stage), the split in force (α, a1, a2) and each
level's size and hits as the agents report them, and with an exclusive server level the
blocks level 1 demoted to it and its hits on them."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request

from lachesis_controller.allocation.service import two_level_specs
from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.api.stages import shipped_by_host
from lachesis_controller.bus.agent_telemetry import HostStage
from lachesis_controller.models import CacheAllocation
from lachesis_controller.schemas.two_level import LevelOut, TwoLevelOut, TwoLevelTenantOut
from lachesis_controller.stages import store
from lachesis_controller.validation.problems import problem_responses

router = APIRouter(prefix="/apps/two-level", tags=["apps"])


def _level(
    level: Literal["host", "server"],
    name: str,
    reports: list[HostStage],
    shipped: dict[str, dict[str, dict[str, Any]]],
    exclusive: bool = False,
) -> LevelOut:
    mine = [r for r in reports if r.counters.name == name]
    sizes = [h[name]["size_bytes"] for h in shipped.values() if name in h]

    def total(field: str) -> int | None:
        values = [getattr(r.counters, field) for r in mine if getattr(r.counters, field) is not None]
        return sum(values) if values else None

    hits, misses = total("hits"), total("misses")
    reads = (hits or 0) + (misses or 0)
    return LevelOut(
        level=level,
        stage=name,
        shipped_bytes=max(sizes) if sizes else None,
        installed_bytes=total("installed_bytes"),
        hits=hits,
        misses=misses,
        hit_ratio=(hits or 0) / reads if reads else None,
        demoted_blocks=total("demoted_blocks"),
        demotion_hits=total("demotion_hits"),
        exclusive=exclusive,
        hosts=sorted(r.host_id for r in mine),
    )


@router.get(
    "",
    response_model=TwoLevelOut,
    responses=problem_responses(401, 403),
    summary="Two-level caches: the α split in force and each level's size and hits",
)
async def two_level(request: Request, session: SessionDep, principal: PrincipalDep) -> TwoLevelOut:
    reports: list[HostStage] = request.app.state.telemetry.stages()
    with session.begin():
        declared = store.declared_stages(session)
        shipped = shipped_by_host(session)
        current = session.get(CacheAllocation, "current")
        splits = {n: s.get("levels") for n, s in (current.tenants if current else {}).items()}
        out = []
        for tenant in sorted(two_level_specs(declared.values())):
            if not principal.sees_tenant(tenant):
                continue
            l1 = next(
                s for s in declared.values() if s["kind"] == "cache" and s.get("owner") == tenant and s.get("two_level")
            )
            split = splits.get(tenant) or {}
            levels = [_level("host", l1["name"], reports, shipped)]
            if l1.get("parent") in declared:
                parent = declared[l1["parent"]]
                levels.append(_level("server", parent["name"], reports, shipped, bool(parent.get("exclusive"))))
            out.append(
                TwoLevelTenantOut(
                    tenant=tenant,
                    alpha=split.get("alpha"),
                    host_bytes=split.get("host_bytes"),
                    server_bytes=split.get("server_bytes"),
                    predicted_hit_ratio=split.get("hit_ratio"),
                    predicted_bandwidth=split.get("bandwidth"),
                    levels=levels,
                )
            )
    return TwoLevelOut(tenants=out)
