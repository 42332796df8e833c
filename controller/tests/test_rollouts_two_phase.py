"""Consistent rollouts: a change that moves flows goes out in two phases (quiesce + drain
everywhere, then install + resume), and a refusal, a timeout or a dead agent rolls every
host back. Fake agents on a real redis-server; the real agent is in e2e/."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from conftest import (
    TENANT,
    FakeAgent,
    enroll,
    enroll_host,
    now_rfc3339,
    pass_deadline,
    rule_body,
    wait_rollout,
    wait_until,
)
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from test_bus_contract import validator

from lachesis_controller.app import create_app
from lachesis_controller.config import Settings
from lachesis_controller.contracts.bus_base import parse_timestamp
from lachesis_controller.models import Host
from lachesis_controller.rollout.engine import moved_flows

Agents = Callable[[str], FakeAgent]
NEW_DETOURS = [{"what": "io", "to": {"kind": "stage", "target": "cache/web-2"}}]


def phase_ack(agent: FakeAgent, state: dict[str, Any], status: str = "applied", reason: str | None = None) -> None:
    """The ack a real agent sends for phase quiesce (drained) of `state`."""
    message = {
        "schema": "lachesis.ack/v1",
        "host_id": agent.host_id,
        "generation": state["generation"],
        "rollout_id": state["rollout_id"],
        "phase": "quiesce",
        "status": status,
        "reason": reason,
        "rules_installed": 1,
        "drained": 0,
        "acked_at": now_rfc3339(),
        "traceparent": state["traceparent"],
    }
    assert list(validator("ack").iter_errors(message)) == []
    agent.send("acks", message)


def wait_phase(agent: FakeAgent, generation: int, phase: str | None) -> dict[str, Any]:
    return wait_until(
        lambda: (d := agent.desired()) is not None and d["generation"] == generation and d.get("phase") == phase and d,
        what=f"{agent.host_id} generation {generation} phase {phase}",
    )


def setup_two_hosts(client: TestClient, agents: Agents) -> tuple[FakeAgent, FakeAgent]:
    """Two enrolled hosts running rule r1 at generation 2."""
    client.post("/api/v1/tenants", json=TENANT)
    a, b = agents("host-a"), agents("host-b")
    enroll(client, a)
    enroll(client, b)
    rollout_id = client.post("/api/v1/rules", json=rule_body("r1")).json()["rollout_id"]
    for agent in (a, b):
        state = agent.wait_desired(2)
        assert "phase" not in state  # adding a rule moves no existing flow: one phase
        agent.ack(state)
    assert wait_rollout(client, rollout_id)["state"] == "succeeded"
    return a, b


def move_r1(client: TestClient) -> str:
    body = rule_body("r1", detours=NEW_DETOURS)
    response = client.put("/api/v1/rules/r1", json=body)
    assert response.status_code == 200, response.text
    return response.json()["rollout_id"]


def test_moved_flows_are_the_changed_and_removed_rules_matches() -> None:
    m1, m2 = {"tenant": "web"}, {"tenant": "db", "ops": ["read"]}
    d1 = [{"what": "io", "to": {"kind": "stage", "target": "cache/a"}}]
    d2 = [{"what": "io", "to": {"kind": "stage", "target": "cache/b"}}]
    r = lambda name, match, detours, priority=10: {
        "name": name,
        "priority": priority,
        "match": match,
        "detours": detours,
    }  # noqa: E731
    assert moved_flows(None, [r("a", m1, d1)]) == []
    assert moved_flows([r("a", m1, d1)], [r("a", m1, d1), r("b", m2, d2)]) == []
    assert moved_flows([r("a", m1, d1)], [r("a", m1, d2)]) == [m1]
    assert moved_flows([r("a", m1, d1)], [r("a", m1, d1, priority=3)]) == [m1]
    assert moved_flows([r("a", m1, d1)], [r("a", m2, d1)]) == [m1, m2]
    assert moved_flows([r("a", m1, d1), r("b", m2, d2)], []) == [m1, m2]


def test_moving_a_flow_quiesces_everywhere_before_installing_anywhere(client: TestClient, agents: Agents) -> None:
    a, b = setup_two_hosts(client, agents)
    rollout_id = move_r1(client)

    q_a, q_b = wait_phase(a, 3, "quiesce"), wait_phase(b, 3, "quiesce")
    for q in (q_a, q_b):
        assert list(validator("desired-state").iter_errors(q)) == []
        assert q["quiesce"] == [rule_body()["match"]]
        assert q["rollout_id"] == rollout_id
    rollout = client.get(f"/api/v1/rollouts/{rollout_id}").json()
    assert rollout["phase"] == "quiesce"
    assert [t["phase"] for t in rollout["targets"]] == ["quiesce", "quiesce"]

    phase_ack(a, q_a)
    wait_until(lambda: client.get(f"/api/v1/rollouts/{rollout_id}").json()["targets"][0]["phase"] == "drained")
    # One host drained is not enough: nobody installs yet.
    assert a.desired()["phase"] == "quiesce" and b.desired()["phase"] == "quiesce"
    phase_ack(a, q_a)  # a repeated ack changes nothing

    phase_ack(b, q_b)
    installs = [wait_phase(agent, 3, None) for agent in (a, b)]
    for install in installs:
        assert install["rules"][0]["detours"] == NEW_DETOURS
    rollout = client.get(f"/api/v1/rollouts/{rollout_id}").json()
    assert rollout["phase"] == "install"
    assert all(t["phase"] == "install" and t["drained_at"] for t in rollout["targets"])
    # Each inbox holds both phases, in order.
    assert [(m["generation"], m.get("phase")) for m in a.inbox()][-2:] == [(3, "quiesce"), (3, None)]

    for agent, install in zip((a, b), installs, strict=True):
        agent.ack(install)
        agent.ack(install)  # re-sent: idempotent
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "succeeded"
    assert done["rolled_back_by"] is None


def assert_rolled_back(client: TestClient, rollout: dict[str, Any], agents: list[FakeAgent]) -> None:
    back_id = rollout["rolled_back_by"]
    assert back_id, rollout
    assert "rolled back" in rollout["reason"]
    back = client.get(f"/api/v1/rollouts/{back_id}").json()
    assert back["cause"] == f"rollback of rollout {rollout['id']}"
    assert rollout["restored"] == [{"kind": "rule", "name": "r1"}]
    assert [t["host_id"] for t in back["targets"]] == [a.host_id for a in agents]
    for agent in agents:
        state = wait_phase(agent, 4, "install")
        assert list(validator("desired-state").iter_errors(state)) == []
        assert state["restores"] == 2
        assert state["rollout_id"] == back_id
        # The rules of generation 2 again, before the change.
        assert state["rules"][0]["detours"] == rule_body()["detours"]
        agent.ack(state)
    assert wait_rollout(client, back_id)["state"] == "succeeded"


def test_a_refused_quiesce_rolls_every_host_back(client: TestClient, agents: Agents) -> None:
    a, b = setup_two_hosts(client, agents)
    rollout_id = move_r1(client)
    q_a, q_b = wait_phase(a, 3, "quiesce"), wait_phase(b, 3, "quiesce")
    phase_ack(a, q_a)
    phase_ack(b, q_b, status="rejected", reason="drain timed out after 10000 ms with 3 operation(s) in flight")
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "failed"
    assert "host-b" in done["reason"] and "drain timed out" in done["reason"]
    assert_rolled_back(client, done, [a, b])
    # The database says again what the hosts run: the change is gone from the API too.
    assert client.get("/api/v1/rules/r1").json()["detours"] == rule_body()["detours"]


def test_a_refused_install_rolls_every_host_back(client: TestClient, agents: Agents) -> None:
    a, b = setup_two_hosts(client, agents)
    rollout_id = move_r1(client)
    for agent in (a, b):
        phase_ack(agent, wait_phase(agent, 3, "quiesce"))
    a.ack(wait_phase(a, 3, None))
    b.ack(wait_phase(b, 3, None), status="rejected", reason="stage cache/web-2 does not exist")
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "failed"
    assert_rolled_back(client, done, [a, b])


def test_a_quiesce_without_acks_times_out_and_rolls_back(client: TestClient, agents: Agents) -> None:
    a, b = setup_two_hosts(client, agents)
    rollout_id = move_r1(client)
    phase_ack(a, wait_phase(a, 3, "quiesce"))
    wait_until(
        lambda: {t["host_id"]: t["phase"] for t in client.get(f"/api/v1/rollouts/{rollout_id}").json()["targets"]}
        == {"host-a": "drained", "host-b": "quiesce"},
        what="host-a's drain recorded",
    )
    # The deadline passes after host-a drained, before host-b answered.
    pass_deadline(client, rollout_id)
    done = wait_until(
        lambda: (r := client.get(f"/api/v1/rollouts/{rollout_id}").json())["rolled_back_by"] and r,
        what="the rollback",
    )
    assert done["state"] == "timed_out"
    assert "from: host-b (quiesce);" in done["reason"]
    assert_rolled_back(client, done, [a, b])


@pytest.fixture
def client_without_deadline(settings: Settings) -> Iterator[TestClient]:
    """A controller whose rollouts' deadline is a day away: only the event a test makes can
    end a rollout, however loaded the machine."""
    with TestClient(create_app(dataclasses.replace(settings, rollout_timeout_s=86400.0))) as c:
        yield c


def recorded_last_seen(db: Engine, host_id: str) -> datetime:
    """The host's last_seen as the controller stored it (UTC)."""
    with db.connect() as connection:
        at = connection.execute(select(Host.last_seen).where(Host.id == host_id)).scalar_one()
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def test_a_dead_agent_fails_the_rollout_before_the_deadline(
    client_without_deadline: TestClient, agents: Agents, db: Engine
) -> None:
    client = client_without_deadline
    a, b = setup_two_hosts(client, agents)
    a.heartbeat(generation=2, ttl_s=600)
    b.heartbeat(generation=2, ttl_s=600)
    # The controller's reconciler must have seen b alive (only a host seen alive can die): a
    # pass that read b's heartbeat recorded its time as b's last_seen.
    sent = parse_timestamp(json.loads(b.redis.get("lachesis:agent:host-b:heartbeat"))["sent_at"])
    wait_until(lambda: recorded_last_seen(db, "host-b") >= sent, what="the reconciler to read b's heartbeat")
    rollout_id = move_r1(client)
    phase_ack(a, wait_phase(a, 3, "quiesce"))
    # b stops heartbeating: its key goes, as when its TTL runs out (an event, not a clock: a
    # one-second TTL expired before a loaded machine's controller had seen b alive).
    b.redis.delete("lachesis:agent:host-b:heartbeat")
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "failed"
    assert "host-b stopped heartbeating" in done["reason"]
    assert_rolled_back(client, done, [a, b])


def test_redis_losing_a_phase_is_repaired_with_the_same_phase(client: TestClient, agents: Agents) -> None:
    a, b = setup_two_hosts(client, agents)
    rollout_id = move_r1(client)
    q_a = wait_phase(a, 3, "quiesce")
    a.redis.delete("lachesis:agent:host-a:desired")
    again = wait_phase(a, 3, "quiesce")
    assert again == q_a  # byte for byte the same message
    phase_ack(a, q_a)
    phase_ack(b, wait_phase(b, 3, "quiesce"))
    install = wait_phase(a, 3, None)
    a.redis.set("lachesis:agent:host-a:desired", json.dumps(q_a))  # an old copy
    assert wait_phase(a, 3, None) == install
    assert client.get(f"/api/v1/rollouts/{rollout_id}").json()["state"] == "pending"


def test_acks_of_many_hosts_complete_a_rollout(client: TestClient, agents: Agents) -> None:
    hosts = [agents(f"host-{i:02d}") for i in range(20)]
    for agent in hosts:
        enroll_host(client, agent.host_id)
        agent.register()
    for agent in hosts:
        agent.wait_desired(1)
    rollout_id = client.post("/api/v1/tenants", json=TENANT).json()["rollout_id"]
    # All acks land on the stream at once: they are handled in batches.
    for agent in hosts:
        agent.ack(agent.wait_desired(2))
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "succeeded"
    assert len(done["targets"]) == 20
