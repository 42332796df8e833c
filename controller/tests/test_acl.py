"""Per-agent Redis users (security): each agent reads only its own keys and appends only to
its own agent streams (test_bus_identity.py: what the controller does with them). Against a
real redis-server."""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis
from conftest import assert_problem, make_settings, wait_until
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Engine

from lachesis_controller.app import create_app

NOPERM = redis.exceptions.NoPermissionError


def enroll(client: TestClient, host_id: str) -> redis.Redis:
    response = client.post(f"/api/v1/hosts/{host_id}/enrollment")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["redis_user"] == f"agent-{host_id}"
    return redis.Redis.from_url(body["redis_url"], decode_responses=True)


@pytest.fixture
def seeded(redis_url: str) -> redis.Redis:
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    for host in ("host-a", "host-b"):
        admin.set(f"lachesis:agent:{host}:desired", f"state of {host}")
        admin.xadd(f"lachesis:agent:{host}:inbox", {"msg": f"state of {host}"})
    admin.xadd("lachesis:acks", {"msg": "an ack of someone"})
    yield admin
    for host in ("host-a", "host-b"):
        admin.execute_command("ACL", "DELUSER", f"agent-{host}")
    admin.close()


def test_an_agent_reads_its_own_keys_and_not_another_agents(client: TestClient, seeded: redis.Redis) -> None:
    a = enroll(client, "host-a")
    enroll(client, "host-b")
    # What the agent's control path does (runner.rs) works ...
    assert a.get("lachesis:agent:host-a:desired") == "state of host-a"
    assert a.xrevrange("lachesis:agent:host-a:inbox", count=1)[0][1] == {"msg": "state of host-a"}
    assert a.xread({"lachesis:agent:host-a:inbox": "0-0"}, count=1)
    assert a.set("lachesis:agent:host-a:heartbeat", "{}", ex=15)
    for kind in ("registrations", "acks", "telemetry"):  # only its own: test_bus_identity.py
        assert a.xadd(f"lachesis:agent:host-a:{kind}", {"msg": "{}"})
    # ... and nothing of another agent's, or of the controller's.
    with pytest.raises(NOPERM):
        a.get("lachesis:agent:host-b:desired")
    with pytest.raises(NOPERM):
        a.xread({"lachesis:agent:host-b:inbox": "0-0"})
    with pytest.raises(NOPERM):
        a.get("lachesis:agent:host-b:heartbeat")
    with pytest.raises(NOPERM):
        a.xrange("lachesis:acks")
    # It cannot forge desired state, not even its own, nor delete or list keys.
    with pytest.raises(NOPERM):
        a.set("lachesis:agent:host-a:desired", "forged")
    with pytest.raises(NOPERM):
        a.xadd("lachesis:agent:host-a:inbox", {"msg": "forged"})
    with pytest.raises(NOPERM):
        a.set("lachesis:agent:host-b:heartbeat", "{}")
    with pytest.raises(NOPERM):
        a.delete("lachesis:agent:host-a:desired")
    with pytest.raises(NOPERM):
        a.keys("*")
    with pytest.raises(NOPERM):
        a.execute_command("ACL", "LIST")
    with pytest.raises(NOPERM):
        a.publish("lachesis:anything", "x")
    assert seeded.get("lachesis:agent:host-a:desired") == "state of host-a"
    a.close()


def test_only_the_hash_of_the_secret_is_kept_and_reenrolling_rotates_it(
    client: TestClient, seeded: redis.Redis, db: Engine
) -> None:
    first = client.post("/api/v1/hosts/host-a/enrollment").json()
    secret = urlsplit(first["redis_url"]).password
    assert secret and len(secret) >= 32
    digest = hashlib.sha256(secret.encode()).hexdigest()
    with db.connect() as connection:
        stored = connection.execute(
            text("SELECT secret_sha256 FROM agent_credentials WHERE host_id = 'host-a'")
        ).scalar()
    assert stored == digest
    user = seeded.execute_command("ACL", "GETUSER", "agent-host-a")
    passwords = user["passwords"]
    assert passwords == [digest]  # Redis holds the hash, not the secret

    second = client.post("/api/v1/hosts/host-a/enrollment").json()
    assert second["redis_url"] != first["redis_url"]
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(first["redis_url"]).ping()
    assert redis.Redis.from_url(second["redis_url"]).ping()
    audit = client.get("/api/v1/audit", params={"resource_kind": "host"}).json()
    assert [e["action"] for e in audit] == ["host.enroll", "host.enroll"]
    assert secret not in str(audit)


def test_redis_losing_the_users_gets_them_back(client: TestClient, seeded: redis.Redis) -> None:
    a = enroll(client, "host-a")
    seeded.execute_command("ACL", "DELUSER", "agent-host-a")  # as after a Redis restart
    assert "agent-host-a" not in seeded.execute_command("ACL", "USERS")

    def back() -> bool:
        try:
            return bool(a.ping())
        except redis.exceptions.AuthenticationError:
            return False

    wait_until(back, what="the reconciler to recreate the user")
    with pytest.raises(NOPERM):
        a.get("lachesis:agent:host-b:desired")


def test_bad_host_id_is_422_and_changes_nothing(client: TestClient, seeded: redis.Redis) -> None:
    users = seeded.execute_command("ACL", "USERS")
    body = assert_problem(client.post("/api/v1/hosts/Not%20A%20Host/enrollment"), 422)
    assert "host_id" in str(body)
    assert seeded.execute_command("ACL", "USERS") == users


def test_only_an_admin_may_enroll(tmp_path: Path, redis_url: str, seeded: redis.Redis) -> None:
    settings = make_settings(tmp_path, redis_url, api_token="boot")
    with TestClient(create_app(settings), headers={"Authorization": "Bearer boot"}) as client:
        operator = client.post("/api/v1/tokens", json={"name": "ops", "role": "operator"}).json()
        refused = client.post(
            "/api/v1/hosts/host-a/enrollment", headers={"Authorization": f"Bearer {operator['token']}"}
        )
        assert_problem(refused, 403)
        assert "agent-host-a" not in seeded.execute_command("ACL", "USERS")
        assert client.post("/api/v1/hosts/host-a/enrollment").status_code == 201


def test_cli_enrolls_into_a_private_file_and_refuses_a_bad_host(settings, seeded: redis.Redis, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from test_cli import cli, serve

    for url in serve(settings):
        out = tmp_path / "agent" / "redis-url"
        result = cli(url, "hosts", "enroll", "host-a", "--out", str(out))
        assert result.exit_code == 0, result.output
        assert "agent-host-a" in result.stdout
        agent_url = out.read_text().strip()
        assert agent_url not in result.stdout  # the secret goes to the file only
        assert out.stat().st_mode & 0o777 == 0o600
        assert redis.Redis.from_url(agent_url).ping()

        printed = cli(url, "hosts", "enroll", "host-b")
        assert printed.exit_code == 0, printed.output
        assert printed.stdout.strip().startswith("redis://agent-host-b:")

        bad = cli(url, "hosts", "enroll", "Bad Host")
        assert bad.exit_code == 2
        assert "host_id" in bad.output


def test_an_agent_sends_detour_requests_and_reads_only_its_own_verdicts(
    client: TestClient,
    seeded: redis.Redis,
) -> None:
    for host in ("host-a", "host-b"):
        seeded.xadd(f"lachesis:detour-verdicts:{host}", {"msg": f"verdict for {host}"})
    a = enroll(client, "host-a")
    enroll(client, "host-b")
    # What detour_link.rs does: append requests, find the end of its verdicts, follow them.
    assert a.xadd("lachesis:agent:host-a:detours", {"msg": "{}"}, maxlen=10000, approximate=True)
    assert a.xrevrange("lachesis:detour-verdicts:host-a", count=1)[0][1] == {"msg": "verdict for host-a"}
    assert a.xread({"lachesis:detour-verdicts:host-a": "0-0"}, count=1)
    # Not another host's verdicts, not the requests of others, and no forged verdicts.
    with pytest.raises(NOPERM):
        a.xread({"lachesis:detour-verdicts:host-b": "0-0"})
    with pytest.raises(NOPERM):
        a.xadd("lachesis:agent:host-b:detours", {"msg": "{}"})
    with pytest.raises(NOPERM):
        a.xrange("lachesis:agent:host-b:detours")
    with pytest.raises(NOPERM):
        a.xadd("lachesis:detour-verdicts:host-a", {"msg": "forged"})
    a.close()
    for host in ("host-a", "host-b"):
        seeded.delete(f"lachesis:detour-verdicts:{host}")
