"""OpenTelemetry: one trace per REST call, carried to the agents in `traceparent`.

Spans are recorded by the SDK so that each has a real trace id to hand on; they are
exported only when LACHESIS_OTEL_CONSOLE=1 (to stderr). Shipping them to a collector is
configuration to add when the project has one.
"""

from __future__ import annotations

import sys

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

_configured = False


def setup_tracing(*, console: bool = False) -> None:
    """Install the SDK tracer provider once per process (OpenTelemetry allows only one)."""
    global _configured
    if _configured:
        return
    _configured = True
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider(resource=Resource.create({"service.name": "lachesis-controller"}))
    if console:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)


tracer = trace.get_tracer("lachesis_controller")


def current_traceparent() -> str | None:
    """W3C traceparent of the active span, or None outside any recorded span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get("traceparent")


def context_from_traceparent(traceparent: str | None) -> Context | None:
    if not traceparent:
        return None
    return propagate.extract({"traceparent": traceparent})
