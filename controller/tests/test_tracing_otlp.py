"""Spans leave the controller over OTLP/HTTP (protobuf) when the standard OTEL_EXPORTER_OTLP_*
variables say where: received by a real OTLP receiver (e2e/otlp_receiver.py) on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from opentelemetry import trace

from lachesis_controller.config import ConfigError, Settings
from lachesis_controller.observability.tracing import SERVICE_NAME, make_provider

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "e2e"))
from otlp_receiver import OtlpReceiver  # noqa: E402

OPEN = {"LACHESIS_INSECURE_NO_AUTH": "1"}


def test_no_endpoint_no_export() -> None:
    assert Settings.from_env(OPEN).otlp_traces_endpoint is None


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [
        # The generic variable is a base URL: the signal's path is appended.
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "http://collector:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/"}, "https://collector:4318/v1/traces"),
        # The traces variable is the whole URL, and wins.
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:9/t"},
            "http://b:9/t",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            "http://a:4318/v1/traces",
        ),
    ],
)
def test_endpoint_from_the_standard_variables(env: dict[str, str], endpoint: str) -> None:
    assert Settings.from_env({**OPEN, **env}).otlp_traces_endpoint == endpoint


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://collector/v1/traces"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
    ],
)
def test_bad_otlp_settings_name_the_variable(name: str, value: str) -> None:
    env = {**OPEN, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", name: value}
    with pytest.raises(ConfigError, match=name):
        Settings.from_env(env)


def test_spans_reach_an_otlp_receiver_with_their_parents() -> None:
    with OtlpReceiver() as receiver:
        settings = Settings.from_env({**OPEN, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint})
        provider = make_provider(otlp_endpoint=settings.otlp_traces_endpoint)
        tracer = provider.get_tracer("test")
        with tracer.start_as_current_span("POST /api/v1/policies/p/apply", kind=trace.SpanKind.SERVER) as rest:
            with tracer.start_as_current_span("agent ack"):
                pass
        # Batched: nothing need have left yet; the flush (as at shutdown) sends it all.
        assert provider.force_flush()
        provider.shutdown()
        spans = {s.name: s for s in receiver.spans()}
    assert set(spans) == {"POST /api/v1/policies/p/apply", "agent ack"}
    root, child = spans["POST /api/v1/policies/p/apply"], spans["agent ack"]
    assert root.trace_id == child.trace_id == format(rest.get_span_context().trace_id, "032x")
    assert root.parent_span_id == ""
    assert child.parent_span_id == root.span_id
    assert root.service == child.service == SERVICE_NAME
    assert root.kind == trace.SpanKind.SERVER.value + 1  # OTLP numbers kinds from UNSPECIFIED = 0
    assert receiver.rejected == 0
