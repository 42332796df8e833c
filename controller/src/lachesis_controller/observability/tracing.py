"""OpenTelemetry: one trace per REST call, carried to the agents in `traceparent`.

Spans are recorded by the SDK so that each has a real trace id to hand on. They leave the
process over OTLP (HTTP/protobuf, batched) when the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT
is set (`Settings.otlp_traces_endpoint`), and to stderr when LACHESIS_OTEL_CONSOLE=1.
"""

from __future__ import annotations

import sys

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

SERVICE_NAME = "lachesis-controller"

_configured = False


def make_provider(*, console: bool = False, otlp_endpoint: str | None = None) -> TracerProvider:
    """A tracer provider exporting where asked. OTLP spans are batched, off the request path;
    the provider's shutdown (at exit) flushes them."""
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    if otlp_endpoint:
        # Headers, timeout and compression come from the OTEL_EXPORTER_OTLP_* variables.
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint)))
    if console:
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    return provider


def setup_tracing(*, console: bool = False, otlp_endpoint: str | None = None) -> None:
    """Install the SDK tracer provider once per process (OpenTelemetry allows only one)."""
    global _configured
    if _configured:
        return
    _configured = True
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    trace.set_tracer_provider(make_provider(console=console, otlp_endpoint=otlp_endpoint))


def flush_spans() -> None:
    """Send the spans still batched; at the app's shutdown, so none is lost when the process
    is stopped before the batch's next send."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()


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
