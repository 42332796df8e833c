"""Rollout latency (REST call -> last ack) and bytes on the bus per flow.

Real agents: the release lachesis-agent binary, started like the e2e suite does. Simulated
agents: asyncio tasks, one Redis connection each, that register, heartbeat, read their
inbox and ack every desired state as applied, the way an agent does (api-schemas/README).

Prints a markdown table; medians over --runs rule updates per scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import redis
import redis.asyncio as aredis

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))
from conftest import Cluster, wait_for  # noqa: E402

TENANT = {"name": "bench", "classifiers": [{"kind": "cgroup", "value": "/sys/fs/cgroup/bench"}]}


def rule(priority: int) -> dict:
    return {
        "name": "bench-rule", "priority": priority,
        "match": {"tenant": "bench", "ops": ["read"], "path_prefix": "/data/"},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/bench"}}],
    }


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def simulated_agent(url: str, host_id: str, stop: asyncio.Event) -> None:
    r = aredis.Redis.from_url(url, decode_responses=True)
    await r.xadd("lachesis:registrations", {"msg": json.dumps({
        "schema": "lachesis.registration/v1", "host_id": host_id, "agent_version": "sim",
        "started_at": now(),
        "capabilities": {"cpus": 1, "devices": [], "kernel": {"release": "6.1", "btf": True, "io_uring": True, "fuse": True}},
    })})
    inbox, last = f"lachesis:agent:{host_id}:inbox", "0-0"
    while not stop.is_set():
        entries = await r.xread({inbox: last}, block=200)
        for _, messages in entries:
            for entry_id, fields in messages:
                last = entry_id
                state = json.loads(fields["msg"])
                await r.xadd("lachesis:acks", {"msg": json.dumps({
                    "schema": "lachesis.ack/v1", "host_id": host_id, "generation": state["generation"],
                    "rollout_id": state["rollout_id"], "status": "applied", "reason": None,
                    "rules_installed": len(state["rules"]), "acked_at": now(),
                    "traceparent": state["traceparent"],
                })})
    await r.aclose()


def start_simulated(url: str, count: int) -> tuple[threading.Thread, asyncio.AbstractEventLoop, asyncio.Event]:
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(asyncio.gather(*(simulated_agent(url, f"sim-{i:03d}", stop) for i in range(count))))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, loop, stop


def measure(cluster: Cluster, hosts: int, runs: int) -> dict:
    wait_for(f"{hosts} hosts enrolled", lambda: _enrolled(cluster) >= hosts, timeout=120)
    latencies, server_side = [], []
    with cluster.api() as api:
        api.post("/api/v1/tenants", json=TENANT)
        api.post("/api/v1/rules", json=rule(1))
        time.sleep(0.5)
        for run in range(runs):
            started = time.perf_counter()
            change = api.put("/api/v1/rules/bench-rule", json=rule(run + 2)).json()
            while (rollout := api.get(f"/api/v1/rollouts/{change['rollout_id']}").json())["state"] == "pending":
                time.sleep(0.002)
            latencies.append(time.perf_counter() - started)
            assert rollout["state"] == "succeeded", rollout
            created = datetime.fromisoformat(rollout["created_at"])
            acked = max(datetime.fromisoformat(t["acked_at"]) for t in rollout["targets"])
            server_side.append((acked - created).total_seconds())
    r = cluster.redis()
    host = r.keys("lachesis:agent:*:desired")[0]
    desired = len(r.get(host).encode())
    ack = len(r.xrevrange("lachesis:acks", count=1)[0][1]["msg"].encode())
    return {
        "hosts": hosts, "median_ms": statistics.median(latencies) * 1000,
        "p90_ms": sorted(latencies)[int(0.9 * (len(latencies) - 1))] * 1000,
        "server_median_ms": statistics.median(server_side) * 1000,
        "desired_bytes": desired, "ack_bytes": ack,
    }


def _enrolled(cluster: Cluster) -> int:
    with cluster.api() as api:
        return sum(1 for h in api.get("/api/v1/hosts").json() if h["acked_generation"] >= 1)


def scenario(kind: str, hosts: int, runs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp))
        try:
            cluster.start_redis()
            cluster.start_controller()
            sim = None
            if kind == "real":
                for i in range(hosts):
                    cluster.start_agent(f"host-{i:02d}")
            else:
                sim = start_simulated(cluster.redis_url, hosts)
            result = measure(cluster, hosts, runs)
            if sim is not None:
                sim[1].call_soon_threadsafe(sim[2].set)
                sim[0].join(timeout=5)
            return {"kind": kind, **result}
        finally:
            cluster.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    results = [scenario("real", 1, args.runs), scenario("real", 10, args.runs), scenario("simulated", 100, args.runs)]
    print("| agents | rollouts | median REST->last ack (ms) | p90 (ms) | median created->last ack, server clock (ms) | desired-state bytes/host | ack bytes/host |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['hosts']} {r['kind']} | {args.runs} | {r['median_ms']:.1f} | {r['p90_ms']:.1f} | "
              f"{r['server_median_ms']:.1f} | {r['desired_bytes']} | {r['ack_bytes']} |")


if __name__ == "__main__":
    main()
