"""OTLP traces from the REST call to every agent: the controller and real agents export to a
real OTLP/HTTP receiver (`otlp_receiver.py`) named by the standard OTEL_EXPORTER_OTLP_ENDPOINT.
One `apply` of a policy is one trace holding the REST span, each agent's desired-state and
install spans under it, and each agent's ack with the controller's ack span under that; an IO
held by a controller detour (needs root and /dev/fuse) is one trace from the agent's detour
span to the controller's verdict span. Waits are counted polls of the receiver."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import HOST, Cluster, start_hosts, start_with_datapath
from otlp_receiver import OtlpReceiver, Span

POLICY = Path(__file__).resolve().parents[1] / "policies" / "examples" / "tenant-cache-isolation.yaml"
HOSTS = ("trace-a", "trace-b")
# A hang guard, counted: polls of the receiver before the test gives up.
POLLS = 1200


def _ancestors(span: Span, by_id: dict[str, Span]) -> list[Span]:
    """`span`'s parents up to its root, nearest first; fails on a parent that never came."""
    chain = []
    while span.parent_span_id:
        assert span.parent_span_id in by_id, (
            f"parent {span.parent_span_id} of {span.name!r} ({span.service}) not received"
        )
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def _agent(span: Span) -> str | None:
    return span.resource.get("host.id") if span.service == "lachesis-agent" else None


def _poll(receiver: OtlpReceiver, done: Callable[[list[Span]], bool]) -> list[Span]:
    """The spans received once `done` holds for them; a counted hang guard."""
    for _ in range(POLLS):
        spans = receiver.spans()
        if done(spans):
            return spans
        time.sleep(0.05)
    pytest.fail(f"spans incomplete after {POLLS} polls: {sorted((s.service, s.name, _agent(s) or '') for s in spans)}")


def _export_to(receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch) -> None:
    # Inherited by the controller and the agents, as an operator's environment would be.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    # Smaller batches sooner, so the polls are short (nothing asserts on it).
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")


def _complete(spans: list[Span]) -> bool:
    """Every host's install and ack went out, and the controller's span of each ack."""
    installs = {_agent(s) for s in spans if s.name == "install"}
    acks = [s for s in spans if s.name == "agent ack"]
    return installs >= set(HOSTS) and len(acks) >= len(HOSTS)


def test_one_apply_is_one_trace_from_the_rest_call_to_every_agent(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OtlpReceiver() as receiver:
        _export_to(receiver, monkeypatch)
        start_hosts(cluster, HOSTS)

        with cluster.api() as api:
            applied = api.post(
                "/api/v1/policies", content=POLICY.read_bytes(), headers={"content-type": "application/yaml"}
            )
            assert applied.status_code == 201, applied.text
        rollout = cluster.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
        assert rollout["state"] == "succeeded", rollout
        trace_id = rollout["traceparent"].split("-")[1]

        spans = _poll(receiver, lambda got: _complete([s for s in got if s.trace_id == trace_id]))
        assert receiver.rejected == 0
    in_trace = [s for s in spans if s.trace_id == trace_id]

    by_id = {s.span_id: s for s in in_trace}
    rest = [s for s in in_trace if s.service == "lachesis-controller" and not s.parent_span_id]
    assert [s.name for s in rest] == ["POST /api/v1/policies"], rest
    (rest_span,) = rest

    for host in HOSTS:
        installs = [s for s in in_trace if s.name == "install" and _agent(s) == host]
        assert len(installs) == 1, (host, installs)
        chain = _ancestors(installs[0], by_id)
        # install < the desired-state message span < ... < the REST call.
        assert chain[0].name == "desired state" and _agent(chain[0]) == host, chain
        assert chain[0].attributes["lachesis.rollout_id"] == rollout["id"]
        assert chain[-1] == rest_span, chain

        # The agent's ack span is the parent of the controller's span of that ack.
        acks = [s for s in in_trace if s.name == "ack" and _agent(s) == host]
        assert acks, host
        controller_acks = [s for s in in_trace if s.name == "agent ack" and by_id.get(s.parent_span_id) in acks]
        assert controller_acks and all(s.service == "lachesis-controller" for s in controller_acks), host
        assert all(_ancestors(a, by_id)[-1] == rest_span for a in acks)


def test_a_held_io_is_one_trace_from_the_agents_detour_to_the_controllers_verdict(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    with OtlpReceiver() as receiver:
        _export_to(receiver, monkeypatch)
        home = start_with_datapath(cluster, "64MiB")
        rule = {
            "name": "audit-writes",
            "priority": 10,
            "match": {"ops": ["write"], "path_prefix": "/d"},
            "detours": [{"what": "header", "to": {"kind": "controller", "target": "approve"}}],
        }
        with cluster.api() as api:
            created = api.post("/api/v1/rules", json=rule)
            assert created.status_code == 201, created.text
        assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=30)["state"] == "succeeded"
        (home / "mnt" / "d").mkdir()
        # Held until the controller's `approve` answers.
        (home / "mnt" / "d" / "f").write_bytes(b"x" * 4096)

        def verdict_under_detour(got: list[Span]) -> bool:
            detours = {s.span_id for s in got if s.name == "detour" and _agent(s) == HOST}
            return any(s.name == "detour verdict" and s.parent_span_id in detours for s in got)

        spans = _poll(receiver, verdict_under_detour)
        assert receiver.rejected == 0
    by_id = {s.span_id: s for s in spans}
    verdicts = [s for s in spans if s.name == "detour verdict"]
    for verdict in verdicts:
        detour = by_id[verdict.parent_span_id]
        assert (detour.name, _agent(detour)) == ("detour", HOST)
        assert verdict.service == "lachesis-controller" and verdict.trace_id == detour.trace_id
        assert detour.attributes["lachesis.rule"] == "audit-writes"
        assert detour.attributes["lachesis.app"] == "approve"
