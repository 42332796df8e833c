"""Rollbacks restore the database: after a failed rollout the API says what the hosts run,
later rollouts do not ship the failed change, the audit trail shows the restore, and the
rollout says what it restored. Fake agents on a real redis-server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conftest import TENANT, FakeAgent, enroll, pass_deadline, rule_body, wait_rollout, wait_until
from fastapi.testclient import TestClient
from test_policies import POLICY, post
from test_rollouts_two_phase import NEW_DETOURS, move_r1, phase_ack, setup_two_hosts, wait_phase

Agents = Callable[[str], FakeAgent]
# Adds a rule and widens the tenant: moves no existing flow, so one phase.
POLICY_V2 = (
    POLICY.replace(
        "classifiers: [{kind: path_prefix, value: /srv/web/}]",
        "classifiers: [{kind: path_prefix, value: /srv/web/}, {kind: path_prefix, value: /srv/www/}]",
    )
    + """\
    - name: web-writes
      priority: 20
      match: {tenant: web, ops: [write]}
      detours: [{what: io, to: {kind: stage, target: cache/web}}]
"""
)


def apply(client: TestClient, text: str) -> dict[str, Any]:
    response = post(client, text)
    assert response.status_code == 201, response.text
    return response.json()


def rule_names(state: dict[str, Any]) -> list[str]:
    return [r["name"] for r in state["rules"]]


def classifiers(state: dict[str, Any]) -> list[str]:
    return [c["value"] for t in state["tenants"] if t["name"] == "web" for c in t["classifiers"]]


def test_a_refused_policy_change_leaves_the_api_as_installed(client: TestClient, agents: Agents) -> None:
    a, b = agents("host-a"), agents("host-b")
    enroll(client, a)
    enroll(client, b)
    first = apply(client, POLICY)
    for agent in (a, b):
        agent.ack(agent.wait_desired(2))
    assert wait_rollout(client, first["rollout_id"])["state"] == "succeeded"
    installed_tenant = client.get("/api/v1/tenants/web").json()
    installed_policy = client.get("/api/v1/policies/web-cache").json()

    second = apply(client, POLICY_V2)
    assert second["version"] == 2
    state_a, state_b = a.wait_desired(3), b.wait_desired(3)
    assert "phase" not in state_a and rule_names(state_a) == ["web-reads", "web-writes"]
    a.ack(state_a)
    b.ack(state_b, status="rejected", reason="cache/web cannot take writes here")
    failed = wait_rollout(client, second["rollout_id"])
    assert failed["state"] == "failed"
    assert failed["rolled_back_by"] and "rolled back" in failed["reason"]
    # Rows written back first (the policy rewrote web-reads' updated_at), then the new removed.
    assert failed["restored"] == [
        {"kind": "tenant", "name": "web"},
        {"kind": "rule", "name": "web-reads"},
        {"kind": "policy", "name": "web-cache/2"},
        {"kind": "rule", "name": "web-writes"},
    ]
    # The list (built from rows, not models) shows it as its own read does, restored included.
    listed = {r["id"]: r for r in client.get("/api/v1/rollouts").json()}
    assert listed[failed["id"]] == failed

    # The API answers what the hosts run again ...
    assert client.get("/api/v1/policies/web-cache").json() == installed_policy
    assert client.get("/api/v1/tenants/web").json() == installed_tenant
    assert [r["name"] for r in client.get("/api/v1/rules").json()] == ["web-reads"]
    assert client.get("/api/v1/rules/web-writes").status_code == 404
    # ... and every target got it back in a new generation.
    back = client.get(f"/api/v1/rollouts/{failed['rolled_back_by']}").json()
    assert back["cause"] == f"rollback of rollout {second['rollout_id']}"
    assert back["restored"] is None
    for agent in (a, b):
        state = agent.wait_desired(4)
        assert state["rollout_id"] == back["id"] and state["restores"] == 2
        assert rule_names(state) == ["web-reads"] and classifiers(state) == ["/srv/web/"]
        agent.ack(state)
    assert wait_rollout(client, back["id"])["state"] == "succeeded"

    # A later, unrelated change does not ship the refused one after all.
    later = client.post("/api/v1/tenants", json={"name": "db", "classifiers": []}).json()
    for agent in (a, b):
        state = agent.wait_desired(5)
        assert state["rollout_id"] == later["rollout_id"]
        assert rule_names(state) == ["web-reads"] and classifiers(state) == ["/srv/web/"]

    # The audit trail shows who put what back, in the rollback's rollout.
    events = client.get("/api/v1/audit", params={"resource_kind": "rule", "resource_name": "web-writes"}).json()
    assert [(e["action"], e["actor"], e["rollout_id"]) for e in events] == [
        ("rule.rollback", "controller", back["id"]),
    ]
    assert events[0]["before"]["name"] == "web-writes" and events[0]["after"] is None
    tenant_events = client.get("/api/v1/audit", params={"resource_kind": "tenant", "resource_name": "web"}).json()
    assert tenant_events[0]["action"] == "tenant.rollback"
    assert [c["value"] for c in tenant_events[0]["after"]["classifiers"]] == ["/srv/web/"]

    # Applying the change again is version 2 again: nothing of the refused one is left.
    assert apply(client, POLICY_V2)["version"] == 2


def test_a_timed_out_two_phase_change_is_gone_from_the_api(client: TestClient, agents: Agents) -> None:
    a, b = setup_two_hosts(client, agents)
    etag = client.get("/api/v1/rules/r1").headers["ETag"]
    rollout_id = move_r1(client)
    for agent in (a, b):
        wait_phase(agent, 3, "quiesce")
    assert client.get("/api/v1/rules/r1").json()["detours"] == NEW_DETOURS  # pending: the intent
    pass_deadline(client, rollout_id)
    done = wait_until(
        lambda: (r := client.get(f"/api/v1/rollouts/{rollout_id}").json())["rolled_back_by"] and r,
        what="the rollback",
    )
    assert done["state"] == "timed_out"
    assert done["restored"] == [{"kind": "rule", "name": "r1"}]
    rule = client.get("/api/v1/rules/r1")
    assert rule.json()["detours"] == rule_body()["detours"]
    assert rule.headers["ETag"] == etag  # exactly the rule as it was, timestamps included
    for agent in (a, b):
        agent.ack(wait_phase(agent, 4, "install"))
    # The next change of anything else ships the old detours, not the timed-out ones.
    client.post("/api/v1/tenants", json={"name": "db", "classifiers": []})
    for agent in (a, b):
        assert agent.wait_desired(5)["rules"][0]["detours"] == rule_body()["detours"]


def test_a_newer_change_of_the_same_resource_is_not_undone(client: TestClient, agents: Agents) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    a = agents("host-a")
    enroll(client, a)
    created = client.post("/api/v1/rules", json=rule_body("r2")).json()["rollout_id"]
    refused = a.wait_desired(2)
    # Before host-a answers, the operator changes r2 again (two phases: it moves r2's flow).
    changed = client.put("/api/v1/rules/r2", json=rule_body("r2", detours=NEW_DETOURS)).json()["rollout_id"]
    quiesce = wait_phase(a, 3, "quiesce")
    a.ack(refused, status="rejected", reason="stage cache/web does not exist")
    failed = wait_rollout(client, created)
    assert failed["state"] == "failed"
    # r2 is the newer change's now: the rollback has nothing to put back, and sends nothing
    # to a host that already has a newer generation.
    assert failed["restored"] == []
    assert client.get("/api/v1/rules/r2").json()["detours"] == NEW_DETOURS
    assert client.get(f"/api/v1/rollouts/{failed['rolled_back_by']}").json()["targets"] == []
    phase_ack(a, quiesce)
    a.ack(wait_phase(a, 3, None))
    assert wait_rollout(client, changed)["state"] == "succeeded"


def test_a_timed_out_one_phase_change_stays_for_the_late_host(client: TestClient, agents: Agents) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    a = agents("host-a")
    enroll(client, a)
    rollout_id = client.post("/api/v1/rules", json=rule_body("r1")).json()["rollout_id"]
    a.wait_desired(2)
    pass_deadline(client, rollout_id)
    done = wait_rollout(client, rollout_id)
    assert done["state"] == "timed_out"
    # One phase holds no flow: the host runs it once its agent reads its desired key.
    assert done["rolled_back_by"] is None and done["restored"] is None
    assert client.get("/api/v1/rules/r1").status_code == 200
