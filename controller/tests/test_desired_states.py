"""Desired state is stored once per distinct content, not once per rollout target, and
states nothing needs any more are pruned. Fake agents on a real redis-server."""

from __future__ import annotations

from collections.abc import Callable

from conftest import FakeAgent, enroll, wait_rollout, wait_until
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.engine import Engine

from lachesis_controller.models import DesiredStateBody, RolloutTarget

Agents = Callable[[str], FakeAgent]
HOSTS, ROLLOUTS = 4, 6


def count(db: Engine, what) -> int:  # type: ignore[no-untyped-def]
    with db.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(what)).scalar_one())


def test_n_rollouts_to_m_hosts_store_at_most_n_states(client: TestClient, agents: Agents, db: Engine) -> None:
    hosts = [agents(f"host-{i}") for i in range(HOSTS)]
    for agent in hosts:
        enroll(client, agent)
    stored_before = count(db, DesiredStateBody)
    rollout_ids = [
        client.post("/api/v1/tenants", json={"name": f"t{i}", "classifiers": []}).json()["rollout_id"]
        for i in range(ROLLOUTS)
    ]
    # Every rollout is pending (no acks yet), so nothing of theirs may be pruned.
    assert count(db, RolloutTarget) >= HOSTS * ROLLOUTS
    with db.connect() as connection:
        shipped = connection.execute(
            select(func.count(func.distinct(RolloutTarget.state_id))).where(RolloutTarget.rollout_id.in_(rollout_ids))
        ).scalar_one()
    assert shipped == ROLLOUTS
    assert count(db, DesiredStateBody) <= stored_before + ROLLOUTS

    # Each message still renders whole and exactly as published.
    latest = [agent.wait_desired(1 + ROLLOUTS) for agent in hosts]
    assert all([t["name"] for t in state["tenants"]] == [f"t{i}" for i in range(ROLLOUTS)] for state in latest)
    hosts[0].redis.delete(f"lachesis:agent:{hosts[0].host_id}:desired")
    assert hosts[0].wait_desired(1 + ROLLOUTS) == latest[0]

    for agent, state in zip(hosts, latest, strict=True):
        agent.ack(state)
    for rollout_id in rollout_ids:
        assert wait_rollout(client, rollout_id)["state"] == "succeeded"
    # The next rollout prunes what no host runs or will run and no pending rollout needs:
    # the superseded generations' states go, the one every host acked stays.
    last = client.post("/api/v1/tenants", json={"name": "last", "classifiers": []}).json()["rollout_id"]
    wait_until(lambda: hosts[0].desired()["rollout_id"] == last, what="the last rollout published")
    assert count(db, DesiredStateBody) == 2
    assert client.get(f"/api/v1/rollouts/{rollout_ids[0]}").json()["state"] == "succeeded"  # history stays
