"""Which requests get a server span: with no exporter configured only the changes (their
rollouts hand the trace id to the agents), a read none; with an exporter every request.
Likewise an agent's ack: a span of its own with an exporter, none without (it would go
nowhere)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
from conftest import TENANT, FakeAgent, enroll
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lachesis_controller.app import create_app
from lachesis_controller.config import Settings


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The server spans finished from now on (the process's one provider; shut down after,
    so the processor it keeps records nothing more)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        create_app(Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1"}))  # installs the SDK provider
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def server_spans(exporter: InMemorySpanExporter) -> list[str]:
    return [span.name for span in exporter.get_finished_spans() if span.kind == trace.SpanKind.SERVER]


def exchange(client: TestClient) -> None:
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    assert client.get("/api/v1/tenants/web").status_code == 200
    assert client.get("/api/v1/tenants/nobody").status_code == 404
    assert client.put("/api/v1/tenants/web", json={**TENANT, "description": "d"}).status_code == 200


def test_without_an_exporter_only_changes_are_traced(settings: Settings, spans: InMemorySpanExporter) -> None:
    with TestClient(create_app(settings)) as client:
        exchange(client)
    assert server_spans(spans) == ["POST /api/v1/tenants", "PUT /api/v1/tenants/{name}"]


def test_with_an_exporter_every_request_is_traced(settings: Settings, spans: InMemorySpanExporter) -> None:
    with TestClient(create_app(dataclasses.replace(settings, otel_console=True))) as client:
        exchange(client)
    assert server_spans(spans) == [
        "POST /api/v1/tenants",
        "GET /api/v1/tenants/{name}",
        "GET /api/v1/tenants/{name}",
        "PUT /api/v1/tenants/{name}",
    ]


def ack_spans(exporter: InMemorySpanExporter) -> list[str]:
    return [span.name for span in exporter.get_finished_spans() if span.name == "agent ack"]


@pytest.mark.parametrize("exported", [False, True])
def test_an_ack_gets_a_span_only_with_an_exporter(
    settings: Settings, spans: InMemorySpanExporter, agents: Callable[[str], FakeAgent], exported: bool
) -> None:
    with TestClient(create_app(dataclasses.replace(settings, otel_console=exported))) as client:
        enroll(client, agents("host-a"))  # returns once the controller recorded the ack
    assert ack_spans(spans) == (["agent ack"] if exported else [])
