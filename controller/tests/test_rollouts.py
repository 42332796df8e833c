"""The walking skeleton end to end inside one process: REST call -> database -> Redis ->
(fake) agent -> ack -> rollout state."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import (
    SCHEMAS,
    TENANT,
    FakeAgent,
    enroll,
    enroll_host,
    make_settings,
    rule_body,
    wait_rollout,
    wait_until,
)
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from sqlalchemy import text
from sqlalchemy.engine import Engine
from test_bus_contract import validator

from lachesis_controller.app import create_app
from lachesis_controller.bus.messages import Registration
from lachesis_controller.rollout.handlers import Handlers

Agents = Callable[[str], FakeAgent]
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


def desired_validator() -> Draft202012Validator:
    return validator("desired-state")


def test_registration_enrolls_host_with_generation_1(client: TestClient, agents: Agents) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    agent = agents("host-a")
    enroll_host(client, "host-a")
    agent.register(agent_version="0.1.0+test")
    state = agent.wait_desired(1)

    assert list(desired_validator().iter_errors(state)) == []
    assert state["host_id"] == "host-a"
    assert state["tenants"] == [{"name": "web", "classifiers": TENANT["classifiers"]}]
    assert state["rules"] == []
    assert agent.inbox() == [state]

    host = client.get("/api/v1/hosts/host-a").json()
    assert host["agent_version"] == "0.1.0+test"
    assert host["capabilities"]["cpus"] == 2
    assert host["desired_generation"] == 1
    assert host["acked_generation"] == 0
    assert host["alive"] is False  # no heartbeat yet

    rollout = client.get(f"/api/v1/rollouts/{state['rollout_id']}").json()
    assert rollout["cause"] == "host host-a enrolled"
    assert rollout["state"] == "pending"
    assert rollout["traceparent"] == state["traceparent"]
    assert [t["host_id"] for t in rollout["targets"]] == ["host-a"]

    agent.ack(state)
    done = wait_rollout(client, rollout["id"])
    assert done["state"] == "succeeded"
    assert done["targets"][0]["status"] == "applied"
    assert done["targets"][0]["acked_at"] is not None
    assert client.get("/api/v1/hosts/host-a").json()["acked_generation"] == 1


def test_registering_again_keeps_the_generation(client: TestClient, agents: Agents) -> None:
    agent = agents("host-a")
    enroll(client, agent)
    agent.register(agent_version="0.2.0")
    wait_until(lambda: client.get("/api/v1/hosts/host-a").json()["agent_version"] == "0.2.0")
    host = client.get("/api/v1/hosts/host-a").json()
    assert host["desired_generation"] == 1
    assert len(agent.inbox()) == 1


def test_heartbeat_makes_a_host_alive(client: TestClient, agents: Agents) -> None:
    agent = agents("host-a")
    enroll(client, agent)
    before = client.get("/api/v1/hosts").json()[0]
    assert before["alive"] is False
    agent.heartbeat(generation=1)
    after = client.get("/api/v1/hosts").json()[0]
    assert after["alive"] is True
    assert after["last_seen"] >= before["last_seen"]


def test_rule_change_ships_a_new_generation_and_the_ack_completes_it(client: TestClient, agents: Agents) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    a, b = agents("host-a"), agents("host-b")
    enroll(client, a)
    enroll(client, b)

    created = client.post("/api/v1/rules", json=rule_body("r1", priority=20)).json()
    client.post("/api/v1/rules", json=rule_body("r0", priority=20, match={}))
    rollout = client.get(f"/api/v1/rollouts/{created['rollout_id']}").json()
    assert rollout["state"] == "pending"
    assert rollout["cause"] == "rule r1 created"
    assert TRACEPARENT.match(rollout["traceparent"])
    assert [(t["host_id"], t["generation"], t["status"]) for t in rollout["targets"]] == [
        ("host-a", 2, "pending"),
        ("host-b", 2, "pending"),
    ]

    state = a.wait_desired(3)
    assert list(desired_validator().iter_errors(state)) == []
    # Sorted by priority, then name; the whole state every time.
    assert [r["name"] for r in state["rules"]] == ["r0", "r1"]
    assert state["rules"][1] == {k: rule_body("r1", priority=20)[k] for k in ("name", "priority", "match", "detours")}
    assert [m["generation"] for m in a.inbox()] == [1, 2, 3]
    second = a.inbox()[1]
    assert second["rollout_id"] == rollout["id"]
    assert second["traceparent"] == rollout["traceparent"]

    # Each host acks the generation that carried r1.
    a.ack(second)
    b.ack(b.inbox()[1])
    done = wait_rollout(client, rollout["id"])
    assert done["state"] == "succeeded"
    assert done["completed_at"] is not None
    assert {t["status"] for t in done["targets"]} == {"applied"}
    hosts = {h["id"]: h for h in client.get("/api/v1/hosts").json()}
    assert hosts["host-a"]["desired_generation"] == 3
    assert hosts["host-a"]["acked_generation"] == 2


def test_rule_for_listed_hosts_only_targets_them(client: TestClient, agents: Agents) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    a, b = agents("host-a"), agents("host-b")
    enroll(client, a)
    enroll(client, b)
    created = client.post("/api/v1/rules", json=rule_body("r1", hosts=["host-b"])).json()
    rollout = client.get(f"/api/v1/rollouts/{created['rollout_id']}").json()
    assert [t["host_id"] for t in rollout["targets"]] == ["host-b"]
    assert b.wait_desired(2)["rules"][0]["name"] == "r1"
    assert a.desired()["generation"] == 1  # r1 never reached host-a
    assert client.get("/api/v1/hosts/host-a").json()["desired_generation"] == 1


def test_rejection_fails_the_rollout_with_the_reason(client: TestClient, agents: Agents) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    agent = agents("host-a")
    enroll(client, agent)
    rollout_id = client.post("/api/v1/rules", json=rule_body("r1")).json()["rollout_id"]
    state = agent.wait_desired(2)
    agent.ack(state, status="rejected", reason="stage cache/web does not exist")
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "failed"
    assert "host-a" in done["reason"] and "cache/web does not exist" in done["reason"]
    assert done["targets"][0]["status"] == "rejected"
    assert client.get("/api/v1/hosts/host-a").json()["acked_generation"] == 1


def test_applying_a_newer_generation_completes_older_rollouts(client: TestClient, agents: Agents) -> None:
    agent = agents("host-a")
    enroll(client, agent)
    first = client.post("/api/v1/tenants", json=TENANT).json()["rollout_id"]
    second = client.post("/api/v1/tenants", json={"name": "db", "classifiers": []}).json()["rollout_id"]
    latest = agent.wait_desired(3)
    # The agent skipped generation 2 (it only read the latest desired key) ...
    agent.ack(latest)
    assert wait_rollout(client, second)["state"] == "succeeded"
    older = wait_rollout(client, first)
    assert older["state"] == "succeeded"
    assert "superseded" in older["targets"][0]["reason"]
    # ... and its refusal of the stale generation afterwards changes nothing.
    agent.ack(agent.inbox()[1], status="rejected", reason="stale generation 2: this agent holds generation 3")
    wait_until(lambda: client.get(f"/api/v1/rollouts/{first}").json()["targets"][0]["acked_at"])
    assert client.get(f"/api/v1/rollouts/{first}").json()["state"] == "succeeded"


def test_rollout_without_acks_times_out(tmp_path: Path, redis_url: str, agents: Agents) -> None:
    settings = make_settings(tmp_path, redis_url, rollout_timeout_s=0.5)
    with TestClient(create_app(settings)) as client:
        agent = agents("host-a")
        enroll_host(client, "host-a")
        agent.register()
        state = agent.wait_desired(1)
        done = wait_rollout(client, state["rollout_id"])
        assert done["state"] == "timed_out"
        assert "host-a" in done["reason"]
        assert done["targets"][0]["status"] == "pending"


def test_invalid_bus_messages_are_dropped_and_consumers_go_on(client: TestClient, agents: Agents, db: Engine) -> None:
    agent = agents("host-a")
    agent.send("registrations", "{not json")
    agent.send("registrations", {"schema": "lachesis.registration/v1", "host_id": "Bad Host"})
    agent.redis.xadd("lachesis:agent:host-a:registrations", {"other": "field"})
    agent.send("acks", {"schema": "lachesis.ack/v1"})
    agent.send("acks", (SCHEMAS / "fixtures/ack/invalid-status.json").read_text())
    # An ack of another host (the fixture's) on this host's stream is refused.
    agent.send("acks", (SCHEMAS / "fixtures/ack/valid-applied.json").read_text())
    enroll(client, agent)
    assert [h["id"] for h in client.get("/api/v1/hosts").json()] == ["host-a"]

    def all_acked() -> bool:
        for stream in ("lachesis:agent:host-a:registrations", "lachesis:agent:host-a:acks"):
            if agent.redis.xpending(stream, "controller")["pending"] != 0:
                return False
        return True

    wait_until(all_acked, what="every entry acked")
    with db.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM hosts")).scalar() == 1
    metrics = client.get("/metrics").text
    assert 'lachesis_bus_messages_dropped_total{stream="registrations"}' in metrics


def test_registration_written_before_the_controller_started_is_read(
    settings,
    agents: Agents,  # type: ignore[no-untyped-def]
) -> None:
    agent = agents("early-host")
    agent.register()
    with TestClient(create_app(settings)) as client:
        enroll_host(client, "early-host")
        state = agent.wait_desired(1)
        assert client.get("/api/v1/hosts/early-host").json()["desired_generation"] == 1
        assert state["host_id"] == "early-host"


def test_host_that_outlived_the_database_continues_its_numbering(client: TestClient, agents: Agents) -> None:
    # The agent holds generation 7 from an earlier controller whose database is gone.
    agent = agents("host-a")
    agent.heartbeat(generation=7)
    enroll_host(client, "host-a")
    agent.register()
    state = agent.wait_desired(8)
    assert client.get("/api/v1/hosts/host-a").json()["desired_generation"] == 8
    assert state["rules"] == []


@pytest.mark.parametrize("path", ["/api/v1/rollouts", "/api/v1/rollouts?limit=1"])
def test_rollout_list_is_newest_first(client: TestClient, path: str) -> None:
    ids = [
        client.post("/api/v1/tenants", json={"name": f"t{i}", "classifiers": []}).json()["rollout_id"] for i in range(3)
    ]
    listed = [r["id"] for r in client.get(path).json()]
    assert listed == list(reversed(ids))[: len(listed)]


def test_traceparent_continues_the_callers_trace(client: TestClient, agents: Agents) -> None:
    agent = agents("host-a")
    enroll(client, agent)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    created = client.post(
        "/api/v1/tenants", json=TENANT, headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    ).json()
    rollout = client.get(f"/api/v1/rollouts/{created['rollout_id']}").json()
    assert rollout["traceparent"].split("-")[1] == trace_id
    assert agent.wait_desired(2)["traceparent"] == rollout["traceparent"]


def test_rollout_list_shows_each_rollout_as_its_own_read_does(client: TestClient, agents: Agents, db: Engine) -> None:
    # The list reads rows, one rollout reads objects: both must tell the same, targets
    # included, and an overdue rollout the reconciler has not marked yet reads as timed out.
    client.post("/api/v1/tenants", json=TENANT)
    a, b = agents("host-a"), agents("host-b")
    enroll(client, a)
    enroll(client, b)
    acked = client.post("/api/v1/rules", json=rule_body("r1")).json()["rollout_id"]
    a.ack(a.wait_desired(2))
    wait_until(lambda: client.get(f"/api/v1/rollouts/{acked}").json()["targets"][0]["acked_at"])
    overdue = client.post("/api/v1/rules", json=rule_body("r2")).json()["rollout_id"]
    with db.begin() as connection:
        connection.execute(
            text("UPDATE rollouts SET deadline = :past WHERE id = :id"), {"past": "2000-01-01 00:00:00", "id": overdue}
        )
    listed = client.get("/api/v1/rollouts").json()
    assert [r["id"] for r in listed[:2]] == [overdue, acked]
    assert [t["host_id"] for t in listed[1]["targets"]] == ["host-a", "host-b"]
    assert listed[1]["targets"][0]["acked_at"] is not None
    for rollout in listed[1:]:
        assert rollout == client.get(f"/api/v1/rollouts/{rollout['id']}").json()
    assert listed[0]["state"] == "timed_out"
    assert "host-a" in listed[0]["reason"] and "host-b" in listed[0]["reason"]


def test_registrations_read_together_enrol_their_hosts_in_one_rollout(client: TestClient, agents: Agents) -> None:
    """A batch of registrations (one read of the streams) is one transaction: the new hosts
    share one rollout, a host registered twice keeps its last registration, and a host that
    is not enrolled is refused without keeping the others out."""
    client.post("/api/v1/tenants", json=TENANT)
    for host in ("host-b", "host-c", "host-d"):
        enroll_host(client, host)
    regs = [
        Registration.model_validate(agents(host).registration(agent_version=version))
        for host, version in (("host-b", "0.1.0"), ("host-c", "0.1.0"), ("host-x", "0.1.0"), ("host-d", "0.1.0"))
    ]
    regs.append(Registration.model_validate(agents("host-b").registration(agent_version="0.2.0")))
    app = client.app
    handlers = Handlers(app.state.sessions, app.state.bus, 30.0)  # type: ignore[attr-defined]
    assert client.portal is not None
    client.portal.call(handlers.registrations, regs)

    hosts = {h["id"]: h for h in client.get("/api/v1/hosts").json()}
    assert sorted(hosts) == ["host-b", "host-c", "host-d"]
    assert hosts["host-b"]["agent_version"] == "0.2.0"
    assert {h["desired_generation"] for h in hosts.values()} == {1}
    states = [agents(host).wait_desired(1) for host in ("host-b", "host-c", "host-d")]
    assert len({s["rollout_id"] for s in states}) == 1
    rollout = client.get(f"/api/v1/rollouts/{states[0]['rollout_id']}").json()
    assert rollout["cause"] == "3 hosts enrolled: host-b, host-c, host-d"
