"""Agents speak on the bus only as themselves, through real processes:
real agents enrolled with their own Redis users still register and ack; what one agent's
credentials forge for another host is refused by Redis or rejected by the controller; and a
decommissioned host stops holding up rollouts and cannot get back in."""

from __future__ import annotations

import json

import pytest
import redis
from conftest import Cluster, start_secure, wait_for

HOSTS = ("node-1", "node-2")
TENANT = {"name": "web", "classifiers": [{"kind": "path_prefix", "value": "/srv/web/"}]}


@pytest.fixture
def two(cluster: Cluster) -> Cluster:
    return start_secure(cluster, HOSTS)


def targets(cluster: Cluster, rollout_id: str) -> dict[str, str]:
    return {t["host_id"]: t["status"] for t in cluster.rollout(rollout_id)["targets"]}


def test_real_agents_ack_and_forgeries_from_their_credentials_are_refused(two: Cluster) -> None:
    cluster = two
    forger = redis.Redis.from_url(cluster.agent_urls["node-1"], decode_responses=True)
    # node-2 stops acking: the rollout below can only complete by its ack, or a forgery.
    cluster.processes["agent-node-2"].stop()
    with cluster.api() as api:
        created = api.post("/api/v1/tenants", json=TENANT)
    assert created.status_code == 201, created.text
    rollout_id = created.json()["rollout_id"]
    wait_for("node-1's own ack", lambda: targets(cluster, rollout_id) == {"node-1": "applied", "node-2": "pending"})

    desired = json.loads(cluster.redis().get("lachesis:agent:node-2:desired"))
    ack = {
        "schema": "lachesis.ack/v1",
        "host_id": "node-2",
        "generation": desired["generation"],
        "rollout_id": desired["rollout_id"],
        "status": "applied",
        "reason": None,
        "rules_installed": 0,
        "acked_at": "2026-11-24T12:00:00Z",
        "traceparent": desired["traceparent"],
    }
    registration = {
        "schema": "lachesis.registration/v1",
        "host_id": "ghost",
        "agent_version": "6.6.6",
        "started_at": "2026-11-24T12:00:00Z",
        "capabilities": {
            "cpus": 1,
            "devices": [],
            "kernel": {"release": "6.1.0", "btf": True, "io_uring": True, "fuse": True},
        },
    }
    # Redis refuses node-1's user anything but its own streams ...
    for stream in ("lachesis:agent:node-2:acks", "lachesis:acks", "lachesis:registrations"):
        with pytest.raises(redis.exceptions.NoPermissionError):
            forger.xadd(stream, {"msg": json.dumps(ack)})
    # ... and the controller rejects what names another host on them.
    forger.xadd("lachesis:agent:node-1:acks", {"msg": json.dumps(ack)})
    forger.xadd("lachesis:agent:node-1:registrations", {"msg": json.dumps(registration)})
    log = cluster.processes["controller"].text
    wait_for(
        "both forgeries rejected",
        lambda: "acks stream of node-1: rejected a message that names host node-2" in log()
        and "registrations stream of node-1: rejected a message that names host ghost" in log(),
    )
    assert targets(cluster, rollout_id) == {"node-1": "applied", "node-2": "pending"}
    assert cluster.rollout(rollout_id)["state"] == "pending"
    assert cluster.host("ghost") is None
    with cluster.api() as api:
        assert [h["id"] for h in api.get("/api/v1/hosts").json()] == list(HOSTS)

    # The real node-2 comes back, registers again and acks: the rollout completes.
    cluster.processes["agent-node-2"].start()
    assert cluster.wait_rollout_done(rollout_id, timeout=30)["state"] == "succeeded"
    forger.close()


def test_a_deleted_host_no_longer_holds_up_rollouts_nor_gets_back_in(two: Cluster) -> None:
    cluster = two
    cluster.processes["agent-node-2"].stop()
    with cluster.api() as api:
        rollout_id = api.post("/api/v1/tenants", json=TENANT).json()["rollout_id"]
        wait_for("node-1's ack", lambda: targets(cluster, rollout_id) == {"node-1": "applied", "node-2": "pending"})
        deleted = api.delete("/api/v1/hosts/node-2")
        assert deleted.status_code == 204, deleted.text
        done = cluster.wait_rollout_done(rollout_id, timeout=30)
        assert done["state"] == "succeeded" and [t["host_id"] for t in done["targets"]] == ["node-1"]
        assert [h["id"] for h in api.get("/api/v1/hosts").json()] == ["node-1"]
    assert cluster.redis().keys("lachesis:agent:node-2:*") == []
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(cluster.agent_urls["node-2"]).ping()
