"""Switch operations (quiesce, drain, resume) scoped to hosts and flows, with fake agents on a
real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from conftest import TENANT, FakeAgent, assert_problem, enroll, make_settings, pass_deadline, snapshot, wait_until
from fastapi.testclient import TestClient
from test_rollouts_two_phase import phase_ack, wait_phase

from lachesis_controller.app import create_app

Agents = Callable[[str], FakeAgent]
FLOW = {"tenant": "web", "ops": ["write"]}


def two_hosts(client: TestClient, agents: Agents) -> tuple[FakeAgent, FakeAgent]:
    a, b = agents("host-a"), agents("host-b")
    enroll(client, a)
    enroll(client, b)
    client.post("/api/v1/tenants", json=TENANT)
    for agent in (a, b):
        agent.ack(agent.wait_desired(2))
    for host in ("host-a", "host-b"):
        wait_until(lambda: client.get(f"/api/v1/hosts/{host}").json()["acked_generation"] == 2)
    return a, b


def test_quiesce_holds_until_resume_and_changes_no_rules(client: TestClient, agents: Agents) -> None:
    a, b = two_hosts(client, agents)
    response = client.post("/api/v1/switch/quiesce", json={"hosts": ["host-a"], "flow": FLOW})
    assert response.status_code == 202, response.text
    rollout = response.json()
    assert rollout["phase"] == "hold"
    assert [t["host_id"] for t in rollout["targets"]] == ["host-a"]
    q = wait_phase(a, 3, "quiesce")
    assert q["quiesce"] == [FLOW]
    assert b.desired()["generation"] == 2  # out of scope
    phase_ack(a, q)
    wait_until(lambda: client.get(f"/api/v1/rollouts/{rollout['id']}").json()["targets"][0]["phase"] == "drained")
    # Held: no install follows on its own.
    assert a.desired()["phase"] == "quiesce"

    # Resume of another flow or host does not touch it.
    assert_problem(client.post("/api/v1/switch/resume", json={"flow": {"tenant": "web"}}), 409)
    assert_problem(client.post("/api/v1/switch/resume", json={"hosts": ["host-b"]}), 409)
    resumed = client.post("/api/v1/switch/resume", json={"hosts": ["host-a"], "flow": FLOW})
    assert resumed.status_code == 200, resumed.text
    assert resumed.json() == {"resumed": [rollout["id"]]}
    install = wait_phase(a, 3, None)
    assert install["rules"] == q["rules"] and install["tenants"] == q["tenants"]
    a.ack(install)
    done = wait_until(lambda: (r := client.get(f"/api/v1/rollouts/{rollout['id']}").json())["state"] != "pending" and r)
    assert done["state"] == "succeeded"
    assert_problem(client.post("/api/v1/switch/resume", json={}), 409)


def test_held_quiesce_outlives_the_deadline_once_drained(client: TestClient, agents: Agents) -> None:
    a, _ = two_hosts(client, agents)
    rollout = client.post("/api/v1/switch/quiesce", json={"hosts": ["host-a"]}).json()
    phase_ack(a, wait_phase(a, 3, "quiesce"))
    wait_until(lambda: client.get(f"/api/v1/rollouts/{rollout['id']}").json()["targets"][0]["phase"] == "drained")
    # A control that is not drained: host-b never acks its quiesce.
    control = client.post("/api/v1/switch/quiesce", json={"hosts": ["host-b"]}).json()
    # Both deadlines pass; the reconciler pass that times out the control saw both overdue.
    pass_deadline(client, rollout["id"], control["id"])
    timed_out = wait_until(
        lambda: (r := client.get(f"/api/v1/rollouts/{control['id']}").json())["state"] != "pending" and r
    )
    assert timed_out["state"] == "timed_out", timed_out
    assert client.get(f"/api/v1/rollouts/{rollout['id']}").json()["state"] == "pending"


def test_drain_answers_once_every_host_drained(client: TestClient, agents: Agents) -> None:
    a, b = two_hosts(client, agents)
    result: dict[str, object] = {}

    def call() -> None:
        result["response"] = client.post("/api/v1/switch/drain", json={"flow": FLOW})

    caller = threading.Thread(target=call)
    caller.start()
    qa, qb = wait_phase(a, 3, "quiesce"), wait_phase(b, 3, "quiesce")
    phase_ack(a, qa)
    rollout_id = qa["rollout_id"]
    wait_until(
        lambda: {t["host_id"]: t["phase"] for t in client.get(f"/api/v1/rollouts/{rollout_id}").json()["targets"]}
        == {"host-a": "drained", "host-b": "quiesce"}
    )
    assert caller.is_alive(), "drain answered before every host drained"
    phase_ack(b, qb)
    caller.join(60)
    assert not caller.is_alive()
    # The answer is the state it answered on: every host drained (an answer on host-a's
    # drain alone would show host-b still quiescing).
    response = result["response"]
    assert response.status_code == 200, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert {t["phase"] for t in body["targets"]} == {"drained"}


def test_a_refused_drain_is_502_and_resumes_everyone(client: TestClient, agents: Agents) -> None:
    a, b = two_hosts(client, agents)
    result: dict[str, object] = {}
    caller = threading.Thread(target=lambda: result.update(r=client.post("/api/v1/switch/drain", json={})))
    caller.start()
    phase_ack(a, wait_phase(a, 3, "quiesce"))
    phase_ack(b, wait_phase(b, 3, "quiesce"), status="rejected", reason="drain timed out")
    caller.join(60)
    body = assert_problem(result["r"], 502)
    assert "host-b" in body["detail"]
    # The rollback installs the state they ran, which resumes the flows.
    for agent in (a, b):
        assert wait_phase(agent, 4, "install")["restores"] == 2


def test_bad_scope_is_422_and_changes_nothing(client: TestClient, agents: Agents, db) -> None:  # type: ignore[no-untyped-def]
    two_hosts(client, agents)
    before = snapshot(db)
    for body, field in [
        ({"hosts": ["host-z"]}, "hosts[0]"),
        ({"hosts": []}, "hosts"),
        ({"flow": {"tenant": "web", "colour": "blue"}}, "flow.colour"),
        ({"flow": {"ops": ["fly"]}}, "flow.ops[0]"),
        ({"everything": True}, "everything"),
    ]:
        problem = assert_problem(client.post("/api/v1/switch/quiesce", json=body), 422)
        assert field in str(problem), (body, problem)
    assert snapshot(db) == before


def test_a_tenant_token_may_only_quiesce_its_flows(tmp_path: Path, redis_url: str, agents: Agents) -> None:
    settings = make_settings(tmp_path, redis_url, api_token="boot")
    with TestClient(create_app(settings), headers={"Authorization": "Bearer boot"}) as client:
        two_hosts(client, agents)
        token = client.post("/api/v1/tokens", json={"name": "web-ops", "role": "operator", "tenant": "web"}).json()
        viewer = client.post("/api/v1/tokens", json={"name": "looker", "role": "viewer"}).json()
        as_web = {"Authorization": f"Bearer {token['token']}"}
        assert_problem(client.post("/api/v1/switch/quiesce", json={}, headers=as_web), 403)
        assert_problem(client.post("/api/v1/switch/quiesce", json={"flow": {"tenant": "db"}}, headers=as_web), 403)
        assert client.post("/api/v1/switch/quiesce", json={"flow": FLOW}, headers=as_web).status_code == 202
        assert_problem(
            client.post("/api/v1/switch/resume", json={}, headers={"Authorization": f"Bearer {viewer['token']}"}), 403
        )
