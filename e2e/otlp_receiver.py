"""A real OTLP/HTTP traces receiver for tests: what a collector sees, decoded with the
protocol's own protobuf definitions (PyPI `opentelemetry-proto`), kept in memory.

    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}   # exporters append /v1/traces
        ...
        receiver.spans()          # every span received so far, in arrival order

It answers as a collector does: 200 with an empty ExportTraceServiceResponse; 415 for a body
that is not protobuf, 400 for one that does not decode, 404 for another path. `requests`
counts the exports it took, `rejected` the ones it refused.
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True)
class Span:
    service: str
    resource: dict[str, Any]
    trace_id: str
    span_id: str
    # "" for a root span.
    parent_span_id: str
    name: str
    kind: int
    attributes: dict[str, Any]


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, which) if which else None


def _attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in kvs}


def decode(body: bytes) -> list[Span]:
    """The spans of one ExportTraceServiceRequest."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for s in scope_spans.spans:
                spans.append(
                    Span(
                        service=str(resource.get("service.name", "")),
                        resource=resource,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(),
                        name=s.name,
                        kind=s.kind,
                        attributes=_attributes(s.attributes),
                    )
                )
    return spans


class OtlpReceiver:
    """An OTLP/HTTP receiver on a free loopback port, serving from a thread of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self.requests = 0
        self.rejected = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != TRACES_PATH:
                    return self._answer(404, b"")
                if self.headers.get("Content-Type", "").split(";")[0].strip() != PROTOBUF:
                    return self._answer(415, b"")
                try:
                    if self.headers.get("Content-Encoding") == "gzip":
                        body = gzip.decompress(body)
                    spans = decode(body)
                except (DecodeError, OSError):
                    return self._answer(400, b"")
                with receiver._lock:
                    receiver._spans.extend(spans)
                    receiver.requests += 1
                self._answer(200, ExportTraceServiceResponse().SerializeToString())

            def _answer(self, status: int, body: bytes) -> None:
                if status != 200:
                    with receiver._lock:
                        receiver.rejected += 1
                self.send_response(status)
                self.send_header("Content-Type", PROTOBUF)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def endpoint(self) -> str:
        """The base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes it."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
