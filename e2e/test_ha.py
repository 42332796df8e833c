"""Two controllers on one PostgreSQL and one Redis, with real agents: the leader is killed
with SIGKILL in the middle of a two-phase rollout, the other controller takes the lease and
finishes it; every host's generations are unique and increasing, each is applied once, and
the survivor answers REST calls throughout (controller/README.md, "Several controllers").

The rollout is held mid-way by stopping the agents (SIGSTOP) before it starts and letting
them go (SIGCONT) only once the leader is dead: none of their acks can reach the leader, so
everything after the quiesce messages is the survivor's work. No sleeps: order comes from
signals and counted polls.
"""

from __future__ import annotations

import importlib.util
import re
import signal
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from conftest import ROOT, TOKEN, Cluster, free_port, wait_for
from test_rollouts_consistent import NEW_DETOURS, OLD_DETOURS, TENANT, rule

HOSTS = ["node-1", "node-2"]


@pytest.fixture(scope="module")
def postgres() -> Iterator[object]:
    spec = importlib.util.spec_from_file_location(
        "controller_test_support", ROOT / "controller" / "tests" / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.PostgresServer(module._need_postgres())
    server.start()
    yield server
    server.stop()


def client(port: int) -> httpx.Client:
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)


def leads(port: int) -> bool:
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()["leader"]


def applied_generations(cluster: Cluster, host: str) -> list[int]:
    """Generations the agent logged as applied, in log order."""
    return [
        int(m.group(1))
        for line in cluster.processes[f"agent-{host}"].text().splitlines()
        if "applied desired state" in line and (m := re.search(r"\bgeneration=(\d+)", line))
    ]


def test_the_survivor_finishes_a_rollout_whose_leader_was_killed(cluster: Cluster, postgres: object) -> None:
    cluster.database_url = postgres.fresh_database()  # type: ignore[attr-defined]
    first, second = cluster.api_port, free_port()
    cluster.start_redis()
    cluster.start_controller("controller", first, {"LACHESIS_REPLICA_ID": "a", "LACHESIS_LEASE_INTERVAL_S": "0.2"})
    cluster.start_controller("controller-b", second, {"LACHESIS_REPLICA_ID": "b", "LACHESIS_LEASE_INTERVAL_S": "0.2"})
    assert leads(first) and not leads(second)

    for host in HOSTS:
        cluster.start_agent(host)
    for host in HOSTS:
        wait_for(f"{host} to enrol and ack", lambda h=host: (x := cluster.host(h)) and x["acked_generation"] >= 1)
    with client(second) as api:  # the follower serves writes too
        assert api.post("/api/v1/tenants", json=TENANT).status_code == 201
        created = api.post("/api/v1/rules", json=rule(OLD_DETOURS))
        assert created.status_code == 201, created.text
    assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)["state"] == "succeeded"

    # Hold the agents, start a rollout that moves the flow (two phases) on the leader, kill it.
    for host in HOSTS:
        cluster.processes[f"agent-{host}"].popen.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    with client(first) as api:
        moved = api.put("/api/v1/rules/analytics-reads", json=rule(NEW_DETOURS))
        assert moved.status_code == 200, moved.text
    rollout_id = moved.json()["rollout_id"]
    cluster.processes["controller"].kill9()
    cluster.api_port = second  # from here on every helper asks the survivor
    with client(second) as api:
        pending = api.get(f"/api/v1/rollouts/{rollout_id}").json()
    assert pending["state"] == "pending" and pending["phase"] == "quiesce", pending
    for host in HOSTS:
        cluster.processes[f"agent-{host}"].popen.send_signal(signal.SIGCONT)  # type: ignore[union-attr]

    wait_for("the survivor to take the lease", lambda: leads(second), timeout=60)
    done = cluster.wait_rollout_done(rollout_id, timeout=60)
    assert done["state"] == "succeeded", done
    assert all(t["status"] == "applied" and t["drained_at"] for t in done["targets"])
    metrics = httpx.get(f"http://127.0.0.1:{second}/metrics", timeout=5).text
    assert re.search(r"^lachesis_controller_leader 1\.0$", metrics, re.MULTILINE)

    with client(second) as api:
        rollouts = api.get("/api/v1/rollouts", params={"limit": 500}).json()
        rule_now = api.get("/api/v1/rules/analytics-reads").json()
    assert rule_now["detours"] == NEW_DETOURS
    for host in HOSTS:
        # Oldest rollout first: each host's generations only grow, and none is issued twice.
        issued = [t["generation"] for r in reversed(rollouts) for t in r["targets"] if t["host_id"] == host]
        assert issued == sorted(set(issued)), (host, issued)
        assert cluster.host(host)["acked_generation"] == issued[-1]
        applied = applied_generations(cluster, host)
        assert applied == sorted(applied), (host, applied)
        twice = [g for g, n in Counter(applied).items() if n > 1]
        assert twice == [], f"{host} applied generations {twice} more than once"
        assert applied[-1] == issued[-1]
