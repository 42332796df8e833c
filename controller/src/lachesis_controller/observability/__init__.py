"""The controller's own signals: OpenTelemetry tracing (`tracing.py`, traceparent carried on
bus messages) and Prometheus counters (`metrics.py`). Agent telemetry is `bus.agent_telemetry`."""
