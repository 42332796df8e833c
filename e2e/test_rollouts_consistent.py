"""Consistent rollouts with three real agents, each on its own Redis ACL user: a rule change
that moves a flow runs quiesce, drain, install, resume at every agent, in that order, and
an agent killed mid-rollout rolls all three back to the rules they ran before.

The writer/reader half of consistent rollouts, on the agents' FUSE mounts, is
`test_rollouts_datapath.py`.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator

import pytest
import redis
from conftest import Cluster, start_secure, wait_for

HOSTS = ["node-1", "node-2", "node-3"]
TENANT = {"name": "analytics", "classifiers": [{"kind": "uid", "value": "1001"}]}
OLD_DETOURS = [{"what": "io", "to": {"kind": "stage", "target": "cache/analytics"}}]
NEW_DETOURS = [{"what": "io", "to": {"kind": "stage", "target": "cache/analytics-2"}}]
STEPS = ["quiesce", "drain", "install", "resume"]


def rule(detours: list[dict]) -> dict:
    return {
        "name": "analytics-reads",
        "priority": 10,
        "match": {"tenant": "analytics", "ops": ["read"]},
        "detours": detours,
    }


@pytest.fixture
def three(cluster: Cluster) -> Iterator[Cluster]:
    start_secure(cluster, HOSTS)
    with cluster.api() as api:
        assert api.post("/api/v1/tenants", json=TENANT).status_code == 201
        created = api.post("/api/v1/rules", json=rule(OLD_DETOURS))
        assert created.status_code == 201, created.text
    done = cluster.wait_rollout_done(created.json()["rollout_id"], timeout=30)
    assert done["state"] == "succeeded" and done["phase"] is None  # a new rule: one phase
    yield cluster


def move_the_flow(cluster: Cluster) -> str:
    with cluster.api() as api:
        r = api.put("/api/v1/rules/analytics-reads", json=rule(NEW_DETOURS))
        assert r.status_code == 200, r.text
        return r.json()["rollout_id"]


def steps(cluster: Cluster, host: str, rollout_id: str) -> list[str]:
    """The rollout's quiesce/drain/install/resume log lines of one agent, in order."""
    found = []
    for line in cluster.processes[f"agent-{host}"].text().splitlines():
        m = re.search(r"\s(quiesce|drain|install|resume)\s.*rollout_id=(\S+)", line)
        if m and m.group(2) == rollout_id:
            found.append(m.group(1))
    return found


def acks_of(cluster: Cluster, rollout: dict) -> list[tuple[str, str]]:
    """(host, phase) of the agents' acks of the rollout, in the order they entered the ack
    stream: the order the controller handled them in, read from its log (it reads the stream
    in order, and deletes the entries it handled, so the stream itself keeps only the newest)."""
    generations = {t["host_id"]: t["generation"] for t in rollout["targets"]}
    out = []
    for line in cluster.processes["controller"].text().splitlines():
        m = re.search(r"ack from (\S+): generation (\d+) (?:(quiesce) )?\w+", line)
        if m and generations.get(m.group(1)) == int(m.group(2)):
            out.append((m.group(1), m.group(3) or "install"))
    return out


def desired(cluster: Cluster, host: str) -> dict:
    return json.loads(cluster.redis().get(f"lachesis:agent:{host}:desired"))


def test_moving_a_flow_quiesces_drains_installs_and_resumes_at_every_agent(three: Cluster) -> None:
    rollout_id = move_the_flow(three)
    done = three.wait_rollout_done(rollout_id, timeout=30)
    assert done["state"] == "succeeded", done
    assert done["phase"] == "install"
    assert all(t["phase"] == "install" and t["drained_at"] and t["status"] == "applied" for t in done["targets"])
    # Nobody installed before everybody drained: in the ack stream (Redis orders its entries,
    # the controller handles them in that order) every agent's drain ack comes before any
    # agent's install ack.
    acks = acks_of(three, done)
    first = {(h, p): acks.index((h, p)) for h in HOSTS for p in ("quiesce", "install") if (h, p) in acks}
    assert len(first) == 2 * len(HOSTS), acks
    assert max(first[h, "quiesce"] for h in HOSTS) < min(first[h, "install"] for h in HOSTS), acks
    for host in HOSTS:
        assert wait_for(f"{host}'s log", lambda h=host: steps(three, h, rollout_id) == STEPS, timeout=30)
        assert desired(three, host)["rules"][0]["detours"] == NEW_DETOURS
    # Each agent ran as its own Redis user: it cannot read a neighbour's state.
    with pytest.raises(redis.exceptions.NoPermissionError):
        redis.Redis.from_url(three.agent_urls["node-1"]).get("lachesis:agent:node-2:desired")


def test_killing_an_agent_mid_rollout_rolls_all_three_back(three: Cluster) -> None:
    before = three.host("node-1")["acked_generation"]
    victim = three.processes["agent-node-3"]
    # Frozen first, so the others get to drain while it has not: mid-rollout for sure.
    victim.popen.send_signal(signal.SIGSTOP)
    rollout_id = move_the_flow(three)

    def drained_but_node_3() -> bool:
        targets = {t["host_id"]: t["phase"] for t in three.rollout(rollout_id)["targets"]}
        return targets == {"node-1": "drained", "node-2": "drained", "node-3": "quiesce"}

    wait_for("node-1 and node-2 to drain", drained_but_node_3, timeout=30)
    victim.kill9()
    failed = wait_for(
        "the rollout to fail and roll back",
        lambda: (r := three.rollout(rollout_id))["rolled_back_by"] and r,
        timeout=30,
    )
    assert failed["state"] == "failed", failed
    assert "node-3 stopped heartbeating" in failed["reason"]
    back_id = failed["rolled_back_by"]
    for host in ("node-1", "node-2"):
        assert wait_for(
            f"{host} to resume",
            lambda h=host: steps(three, h, rollout_id) == ["quiesce", "drain"]
            and steps(three, h, back_id) == ["install", "resume"],
            timeout=30,
        )
    # The dead agent comes back and finds the rollback waiting for it.
    victim.start()
    back = three.wait_rollout_done(back_id, timeout=30)
    assert back["state"] == "succeeded", back
    for host in HOSTS:
        state = desired(three, host)
        assert state["restores"] == before
        assert state["rules"][0]["detours"] == OLD_DETOURS
        assert three.host(host)["acked_generation"] == state["generation"]
    installed = [line for line in victim.text().splitlines() if re.search(rf"\sinstall\s.*rollout_id={back_id}", line)]
    assert installed and f"restores={before}" in installed[-1]
