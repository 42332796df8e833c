"""Controller detours: the applications with fakes, then the whole loop against a real
redis-server with a fake agent (requests in, two-phase read-set switch, verdicts out)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from conftest import FakeAgent, assert_problem, enroll, make_settings, now_rfc3339, wait_until
from fastapi.testclient import TestClient

from lachesis_controller.app import create_app
from lachesis_controller.detours.apps import Approve, Decision
from lachesis_controller.detours.messages import DetourRequest, DetourVerdict
from lachesis_controller.detours.service import DetourLog, DetourService


def request(
    n: int = 1,
    *,
    target: str = "approve",
    hold: bool = True,
    tenant: str | None = "web",
    host: str = "host-a",
    path: str = "/data/f",
) -> dict[str, Any]:
    return {
        "schema": "lachesis.detour-request/v1",
        "id": f"{host}.1.{n}",
        "host_id": host,
        "generation": 1,
        "rule": "ask",
        "target": target,
        "hold": hold,
        "header": {"tenant": tenant, "op": "write", "path": path, "offset": 0, "length": 4096},
        "sent_at": now_rfc3339(),
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    }


class FakeRedis:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, str]]] = []

    async def xadd(self, key: str, fields: dict[str, str], **_: Any) -> str:
        self.sent.append((key, fields))
        return "1-0"


class FakeBus:
    def __init__(self) -> None:
        self.redis = FakeRedis()


class Broken:
    name = "approve"

    async def decide(self, request: DetourRequest) -> Decision:
        raise RuntimeError("bug")


async def _run(service: DetourService, *messages: dict[str, Any]) -> None:
    for m in messages:
        await service.handle(DetourRequest.model_validate(m))
    await asyncio.gather(*service.tasks)


def test_approve_answers_proceed_unknown_targets_and_failures_deny_and_copies_get_no_answer() -> None:
    bus, log = FakeBus(), DetourLog()
    service = DetourService(bus, {"approve": Approve()}, log)  # type: ignore[arg-type]
    asyncio.run(_run(service, request(1), request(2, target="readset"), request(3, hold=False)))
    verdicts = {v.id: v for v in (DetourVerdict.model_validate_json(f["msg"]) for _, f in bus.redis.sent)}
    assert {k for k, _ in bus.redis.sent} == {"lachesis:detour-verdicts:host-a"}
    assert verdicts["host-a.1.1"].verdict == "proceed" and verdicts["host-a.1.1"].errno is None
    # The trace context goes back with the verdict.
    assert verdicts["host-a.1.1"].traceparent == request(1)["traceparent"]
    assert (verdicts["host-a.1.2"].verdict, verdicts["host-a.1.2"].errno) == ("deny", 5)
    assert "host-a.1.3" not in verdicts
    # Copies are logged on arrival, held headers once answered.
    assert sorted(e["id"] for e in log.recent()) == ["host-a.1.1", "host-a.1.2", "host-a.1.3"]
    assert next(e for e in log.recent() if e["id"] == "host-a.1.3")["verdict"] is None

    # A request from long ago (a new consumer group reads the stream from its start) is
    # not decided: its IO failed at the agent's deadline.
    bus = FakeBus()
    service = DetourService(bus, {"approve": Approve()}, DetourLog())  # type: ignore[arg-type]
    asyncio.run(_run(service, request(5) | {"sent_at": "2020-01-01T00:00:00Z"}))
    assert bus.redis.sent == []

    bus = FakeBus()
    service = DetourService(bus, {"approve": Broken()}, DetourLog())  # type: ignore[arg-type]
    asyncio.run(_run(service, request(4)))
    v = DetourVerdict.model_validate_json(bus.redis.sent[0][1]["msg"])
    assert (v.verdict, v.errno) == ("deny", 5) and "bug" in (v.reason or "")


def test_the_log_shows_tenant_tokens_only_their_tenant() -> None:
    log = DetourLog(size=3)
    for n, tenant in enumerate(["web", "db", None, "web"]):
        log.add(DetourRequest.model_validate(request(n, tenant=tenant)), Decision("proceed"), 1.0)
    assert [e["id"] for e in log.recent()] == ["host-a.1.3", "host-a.1.2", "host-a.1.1"]
    assert [e["tenant"] for e in log.recent(tenant="web")] == ["web"]


# --- against a real redis-server -------------------------------------------------------

REPLICAS = ["/srv/r1", "/srv/r2"]


def _file(target: str) -> dict[str, Any]:
    return {"what": "io", "to": {"kind": "file", "target": target}}


@pytest.fixture
def readset_client(tmp_path: Path, redis_url: str) -> Iterator[TestClient]:
    # The redis-server is shared by the session: start without earlier tests' requests.
    admin = redis.Redis.from_url(redis_url)
    admin.delete("lachesis:agent:host-a:detours", "lachesis:detour-verdicts:host-a")
    admin.close()
    with TestClient(create_app(make_settings(tmp_path, redis_url, readset_quiet_s=1.0))) as c:
        yield c


def _verdicts(agent: FakeAgent) -> list[dict[str, Any]]:
    return [json.loads(f["msg"]) for _, f in agent.redis.xrange(f"lachesis:detour-verdicts:{agent.host_id}")]


def ack_quiesce(agent: FakeAgent, state: dict[str, Any]) -> None:
    agent.send(
        "acks",
        {
            "schema": "lachesis.ack/v1",
            "host_id": agent.host_id,
            "generation": state["generation"],
            "rollout_id": state["rollout_id"],
            "phase": "quiesce",
            "status": "applied",
            "reason": None,
            "rules_installed": len(state["rules"]),
            "drained": 0,
            "acked_at": now_rfc3339(),
            "traceparent": state["traceparent"],
        },
    )


def _read_rule(desired: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in desired["rules"] if r["name"] == "data-reads")


def test_readset_switches_to_the_primary_before_the_write_goes_and_back_when_quiet(
    readset_client: TestClient,
    agents: Any,
) -> None:
    client = readset_client
    agent = agents("host-a")
    enroll(client, agent)
    agent.heartbeat(generation=1)
    reads = {
        "name": "data-reads",
        "priority": 20,
        "match": {"ops": ["read"], "path_prefix": "/data"},
        "detours": [_file(r) for r in REPLICAS],
    }
    ask = {
        "name": "ask",
        "priority": 10,
        "match": {"ops": ["write"], "path_prefix": "/data"},
        "detours": [
            {"what": "header", "to": {"kind": "controller", "target": "readset"}},
            *(_file(r) for r in REPLICAS),
        ],
    }
    generation = 1
    for body in (reads, ask):
        r = client.post("/api/v1/rules", json=body)
        assert r.status_code == 201, r.text
        generation += 1
        agent.ack(agent.wait_desired(generation))
    agent.heartbeat(generation=generation)

    agent.send("detours", request(1, tenant=None, target="readset"))
    # Phase 1: the read flow is quiesced; no verdict before the new read set is installed.
    quiesce = wait_until(lambda: (d := agent.desired()) and d.get("phase") == "quiesce" and d, what="quiesce")
    assert {"ops": ["read"], "path_prefix": "/data"} in quiesce["quiesce"]
    assert _verdicts(agent) == []
    ack_quiesce(agent, quiesce)
    install = wait_until(
        lambda: (d := agent.desired())
        and d.get("phase", "install") == "install"
        and d["generation"] == quiesce["generation"]
        and d,
        what="install",
    )
    assert [d["to"]["target"] for d in _read_rule(install)["detours"]] == REPLICAS[:1]
    assert _verdicts(agent) == []
    agent.ack(install)
    verdict = wait_until(lambda: _verdicts(agent), what="verdict")[0]
    assert verdict["verdict"] == "proceed" and verdict["id"] == "host-a.1.1"
    assert verdict["ttl_ms"] == 500 and "switched to the primary" in verdict["reason"]

    # A second write header while primary-only: answered at once, nothing rolled out.
    agent.send("detours", request(2, tenant=None, target="readset"))
    wait_until(lambda: len(_verdicts(agent)) == 2, what="second verdict")
    assert agent.desired()["generation"] == install["generation"]

    # Write-free for the quiet time (1 s): back to every replica (two-phase again).
    back = wait_until(
        lambda: (d := agent.desired()) and d["generation"] > install["generation"] and d, timeout=10, what="restore"
    )
    assert back.get("phase") == "quiesce"
    ack_quiesce(agent, back)
    restored = wait_until(
        lambda: (d := agent.desired())
        and d.get("phase", "install") == "install"
        and d["generation"] == back["generation"]
        and d,
        what="restored install",
    )
    assert [d["to"]["target"] for d in _read_rule(restored)["detours"]] == REPLICAS
    agent.ack(restored)
    wait_until(
        lambda: [d["to"]["target"] for d in client.get("/api/v1/rules/data-reads").json()["detours"]] == REPLICAS,
        what="rule restored",
    )

    listed = client.get("/api/v1/detours").json()
    assert [d["id"] for d in listed] == ["host-a.1.2", "host-a.1.1"]
    assert listed[1]["verdict"] == "proceed" and listed[1]["latency_ms"] > 0


def test_unknown_controller_applications_and_io_to_the_controller_are_refused(client: TestClient) -> None:
    assert (
        client.post(
            "/api/v1/tenants", json={"name": "web", "classifiers": [{"kind": "uid", "value": "1000"}]}
        ).status_code
        == 201
    )
    body = {
        "name": "ask",
        "priority": 10,
        "match": {"ops": ["write"]},
        "detours": [{"what": "header", "to": {"kind": "controller", "target": "nosuchapp"}}],
    }
    problem = assert_problem(client.post("/api/v1/rules", json=body), 422)
    assert "detours[0].to.target" in json.dumps(problem) and "nosuchapp" in json.dumps(problem)
    body["detours"] = [{"what": "io", "to": {"kind": "controller", "target": "approve"}}]
    problem = assert_problem(client.post("/api/v1/rules", json=body), 422)
    assert "what: header" in json.dumps(problem)
    # A header-only rule that asks the controller first loses no write: accepted.
    body["detours"] = [{"what": "header", "to": {"kind": "controller", "target": "approve"}}]
    assert client.post("/api/v1/rules", json=body).status_code == 201
    assert client.get("/api/v1/rules").status_code == 200


def test_get_detours_shows_a_tenant_token_only_its_tenants_headers(tmp_path: Path, redis_url: str) -> None:
    admin = {"Authorization": "Bearer boot"}
    with TestClient(create_app(make_settings(tmp_path, redis_url, api_token="boot"))) as client:
        assert (
            client.post(
                "/api/v1/tenants", json={"name": "web", "classifiers": [{"kind": "uid", "value": "1"}]}, headers=admin
            ).status_code
            == 201
        )
        made = client.post("/api/v1/tokens", json={"name": "w", "role": "viewer", "tenant": "web"}, headers=admin)
        assert made.status_code == 201, made.text
        tenant_token = {"Authorization": f"Bearer {made.json()['token']}"}
        log: DetourLog = client.app.state.detours  # type: ignore[attr-defined]
        for n, tenant in enumerate(["web", "db", None]):
            log.add(DetourRequest.model_validate(request(n, tenant=tenant)), Decision("proceed", ttl_ms=10), 2.5)
        everything = client.get("/api/v1/detours", headers=admin).json()
        assert [d["tenant"] for d in everything] == [None, "db", "web"]
        assert everything[2]["latency_ms"] == 2.5 and everything[2]["ttl_ms"] == 10
        assert [d["tenant"] for d in client.get("/api/v1/detours", headers=tenant_token).json()] == ["web"]
        assert len(client.get("/api/v1/detours?limit=1", headers=admin).json()) == 1
        assert_problem(client.get("/api/v1/detours?limit=0", headers=admin), 422)
        assert_problem(client.get("/api/v1/detours"), 401)
