"""From a REST call to an agent's ack, with real redis-server, controller and agent processes."""

from __future__ import annotations

import json

from conftest import HOST, Cluster, wait_for

INBOX = f"lachesis:agent:{HOST}:inbox"

TENANT = {"name": "analytics", "classifiers": [{"kind": "cgroup", "value": "/analytics"}]}


def rule(name: str, priority: int = 10, tenant: str = "analytics") -> dict:
    return {
        "name": name,
        "priority": priority,
        "hosts": None,
        "match": {"tenant": tenant, "ops": ["read"], "path_prefix": "/data/"},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/analytics"}}],
    }


def create(cluster: Cluster, path: str, body: dict) -> dict:
    with cluster.api() as api:
        r = api.post(path, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def acks_since(cluster: Cluster, last_id: str) -> list[dict]:
    return [
        json.loads(fields["msg"])
        for _, fields in cluster.redis().xrange(f"lachesis:agent:{HOST}:acks", min=f"({last_id}")
    ]


def last_stream_id(cluster: Cluster, stream: str) -> str:
    entries = cluster.redis().xrevrange(stream, count=1)
    return entries[0][0] if entries else "0-0"


def test_rule_rolls_out_and_the_agent_acks_it(running: Cluster) -> None:
    create(running, "/api/v1/tenants", TENANT)
    before = running.host(HOST)["desired_generation"]

    created = create(running, "/api/v1/rules", rule("analytics-reads"))
    # The rollout reports the agent's ack (how fast is a benchmark's question, not this test's:
    # the timeout only turns a hang into a failure).
    rollout = running.wait_rollout_done(created["rollout_id"], timeout=30)

    assert rollout["state"] == "succeeded", rollout
    [target] = rollout["targets"]
    assert target["host_id"] == HOST
    assert target["status"] == "applied"
    assert target["generation"] == before + 1
    assert running.host(HOST)["acked_generation"] == before + 1

    # The REST call's trace context reached the agent and is logged where it applied.
    trace_id = rollout["traceparent"].split("-")[1]
    wait_for(
        "the agent to log the trace context",
        lambda: any(
            "applied desired state" in line and trace_id in line
            for line in running.processes[f"agent-{HOST}"].text().splitlines()
        ),
    )


def test_killed_agent_resyncs_the_latest_generation_without_a_resend(running: Cluster) -> None:
    create(running, "/api/v1/tenants", TENANT)
    created = create(running, "/api/v1/rules", rule("analytics-reads"))
    assert running.wait_rollout_done(created["rollout_id"], timeout=30)["state"] == "succeeded"
    latest = running.host(HOST)["desired_generation"]
    inbox_len = running.redis().xlen(INBOX)
    mark = last_stream_id(running, f"lachesis:agent:{HOST}:acks")

    agent = running.processes[f"agent-{HOST}"]
    agent.kill9()
    agent.start()

    acks = wait_for(
        "the restarted agent to ack the latest generation",
        lambda: [a for a in acks_since(running, mark) if a["host_id"] == HOST],
        timeout=30,
    )
    assert acks[0]["generation"] == latest
    assert acks[0]["status"] == "applied"
    assert acks[0]["rules_installed"] == 1
    # Nothing was re-sent: the controller did not bump the generation or append to the inbox.
    assert running.host(HOST)["desired_generation"] == latest
    assert running.redis().xlen(INBOX) == inbox_len
    heartbeat = wait_for(
        "a heartbeat from the restarted agent", lambda: running.redis().get(f"lachesis:agent:{HOST}:heartbeat")
    )
    assert json.loads(heartbeat)["generation"] == latest


def test_both_sides_recover_from_a_redis_restart(running: Cluster) -> None:
    create(running, "/api/v1/tenants", TENANT)
    first = create(running, "/api/v1/rules", rule("analytics-reads"))
    assert running.wait_rollout_done(first["rollout_id"], timeout=30)["state"] == "succeeded"

    redis_proc = running.processes["redis"]
    redis_proc.stop()
    redis_proc.start()

    second = create(running, "/api/v1/rules", rule("analytics-reads-2", priority=20))
    rollout = running.wait_rollout_done(second["rollout_id"], timeout=30)
    assert rollout["state"] == "succeeded", rollout
    assert [t["status"] for t in rollout["targets"]] == ["applied"]
    assert wait_for("the host to be alive again", lambda: running.host(HOST)["alive"], timeout=30)


def test_the_agent_refuses_an_older_generation(running: Cluster) -> None:
    create(running, "/api/v1/tenants", TENANT)
    created = create(running, "/api/v1/rules", rule("analytics-reads"))
    assert running.wait_rollout_done(created["rollout_id"], timeout=30)["state"] == "succeeded"
    held = running.host(HOST)["acked_generation"]
    assert held >= 2

    stale = json.loads(running.redis().get(f"lachesis:agent:{HOST}:desired"))
    stale.update(generation=held - 1, rollout_id=None, rules=[])
    mark = last_stream_id(running, f"lachesis:agent:{HOST}:acks")
    running.redis().xadd(INBOX, {"msg": json.dumps(stale)})

    [ack] = wait_for("the agent to refuse the stale generation", lambda: acks_since(running, mark))
    assert ack["status"] == "rejected"
    assert ack["generation"] == held - 1
    assert str(held) in ack["reason"]
    assert ack["rules_installed"] == 1  # it kept the table it had
    # The controller read the refusal without changing what it believes the host acked.
    wait_for("the controller to stay healthy", lambda: running.host(HOST)["acked_generation"] == held)


def test_bad_input_changes_nothing_on_the_bus(running: Cluster) -> None:
    create(running, "/api/v1/tenants", TENANT)
    host_before = running.host(HOST)
    inbox_len = running.redis().xlen(INBOX)
    with running.api() as api:
        rules_before = api.get("/api/v1/rules").json()
        bad_requests = [
            api.post("/api/v1/rules", content=b'{"name": "r1", ', headers={"Content-Type": "application/json"}),
            api.post("/api/v1/rules", json={**rule("r1"), "colour": "blue"}),
            api.post("/api/v1/rules", json=rule("r1", tenant="nobody")),
        ]
        for r in bad_requests:
            assert 400 <= r.status_code < 500, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.json()["status"] == r.status_code
        assert "colour" in bad_requests[1].text
        assert "match.tenant" in bad_requests[2].text
        assert api.get("/api/v1/rules").json() == rules_before

    assert running.host(HOST)["desired_generation"] == host_before["desired_generation"]
    assert running.redis().xlen(INBOX) == inbox_len
