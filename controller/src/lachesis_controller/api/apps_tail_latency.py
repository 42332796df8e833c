"""`GET /api/v1/apps/tail-latency`: each tail_latency stage with servers, its endpoint's
latency as the agents report it, the application's state (normal, forwarding, reclaiming)
and its forwarding log's bytes forwarded, held and reclaimed."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from lachesis_controller.api.deps import PrincipalDep, SessionDep
from lachesis_controller.schemas.tail_latency import TailLatencyOut, TailLatencyStageOut
from lachesis_controller.stages import store
from lachesis_controller.stages.forwarding import log_name, server_addr
from lachesis_controller.tail_latency import persist
from lachesis_controller.tail_latency.decide import StageState
from lachesis_controller.tail_latency.loop import endpoint_reports, log_report
from lachesis_controller.validation import problems
from lachesis_controller.validation.problems import problem_responses

router = APIRouter(prefix="/apps/tail-latency", tags=["apps"])


@router.get(
    "",
    response_model=TailLatencyOut,
    responses=problem_responses(401, 403, 404),
    summary="Tail-latency routing: per stage, its endpoint's latency, forwarding state and reclaim progress",
)
async def tail_latency(
    request: Request,
    session: SessionDep,
    principal: PrincipalDep,
    tenant: str | None = Query(default=None, max_length=63, description="Only this tenant's stages."),
) -> TailLatencyOut:
    leading: bool = request.app.state.leadership.leading
    with session.begin():
        declared = store.declared_stages(session)
        # A replica that does not lead runs no loop: it shows the decisions as stored, with
        # the latency and log reports it reads itself.
        states: dict[str, StageState] = request.app.state.tail_latency.states if leading else persist.load(session)
    mine = {
        n: s
        for n, s in declared.items()
        if s.get("kind") == "tail_latency" and s.get("servers") and principal.sees_tenant(s.get("owner") or "")
    }
    if tenant is not None and not any(s.get("owner") == tenant for s in mine.values()):
        raise problems.not_found("tail_latency stage with servers owned by tenant", tenant)
    out = []
    for name, s in sorted(mine.items()):
        if tenant is not None and s.get("owner") != tenant:
            continue
        st = states.get(name) or StageState(name, s.get("owner") or "", s["servers"][0])
        if not leading:
            telemetry = request.app.state.telemetry
            st.last = endpoint_reports(telemetry, s.get("hosts")).get(server_addr(s["servers"][0]))
            st.log = log_report(telemetry, log_name(name))
        e, lg = st.last, st.log
        moved = (lg.reclaimed_bytes + lg.held_bytes) if lg else 0
        out.append(
            TailLatencyStageOut(
                stage=name,
                tenant=st.tenant,
                endpoint=s["servers"][0],
                alpha=float(s.get("alpha", 2.0)),
                state=st.state,
                slow=e.slow if e else None,
                requests=e.requests if e else None,
                recent_us=e.recent_us if e else None,
                mean_us=e.mean_us if e else None,
                baseline_us=st.baseline_us,
                forwarded_to=st.forwarded_to,
                forwards=st.forwards,
                reclaims=st.reclaims,
                forwarded_bytes=lg.forwarded_bytes if lg else None,
                held_bytes=lg.held_bytes if lg else None,
                reclaimed_bytes=lg.reclaimed_bytes if lg else None,
                reclaim_progress=(lg.reclaimed_bytes / moved if moved else None) if lg else None,
            )
        )
    return TailLatencyOut(stages=out)
