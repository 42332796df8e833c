"""Prometheus metrics served at /metrics (process-wide default registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ROLLOUTS_STARTED = Counter("lachesis_rollouts_started_total", "Rollouts created, by the kind of change", ["trigger"])
ROLLOUTS_COMPLETED = Counter("lachesis_rollouts_completed_total", "Rollouts that reached a final state", ["state"])
ACKS_RECEIVED = Counter("lachesis_acks_received_total", "Agent acks read from the agents' acks streams", ["status"])
REGISTRATIONS_RECEIVED = Counter(
    "lachesis_registrations_received_total", "Agent registrations read from the agents' registrations streams"
)
BUS_MESSAGES_DROPPED = Counter(
    "lachesis_bus_messages_dropped_total", "Bus messages dropped as invalid, by kind of stream", ["stream"]
)
BUS_MESSAGES_REJECTED = Counter(
    "lachesis_bus_messages_rejected_total",
    "Valid agent messages refused because they name another host than the stream's, or a "
    "host that is not enrolled, by kind of stream and why",
    ["stream", "why"],
)
BUS_STREAMS_READ = Counter(
    "lachesis_bus_streams_read_total",
    "Agent streams named in the consumers' XREADGROUPs, by kind of stream (every enrolled host's "
    "at each read without stream notifications, the announced ones with them)",
    ["stream"],
)
DESIRED_STATE_PUBLISHED = Counter(
    "lachesis_desired_state_published_total",
    "Desired-state messages written to Redis, by who wrote them",
    ["source"],
)
PUBLISH_FAILURES = Counter("lachesis_publish_failures_total", "Desired-state publishes that Redis refused or missed")
CONTROLLER_LEADER = Gauge(
    "lachesis_controller_leader",
    "1 while this controller replica holds the leader lease (runs the allocation loop, reconciler and consumers)",
)
TENANT_CURVE_ERROR = Gauge(
    "lachesis_tenant_curve_error",
    "A tenant's cache stage's measured hit ratio minus its curve's prediction at the installed size, "
    "once enough references were counted after the warm-up (allocation/curve_check.py)",
    ["tenant"],
)
TENANT_CURVE_OFF = Gauge(
    "lachesis_tenant_curve_off",
    "1 while a tenant's curve is off its stage's measured hit ratio by more than the tolerance, 0 while within",
    ["tenant"],
)
