"""Redis is a cache of the database: the API keeps working while Redis is away, and the
controller puts everything back once it returns empty."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TENANT, FakeAgent, RedisServer, enroll, make_settings, rule_body, wait_rollout
from fastapi.testclient import TestClient

from lachesis_controller.app import create_app


@pytest.fixture
def own_redis(tmp_path: Path, redis_server: RedisServer) -> RedisServer:
    # Its own server, because this test stops it; redis_server only checks one exists.
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server  # type: ignore[misc]
    server.stop()


def test_change_while_redis_is_down_is_delivered_when_it_returns(
    tmp_path: Path, own_redis: RedisServer, migrated_database: Path
) -> None:
    settings = make_settings(tmp_path, own_redis.url)
    with TestClient(create_app(settings)) as client:
        agent = FakeAgent(own_redis.url, "host-a")
        client.post("/api/v1/tenants", json=TENANT)
        enroll(client, agent)
        agent.close()

        own_redis.stop()
        created = client.post("/api/v1/rules", json=rule_body("r1"))
        assert created.status_code == 201, created.text
        rollout_id = created.json()["rollout_id"]
        assert client.get("/readyz").status_code == 503
        host = client.get("/api/v1/hosts/host-a").json()
        assert host["alive"] is None
        assert host["desired_generation"] == 2

        # Back, but empty: no desired keys, no streams, no consumer groups.
        own_redis.start()
        agent = FakeAgent(own_redis.url, "host-a")
        try:
            state = agent.wait_desired(2)
            # Same generation and rollout as decided while Redis was away: no new bump.
            assert state["rollout_id"] == rollout_id
            assert [r["name"] for r in state["rules"]] == ["r1"]
            assert client.get("/api/v1/hosts/host-a").json()["desired_generation"] == 2
            # The consumers recreated their group and read acks again.
            agent.ack(state)
            assert wait_rollout(client, rollout_id)["state"] == "succeeded"
            ready = client.get("/readyz")
            assert ready.status_code == 200, ready.text
            rollout = client.get(f"/api/v1/rollouts/{rollout_id}").json()
            assert rollout["traceparent"] == state["traceparent"]
        finally:
            agent.close()


def test_deleted_desired_key_is_republished(client: TestClient, agents) -> None:  # type: ignore[no-untyped-def]
    agent = agents("host-a")
    state = enroll(client, agent)
    agent.redis.delete("lachesis:agent:host-a:desired")
    again = agent.wait_desired(1)
    assert again == state
