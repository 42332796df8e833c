"""The benchmarks' simulated agent (bench/controller/simagents.py) speaks the bus as the real
agent does, so the scale figures measure a controller doing real work: against a real
redis-server and the controller app, as its own Redis user, it enrols, acks both phases of a
two-phase rollout, refuses a stale generation, heartbeats the generation it runs, and every
message it sends holds to the bus schemas."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from conftest import TENANT, enroll_host, rule_body, wait_rollout, wait_until
from fastapi.testclient import TestClient
from test_bus_contract import validator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "controller"))
from simagents import run_agents  # noqa: E402

HOST = "sim-a"


Sent = dict[str, list[dict]]


@pytest.fixture
def simulated(client: TestClient) -> Iterator[Sent]:
    """One simulated agent of HOST, enrolled, in a thread of its own until the test ends;
    yields the messages it sent by kind (the controller deletes those it handled)."""
    sent: Sent = {"registrations": [], "acks": []}
    url = enroll_host(client, HOST)
    loop, stop = asyncio.new_event_loop(), asyncio.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            loop.run_until_complete(run_agents([(HOST, url)], stop, record=lambda kind, m: sent[kind].append(m)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield sent
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=30)
    assert not thread.is_alive(), "the simulated agent did not stop"
    assert failure == []


def test_simulated_agent_acks_a_two_phase_rollout_like_an_agent(
    client: TestClient, redis_url: str, simulated: Sent
) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    wait_until(
        lambda: client.get(f"/api/v1/hosts/{HOST}").json().get("acked_generation") == 1,
        what=f"{HOST} registered and acked its first generation",
    )
    assert client.post("/api/v1/tenants", json=TENANT).status_code == 201
    wait_until(
        lambda: client.get(f"/api/v1/hosts/{HOST}").json().get("acked_generation") == 2, what="the tenant installed"
    )
    assert client.post("/api/v1/rules", json=rule_body("r1")).status_code == 201
    wait_until(lambda: client.get(f"/api/v1/hosts/{HOST}").json().get("acked_generation") == 3, what="r1 installed")

    moved = client.put("/api/v1/rules/r1", json=rule_body("r1", priority=7))
    assert moved.status_code == 200, moved.text
    rollout = wait_rollout(client, moved.json()["rollout_id"])
    assert rollout["state"] == "succeeded", rollout
    assert rollout["phase"] == "install"
    [target] = rollout["targets"]
    assert (target["host_id"], target["generation"], target["phase"]) == (HOST, 4, "install")

    # The install follows without a phase (as a one-phase message), and is acked so; the
    # reconciler may publish the generation again, and it is acked again, as the agent does.
    fourth = [a for a in list(simulated["acks"]) if a["generation"] == 4]
    assert [(a.get("phase"), a["status"]) for a in fourth[:2]] == [("quiesce", "applied"), (None, "applied")]
    assert {(a.get("phase"), a["status"]) for a in fourth[2:]} <= {(None, "applied")}
    assert fourth[0]["drained"] == 0
    assert all(a["rollout_id"] == rollout["id"] and a["traceparent"] == rollout["traceparent"] for a in fourth)

    # A generation older than the one it runs is refused, as the agent refuses it.
    stale = {**json.loads(r.get(f"lachesis:agent:{HOST}:desired")), "generation": 2}
    stale.pop("phase", None)
    r.xadd(f"lachesis:agent:{HOST}:inbox", {"msg": json.dumps(stale)})
    refused = wait_until(
        lambda: [a for a in list(simulated["acks"]) if a["generation"] == 2 and a["status"] == "rejected"],
        what="the stale generation's refusal",
    )
    assert len(refused) == 1 and refused[0]["rules_installed"] == 0

    heartbeat = json.loads(r.get(f"lachesis:agent:{HOST}:heartbeat"))
    assert heartbeat["generation"] == 4
    assert 0 < r.ttl(f"lachesis:agent:{HOST}:heartbeat") <= 15
    for kind, sent in (
        ("registration", list(simulated["registrations"])),
        ("ack", list(simulated["acks"])),
        ("heartbeat", [heartbeat]),
    ):
        for message in sent:
            assert list(validator(kind).iter_errors(message)) == [], (kind, message)
    r.close()
