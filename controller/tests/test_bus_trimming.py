"""The agents' acks and registrations streams stay bounded: the controller deletes what it
handled (bus.consumer.StreamTrim), so a host's streams hold one entry and one stream node
however many rollouts it acked. Driven by counts of rollouts, on a real redis-server."""

from __future__ import annotations

from collections.abc import Callable

from conftest import TENANT, FakeAgent, enroll, wait_rollout, wait_until
from fastapi.testclient import TestClient

from lachesis_controller.bus.client import INBOX_MAXLEN
from lachesis_controller.bus.consumer import StreamTrim

ROLLOUTS = 80  # above INBOX_MAXLEN
ACKS = "lachesis:agent:host-a:acks"
REGISTRATIONS = "lachesis:agent:host-a:registrations"


def stream_size(agent: FakeAgent, stream: str) -> tuple[int, int]:
    """(entries, bytes) of the stream once the controller has deleted what it handled: only
    the newest entry is kept."""
    wait_until(lambda: agent.redis.xlen(stream) == 1, what=f"{stream} trimmed to its newest entry")
    return 1, int(agent.redis.memory_usage(stream, samples=0))


def test_acks_stream_stays_flat_over_many_rollouts(client: TestClient, agents: Callable[[str], FakeAgent]) -> None:
    client.post("/api/v1/tenants", json=TENANT)
    agent = agents("host-a")
    enroll(client, agent)
    sizes = []
    for n in range(ROLLOUTS):
        prefix = f"/srv/web-{n % 2}/"
        body = {**TENANT, "classifiers": [{"kind": "path_prefix", "value": prefix}]}
        response = client.put("/api/v1/tenants/web", json=body)
        assert response.status_code == 200, response.text
        rollout_id = response.json()["rollout_id"]
        state = wait_until(lambda: (d := agent.desired()) is not None and d["rollout_id"] == rollout_id and d)
        agent.ack(state)
        assert wait_rollout(client, rollout_id)["state"] == "succeeded"
        sizes.append(stream_size(agent, ACKS)[1])

    # A stream node holds a few entries (deleted ones too) before Redis starts a new one and
    # frees the old: the size cycles, its peak in the second half no higher than in the first.
    half = ROLLOUTS // 2
    assert max(sizes[half:]) <= max(sizes[:half])
    # The inbox is capped too (XADD MAXLEN ~): it holds the recent messages, not every one.
    assert INBOX_MAXLEN <= len(agent.inbox()) < ROLLOUTS
    assert agent.inbox()[-1]["rollout_id"] == rollout_id
    # The newest ack is kept and is the last one sent.
    [(_, fields)] = agent.redis.xrange(ACKS)
    assert f'"rollout_id": "{rollout_id}"' in fields["msg"]


def test_registrations_stream_keeps_only_the_newest(client: TestClient, agents: Callable[[str], FakeAgent]) -> None:
    agent = agents("host-a")
    enroll(client, agent)
    for n in range(20):
        agent.register(agent_version=f"0.1.{n}")
    wait_until(lambda: client.get("/api/v1/hosts/host-a").json()["agent_version"] == "0.1.19")
    stream_size(agent, REGISTRATIONS)
    [(_, fields)] = agent.redis.xrange(REGISTRATIONS)
    assert '"agent_version": "0.1.19"' in fields["msg"]


def test_trim_deletes_all_handled_but_the_newest_per_stream() -> None:
    trim = StreamTrim()
    assert trim.handled("s", ["5-0", "7-1", "7-0"]) == ["5-0", "7-0"]
    # A later batch deletes the entry kept before; an older pending entry read again is
    # deleted rather than kept over a newer one.
    assert trim.handled("s", ["9-0"]) == ["7-1"]
    assert trim.handled("s", ["3-0"]) == ["3-0"]
    assert trim.handled("other", ["1-0"]) == []
    trim.forget("s")
    assert trim.handled("s", ["10-0"]) == []
