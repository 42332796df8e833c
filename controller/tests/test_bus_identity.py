"""Agents speak on the bus only as themselves, and hosts can be
decommissioned. Agents with the Redis users the enrolment API hands out, against a real
redis-server: each may append only to its own streams (`lachesis:agent:{host}:*`), the
controller rejects what names another host and never hears a host that is not enrolled."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import TENANT, FakeAgent, assert_problem, enroll_host, make_settings, wait_rollout, wait_until
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Engine
from test_rollouts_two_phase import move_r1, phase_ack, setup_two_hosts, wait_phase

from lachesis_controller.app import create_app

NOPERM = redis.exceptions.NoPermissionError
KINDS = ("registrations", "acks", "telemetry", "detours")


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    yield r
    for user in r.execute_command("ACL", "USERS"):
        if user.startswith("agent-"):
            r.execute_command("ACL", "DELUSER", user)
    r.close()


@pytest.fixture
def own_agents(client: TestClient, admin: redis.Redis) -> Iterator[dict[str, FakeAgent]]:
    """host-a and host-b, enrolled, each on its own Redis user, registered and at generation 1."""
    made = {}
    for host in ("host-a", "host-b"):
        agent = FakeAgent(enroll_host(client, host), host)
        agent.register()
        agent.ack(agent.wait_desired(1))
        made[host] = agent
    wait_until(lambda: all(client.get(f"/api/v1/hosts/{h}").json().get("acked_generation") == 1 for h in made))
    yield made
    for agent in made.values():
        agent.close()


def rejected(client: TestClient, kind: str, why: str) -> float:
    """lachesis_bus_messages_rejected_total of one kind of stream and reason (0 if absent)."""
    pattern = rf'^lachesis_bus_messages_rejected_total\{{stream="{kind}",why="{why}"\}} (\S+)$'
    found = re.search(pattern, client.get("/metrics").text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_an_agent_appends_only_to_its_own_streams(own_agents: dict[str, FakeAgent]) -> None:
    a = own_agents["host-a"].redis
    for kind in KINDS:
        assert a.xadd(f"lachesis:agent:host-a:{kind}", {"msg": "{}"})
        with pytest.raises(NOPERM):
            a.xadd(f"lachesis:agent:host-b:{kind}", {"msg": "{}"})
        # The shared streams of earlier versions are closed to agents.
        with pytest.raises(NOPERM):
            a.xadd(f"lachesis:{kind}", {"msg": "{}"})
    # Appending is all: no trimming or deleting what it sent, no reading others'.
    with pytest.raises(NOPERM):
        a.xtrim("lachesis:agent:host-a:acks", maxlen=0)
    with pytest.raises(NOPERM):
        a.xrange("lachesis:agent:host-b:acks")


def test_a_forged_ack_does_not_complete_a_rollout(client: TestClient, own_agents: dict[str, FakeAgent]) -> None:
    a, b = own_agents["host-a"], own_agents["host-b"]
    rollout_id = client.post("/api/v1/tenants", json=TENANT).json()["rollout_id"]
    state_b = b.wait_desired(2)
    forged = b.ack_message(state_b)
    # host-a's credentials cannot put host-b's ack where host-b's acks go, nor on the old stream ...
    with pytest.raises(NOPERM):
        a.send("acks", forged, host_id="host-b")
    with pytest.raises(NOPERM):
        a.redis.xadd("lachesis:acks", {"msg": json.dumps(forged)})
    # ... and on its own stream the controller rejects it: the stream says who sent it.
    before = rejected(client, "acks", "another host")
    a.send("acks", forged)
    wait_until(lambda: rejected(client, "acks", "another host") > before, what="the forged ack rejected")
    a.ack(a.wait_desired(2))
    wait_until(
        lambda: [t["status"] for t in client.get(f"/api/v1/rollouts/{rollout_id}").json()["targets"]]
        == ["applied", "pending"],
        what="host-a's own ack recorded",
    )
    assert client.get(f"/api/v1/rollouts/{rollout_id}").json()["state"] == "pending"
    assert client.get("/api/v1/hosts/host-b").json()["acked_generation"] == 1

    b.ack(state_b)
    assert wait_rollout(client, rollout_id)["state"] == "succeeded"


def test_a_forged_registration_changes_nothing_and_creates_no_host(
    client: TestClient, own_agents: dict[str, FakeAgent], db: Engine
) -> None:
    a = own_agents["host-a"]
    with db.connect() as connection:
        host_b = connection.execute(text("SELECT * FROM hosts WHERE id = 'host-b'")).one()
    before = rejected(client, "registrations", "another host")
    for claimed in ("host-b", "ghost"):
        a.send("registrations", {**a.registration("6.6.6"), "host_id": claimed})
    a.register(agent_version="0.2.0")  # after the forgeries, on the same stream
    wait_until(lambda: client.get("/api/v1/hosts/host-a").json()["agent_version"] == "0.2.0")
    assert rejected(client, "registrations", "another host") == before + 2
    with db.connect() as connection:
        assert connection.execute(text("SELECT * FROM hosts WHERE id = 'host-b'")).one() == host_b
    assert [h["id"] for h in client.get("/api/v1/hosts").json()] == ["host-a", "host-b"]


def test_a_host_never_enrolled_cannot_appear(client: TestClient, admin: redis.Redis, agents) -> None:  # type: ignore[no-untyped-def]
    ghost = agents("ghost")
    # Even with full access to Redis: neither its own stream nor the old shared one is heard.
    ghost.register()
    admin.xadd("lachesis:registrations", {"msg": json.dumps(ghost.registration())})
    late = agents("late-host")
    enroll_host(client, "late-host")
    late.register()
    late.wait_desired(1)
    assert_problem(client.get("/api/v1/hosts/ghost"), 404)
    assert [h["id"] for h in client.get("/api/v1/hosts").json()] == ["late-host"]


def test_deleting_a_host_removes_everything_of_it_and_unblocks_its_rollouts(
    client: TestClient, own_agents: dict[str, FakeAgent], admin: redis.Redis, db: Engine
) -> None:
    a, b = own_agents["host-a"], own_agents["host-b"]
    b.heartbeat(generation=1)
    rollout_id = client.post("/api/v1/tenants", json=TENANT).json()["rollout_id"]
    a.ack(a.wait_desired(2))
    wait_until(
        lambda: [t["status"] for t in client.get(f"/api/v1/rollouts/{rollout_id}").json()["targets"]]
        == ["applied", "pending"],
        what="host-a's ack recorded",
    )

    response = client.delete("/api/v1/hosts/host-b")
    assert response.status_code == 204, response.text
    # The rollout no longer waits for it.
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "succeeded"
    assert [t["host_id"] for t in done["targets"]] == ["host-a"]
    assert_problem(client.get("/api/v1/hosts/host-b"), 404)
    assert [h["id"] for h in client.get("/api/v1/hosts").json()] == ["host-a"]
    # Its credential, Redis user, keys and streams are gone; its agent cannot get back in.
    with db.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM agent_credentials WHERE host_id = 'host-b'")).scalar() == 0
        assert connection.execute(text("SELECT count(*) FROM rollout_targets WHERE host_id = 'host-b'")).scalar() == 0
    assert "agent-host-b" not in admin.execute_command("ACL", "USERS")
    assert admin.keys("lachesis:agent:host-b:*") == []
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(b.url).ping()
    audit = client.get("/api/v1/audit", params={"resource_kind": "host"}).json()
    deleted = [e for e in audit if e["action"] == "host.delete"]
    assert len(deleted) == 1 and deleted[0]["resource_name"] == "host-b"
    # Later changes go to the hosts that remain only.
    later = client.post("/api/v1/tenants", json={**TENANT, "name": "api"}).json()["rollout_id"]
    a.ack(a.wait_desired(3))
    assert [t["host_id"] for t in wait_rollout(client, later)["targets"]] == ["host-a"]
    assert_problem(client.delete("/api/v1/hosts/host-b"), 404)


def test_deleting_a_host_is_for_admins_and_checks_the_id(tmp_path: Path, redis_url: str, admin: redis.Redis) -> None:
    settings = make_settings(tmp_path, redis_url, api_token="boot")
    with TestClient(create_app(settings), headers={"Authorization": "Bearer boot"}) as client:
        enroll_host(client, "host-a")
        operator = client.post("/api/v1/tokens", json={"name": "ops", "role": "operator"}).json()
        refused = client.delete("/api/v1/hosts/host-a", headers={"Authorization": f"Bearer {operator['token']}"})
        assert_problem(refused, 403)
        assert "agent-host-a" in admin.execute_command("ACL", "USERS")
        assert_problem(client.delete("/api/v1/hosts/nobody"), 404)
        body = assert_problem(client.delete("/api/v1/hosts/Bad%20Host"), 422)
        assert "host_id" in str(body)
        assert client.delete("/api/v1/hosts/host-a").status_code == 204
        assert "agent-host-a" not in admin.execute_command("ACL", "USERS")


def test_deleting_a_host_lets_a_two_phase_rollout_go_on_to_install(client: TestClient, agents) -> None:  # type: ignore[no-untyped-def]
    a, b = setup_two_hosts(client, agents)
    rollout_id = move_r1(client)
    phase_ack(a, wait_phase(a, 3, "quiesce"))
    wait_phase(b, 3, "quiesce")  # host-b never drains: the rollout holds at phase 1
    wait_until(lambda: client.get(f"/api/v1/rollouts/{rollout_id}").json()["targets"][0]["phase"] == "drained")

    assert client.delete("/api/v1/hosts/host-b").status_code == 204
    install = wait_phase(a, 3, None)  # the drained host that remains installs
    a.ack(install)
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "succeeded" and [t["host_id"] for t in done["targets"]] == ["host-a"]


def test_cli_deletes_a_host_and_refuses_an_unknown_one(settings, admin: redis.Redis) -> None:  # type: ignore[no-untyped-def]
    from test_cli import cli, serve

    for url in serve(settings):
        assert cli(url, "hosts", "enroll", "host-a").exit_code == 0
        deleted = cli(url, "hosts", "delete", "host-a")
        assert deleted.exit_code == 0, deleted.output
        assert "host host-a deleted" in deleted.stdout
        assert "agent-host-a" not in admin.execute_command("ACL", "USERS")
        unknown = cli(url, "hosts", "delete", "host-a")
        assert unknown.exit_code == 2
        assert "host-a" in unknown.output and "does not exist" in unknown.output


def test_a_host_deleted_while_the_reconciler_restores_users_stays_deleted(redis_url: str, admin: redis.Redis) -> None:
    """The reconciler's pass restores the ACL users Redis lost; a deletion that comes while
    that pass awaits Redis (here: scheduled at its ACL USERS and let run as far as it can
    before the pass goes on) must not have its user brought back by the pass."""
    import asyncio

    from lachesis_controller.bus.client import Bus, agent_user, make_redis

    async def scenario() -> None:
        bus = Bus(make_redis(redis_url))
        real = bus.redis.execute_command
        deletion: list[asyncio.Task[None]] = []

        async def delete() -> None:
            async with bus.lock:  # as api/hosts.py's delete_host
                bus.remove_enrolled("race-host")
                await bus.forget_host("race-host")

        async def spy(*args: object, **kwargs: object) -> object:
            if args[:2] == ("ACL", "USERS") and not deletion:
                deletion.append(asyncio.create_task(delete()))
                for _ in range(50):
                    await asyncio.sleep(0)
            return await real(*args, **kwargs)

        bus.redis.execute_command = spy  # type: ignore[method-assign]
        await bus.restore_agent_users([("race-host", "0" * 64)])
        await deletion[0]
        await bus.redis.aclose()

    asyncio.run(scenario())
    assert agent_user("race-host") not in admin.execute_command("ACL", "USERS")
