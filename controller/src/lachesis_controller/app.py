"""The FastAPI application: routes, error handling, auth, tracing, and the background
tasks that live as long as it does: on every replica the telemetry consumer and the
leader lease, and on the leader only the singletons (bus consumers, reconciler, detour
applications, allocation loop; ha/lease.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import types
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from sqlalchemy.engine import Engine, make_url
from starlette.types import ASGIApp, Receive, Scope, Send

from lachesis_controller import __version__
from lachesis_controller.allocation import service as allocation_service
from lachesis_controller.allocation.service import loop_config
from lachesis_controller.api import (
    allocations,
    apps_declared_io,
    apps_tail_latency,
    apps_two_level,
    audit,
    devices,
    health,
    hosts,
    placements,
    policies,
    quiesce,
    rollouts,
    rules,
    stages,
    sustainability,
    telemetry,
    tenants,
    tokens,
    whoami,
)
from lachesis_controller.api import detours as detours_api
from lachesis_controller.api.auth import READ_METHODS, BearerAuthMiddleware, bearer_scheme
from lachesis_controller.api.read_cache import PostgresCounters, ReadCache, SharedLookup
from lachesis_controller.bus.agent_telemetry import TelemetryConsumer, TelemetryStore, replica_group
from lachesis_controller.bus.client import AGENT_STREAM_KINDS, GROUP, REDIS_DOWN, Bus, make_redis, redact_url
from lachesis_controller.bus.stream_events import StreamEvents
from lachesis_controller.config import Settings
from lachesis_controller.db import make_engine, make_sessionmaker, migrate, read_bind
from lachesis_controller.declared_io import loop as declared_io_loop
from lachesis_controller.detours import service as detour_service
from lachesis_controller.ha.lease import AdvisoryLease, Leadership, LocalLease, Singletons, lease_for
from lachesis_controller.observability.tracing import flush_spans, setup_tracing
from lachesis_controller.rollout import handlers as consumers
from lachesis_controller.rollout.intent import ensure_baseline
from lachesis_controller.rollout.reconciler import Reconciler, track_enrolment
from lachesis_controller.tail_latency import loop as tail_latency_loop
from lachesis_controller.validation import problems
from lachesis_controller.validation.body_limits import BodyLimitMiddleware

log = logging.getLogger(__name__)

# Longest a background task may take to notice the shutdown (a blocking XREADGROUP is 1 s).
SHUTDOWN_GRACE_S = 5.0


def prepare_database(engine: Engine) -> None:
    """Schema to the newest revision, then the shipped-intent baseline that lets the first
    rollout after start-up be rolled back (rollout/intent.py)."""
    migrate(engine)
    with make_sessionmaker(engine).begin() as session:
        ensure_baseline(session)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    engine = make_engine(settings.database_url)
    prepare_database(engine)
    sessions = make_sessionmaker(engine)
    redis = make_redis(settings.redis_url, settings.redis_max_connections)
    bus = Bus(redis)
    bus.events = StreamEvents(redis, AGENT_STREAM_KINDS, int(redis.connection_pool.connection_kwargs.get("db", 0)))
    app.state.engine, app.state.sessions, app.state.bus = engine, sessions, bus
    app.state.read_bind = read_bind(engine)
    counters = PostgresCounters(settings.database_url) if engine.dialect.name == "postgresql" else None
    if counters is not None:
        app.state.read_cache.counters = SharedLookup(counters)

    stop = asyncio.Event()
    app.state.telemetry = TelemetryStore()
    lease = lease_for(settings.database_url)
    # Alone on SQLite, the controller keeps the shared consumer group for telemetry; each of
    # several replicas reads every report in a group of its own.
    shared = isinstance(lease, LocalLease)
    telemetry_consumer = TelemetryConsumer(
        bus, app.state.telemetry, stop, group=GROUP if shared else replica_group(settings.replica_id)
    )
    tasks = [
        asyncio.create_task(bus.events.run(stop), name="stream notifications"),
        telemetry_consumer.start(),
        asyncio.create_task(track_enrolment(sessions, bus, settings.reconcile_interval_s, stop), name="enrolment"),
    ]
    app.state.leadership = Leadership(
        lease, _singletons(app, settings), stop, interval_s=settings.lease_interval_s, grace_s=SHUTDOWN_GRACE_S
    )
    await app.state.leadership.step()
    tasks.append(asyncio.create_task(app.state.leadership.run(), name="leadership"))
    log.info(
        "controller %s ready: database %s, redis %s, auth %s",
        __version__,
        make_url(settings.database_url).render_as_string(hide_password=True),
        redact_url(settings.redis_url),
        "on" if settings.api_token else "off",
    )
    if settings.api_token is None:
        log.warning(
            "auth is OFF (--insecure-no-auth): every caller of /api/v1 acts as an anonymous admin; "
            "set LACHESIS_API_TOKEN to require a bearer token"
        )
    try:
        yield
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        _, stuck = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
        for task in stuck:
            log.warning("background task %s did not stop within %s s", task.get_name(), SHUTDOWN_GRACE_S)
        if not shared:
            with contextlib.suppress(*REDIS_DOWN):
                await telemetry_consumer.forget()
        if isinstance(lease, AdvisoryLease):
            lease.dispose()
        if counters is not None:
            await app.state.read_cache.counters.close()
            await counters.close()
        await redis.aclose()
        engine.dispose()
        flush_spans()
        log.info("controller stopped")


def _singletons(app: FastAPI, settings: Settings) -> Singletons:
    """What only the leader runs, started each time this replica takes the lease and stopped
    (by `stop`) when it loses it."""

    def start(stop: asyncio.Event) -> list[asyncio.Task[None]]:
        sessions, bus = app.state.sessions, app.state.bus
        handlers = consumers.Handlers(
            sessions,
            bus,
            settings.rollout_timeout_s,
            # As for reads (_trace_changes_only): without an exporter an ack's span goes nowhere.
            span_acks=bool(settings.otel_console or settings.otlp_traces_endpoint),
        )
        reconciler = Reconciler(sessions, bus, settings.reconcile_interval_s, stop)
        tasks = consumers.start(handlers, stop)
        tasks.append(asyncio.create_task(reconciler.run(), name="reconciler"))
        tasks.append(
            detour_service.start(
                sessions,
                bus,
                stop,
                app.state.detours,
                rollout_timeout_s=settings.rollout_timeout_s,
                quiet_s=settings.readset_quiet_s,
            )
        )
        tasks.append(
            allocation_service.start(
                sessions,
                app.state.telemetry,
                stop,
                loop_config(settings),
                bus=bus,
                rollout_timeout_s=settings.rollout_timeout_s,
                bandwidths=(settings.allocation_storage_bytes_per_s, settings.allocation_cache_bytes_per_s),
            )
        )
        tasks.append(
            declared_io_loop.start(
                sessions,
                bus.redis,
                app.state.telemetry,
                stop,
                settings.reconcile_interval_s,
            )
        )
        tasks.append(
            tail_latency_loop.start(
                sessions,
                app.state.telemetry,
                stop,
                app.state.tail_latency,
                settings.reconcile_interval_s,
                bus=bus,
                rollout_timeout_s=settings.rollout_timeout_s,
            )
        )
        return tasks

    return start


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings.from_env()
    setup_tracing(console=settings.otel_console, otlp_endpoint=settings.otlp_traces_endpoint)
    app = FastAPI(
        title="Lachesis controller",
        version=__version__,
        summary="Control plane of the Lachesis software-defined storage system.",
        description=(
            "Tenants and rules go in; per-host desired state goes out over Redis as new "
            "generations, tracked as rollouts. Errors are RFC 9457 problem details."
        ),
        lifespan=lifespan,
        redoc_url=None,
        # FastAPI's own OpenTelemetry layer off: the controller's spans are the contrib
        # instrumentor's (below). The native layer stood aside for it (it finds it in the built
        # stack) but still wrapped every request, and with reads on a stack of their own it
        # would not find it there and trace them itself.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.state.detours = detour_service.DetourLog()
    app.state.tail_latency = tail_latency_loop.TailLatency()
    app.state.read_cache = ReadCache()
    problems.install(app)

    app.include_router(health.router)
    api = APIRouter(prefix="/api/v1", dependencies=[Depends(bearer_scheme)])
    for module in (
        hosts,
        tenants,
        rules,
        policies,
        rollouts,
        tokens,
        audit,
        whoami,
        allocations,
        placements,
        stages,
        devices,
        quiesce,
        telemetry,
        detours_api,
        sustainability,
        apps_declared_io,
        apps_two_level,
    ):
        api.include_router(module.router)
    api.include_router(apps_tail_latency.router)
    app.include_router(api)

    # Same origin as the API, so the dashboard's bearer token needs no CORS. A checkout
    # without a UI build still serves the API, and / then leads to the API docs instead.
    ui_dist = settings.ui_dir
    has_ui = (ui_dist / "index.html").is_file()
    if has_ui:
        app.mount("/ui", StaticFiles(directory=ui_dist, html=True), name="ui")

    @app.get("/", include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("/ui/" if has_ui else "/docs")

    # Added first, so it runs after authentication: a caller without a token learns nothing of the limits.
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes, max_depth=settings.max_body_depth)
    app.add_middleware(BearerAuthMiddleware, token=settings.api_token)
    untraced = app.build_middleware_stack
    FastAPIInstrumentor.instrument_app(
        app, excluded_urls="healthz,livez,readyz,metrics", exclude_spans=["receive", "send"]
    )
    if not (settings.otel_console or settings.otlp_traces_endpoint):
        _trace_changes_only(app, untraced)
    # FastAPI's documented way to change the schema it serves is to replace this method.
    app.openapi = _openapi_with_problem_media_type(app)  # type: ignore[method-assign]
    return app


class _ByMethod:
    """Reads to one middleware stack, everything else to the other (pure ASGI: one call, no
    wrapper around the response)."""

    def __init__(self, reads: ASGIApp, others: ASGIApp) -> None:
        self.reads, self.others = reads, others

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in READ_METHODS:
            await self.reads(scope, receive, send)
        else:
            await self.others(scope, receive, send)


def _trace_changes_only(app: FastAPI, untraced: Callable[[], ASGIApp]) -> None:
    """With no exporter a span leaves the process only as the trace id of a change's rollout
    (`traceparent` to the agents, from the caller's own when it sent one). A read makes no
    rollout, so its span went nowhere, and OpenTelemetry's server span and send wrapper were
    about a fifth of a cached read's CPU (docs/benchmarks/controller.md, seventh round):
    reads take the stack without them. Both stacks are built from the same middleware
    classes and routes; an exporter configured, every request is traced as before."""
    traced = app.build_middleware_stack

    def build(_app: FastAPI) -> ASGIApp:
        return _ByMethod(reads=untraced(), others=traced())

    app.build_middleware_stack = types.MethodType(build, app)  # type: ignore[method-assign]


def _openapi_with_problem_media_type(app: FastAPI) -> Any:
    """FastAPI documents every response as application/json; error responses are
    application/problem+json, so say so."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = original()
        for path_item in schema.get("paths", {}).values():
            for operation in path_item.values():
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if status[:1] in {"4", "5"} and "application/json" in content:
                        content[problems.PROBLEM_JSON] = content.pop("application/json")
                    if status[:1] in {"4", "5"}:
                        # FastAPI's default 422 body is not what the API sends.
                        content[problems.PROBLEM_JSON] = {"schema": {"$ref": "#/components/schemas/Problem"}}
        component_schemas = schema.get("components", {}).get("schemas", {})
        component_schemas.pop("HTTPValidationError", None)
        component_schemas.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    return openapi


def openapi_document() -> str:
    """The app's OpenAPI document as committed in api-schemas/openapi.json."""
    # Fixed settings: the document must not depend on the environment it is generated in.
    settings = Settings(
        database_url="sqlite://",
        redis_url="redis://127.0.0.1:6380/0",
        bind_host="127.0.0.1",
        bind_port=8080,
        api_token=None,
        insecure_no_auth=True,
        rollout_timeout_s=30.0,
        reconcile_interval_s=1.0,
    )
    return json.dumps(create_app(settings).openapi(), indent=2, sort_keys=True) + "\n"
