"""Allocations reach the agents: applying one (by the API or the loop) issues a one-phase
generation whose desired state carries the per-tenant sizes as `caches`. Real redis-server,
real controller; the agents are FakeAgents on the bus."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FakeAgent, enroll, make_settings, now_rfc3339, wait_rollout, wait_until
from fastapi.testclient import TestClient
from test_allocation_api import CURVES, etag_of_proposed, tenant
from test_bus_contract import validator

from lachesis_controller.allocation.loop import LoopConfig
from lachesis_controller.allocation.service import loop_config
from lachesis_controller.app import create_app
from lachesis_controller.config import ConfigError, Settings

Agents = Callable[[str], FakeAgent]


def test_apply_ships_the_sizes_to_every_host_in_one_phase(client: TestClient, agents: Agents) -> None:
    tenant(client, "loop")
    tenant(client, "web")
    a, b = agents("host-a"), agents("host-b")
    first = enroll(client, a)
    enroll(client, b)
    assert "caches" not in first  # no allocation in force yet

    client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "curves": CURVES})
    applied = client.post("/api/v1/allocations/apply", headers={"If-Match": etag_of_proposed(client)})
    assert applied.status_code == 200, applied.text
    rollout_id = applied.headers["Link"].split(">")[0].rsplit("/", 1)[1]

    for agent in (a, b):
        state = agent.wait_desired(2)
        assert list(validator("desired-state").iter_errors(state)) == []
        assert "phase" not in state  # sizes move no flow: one phase
        assert state["rollout_id"] == rollout_id
        assert state["caches"] == [{"tenant": "loop", "size_bytes": 600}, {"tenant": "web", "size_bytes": 400}]
        agent.ack(state)
    assert wait_rollout(client, rollout_id)["state"] == "succeeded"

    # Later generations (any change) keep carrying the allocation in force.
    tenant(client, "batch")
    assert a.wait_desired(3)["caches"][0] == {"tenant": "loop", "size_bytes": 600}


def _telemetry(host: str, tenants: dict[str, int], seq: int) -> dict[str, object]:
    curve = {"policy": "lru", "algorithm": "shards-fixed-rate", "unit": "bytes"}
    shapes = {
        "loop": {"sizes": [1, 599, 600, 1000], "miss_ratios": [1, 1, 0.1, 0.1]},
        "web": {"sizes": [1, 1000], "miss_ratios": [1, 0.5]},
    }
    return {
        "schema": "lachesis.telemetry/v1",
        "host_id": host,
        "sent_at": now_rfc3339(),
        "interval_s": 0.2,
        "tenants": [
            {
                "name": n,
                "ops_read": ops * seq,
                "ops_written": 0,
                "bytes_read": 4096 * ops * seq,
                "bytes_written": 0,
                "latency_us_p99": None,
                # 4 KiB reads: one block reference each, the weight the loop reads.
                "curve": {**curve, **shapes[n], "references": ops * seq},
            }
            for n, ops in tenants.items()
        ],
        "devices": [],
    }


def test_the_loop_rolls_its_decisions_out_to_the_hosts(
    tmp_path: Path,
    redis_url: str,
    agents: Agents,
) -> None:
    settings = make_settings(tmp_path, redis_url, allocation_interval_s=0.2, allocation_reaction_s=1.0)
    with TestClient(create_app(settings)) as client:
        tenant(client, "loop")
        tenant(client, "web")
        a = agents("host-a")
        enroll(client, a)
        # The capacity is stated once, by a proposal; from then on the loop follows telemetry.
        client.post("/api/v1/allocations/proposals", json={"capacity_bytes": 1000, "curves": CURVES})
        seq = 0

        def report(tenants: dict[str, int]) -> None:
            nonlocal seq
            seq += 1
            a.send("telemetry", _telemetry("host-a", tenants, seq))

        def caches() -> list[dict[str, object]] | None:
            report(active)
            state = a.desired()
            return state.get("caches") if state and state["generation"] > 1 else None

        def sizes() -> dict[str, object]:
            return {x["tenant"]: x["size_bytes"] for x in caches() or []}

        # Before two reports give rates, both tenants may look idle (size 0): wait it out.
        active = {"loop": 100, "web": 100}
        wait_until(lambda: sizes() == {"loop": 600, "web": 400}, timeout=15, what="the loop's allocation at host-a")

        # "loop" stops: after the reaction time its space goes to "web".
        active = {"web": 100}
        wait_until(lambda: sizes() == {"loop": 0, "web": 1000}, timeout=20, what="loop's space moving to web")


def config_from_env(env: dict[str, str]) -> LoopConfig:
    return loop_config(Settings.from_env({"LACHESIS_INSECURE_NO_AUTH": "1", **env}))


def test_loop_timing_from_the_environment() -> None:
    cfg = config_from_env({"LACHESIS_ALLOCATION_REACTION_S": "2.5", "LACHESIS_ALLOCATION_INTERVAL_S": "0.5"})
    assert (cfg.reaction_time_s, cfg.interval_s, cfg.gain_threshold) == (2.5, 0.5, 0.01)
    assert config_from_env({}).reaction_time_s == 15.0
    with pytest.raises(ConfigError, match="LACHESIS_ALLOCATION_REACTION_S"):
        config_from_env({"LACHESIS_ALLOCATION_REACTION_S": "soon"})
    with pytest.raises(ConfigError, match="LACHESIS_ALLOCATION_GAIN"):
        config_from_env({"LACHESIS_ALLOCATION_GAIN": "-1"})
