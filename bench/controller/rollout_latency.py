"""Rollout latency (REST call -> last ack) and bytes on the bus per flow.

Real agents: the release lachesis-agent binary, started like the e2e suite does. Simulated
agents: simagents.py's asyncio tasks, each as its own Redis user, that register, read their
inbox and ack every desired state the way an agent does (api-schemas/README): a quiesce phase
with a quiesce ack (nothing in flight to drain), an install with an install ack.

Two kinds of change per scenario, alternating: the baseline is a one-phase rollout (a
tenant's classifiers change: no flow of an existing rule moves), the measured one a
two-phase rollout (a rule's priority changes: its flow is quiesced and drained at every
host, then installed and resumed). Prints a markdown table of medians over --runs changes
of each kind and the ratio two-phase / one-phase, then the bytes on the bus.
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
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))
from conftest import Cluster, wait_for  # noqa: E402
from simagents import run_agents  # noqa: E402

TENANT = {"name": "bench", "classifiers": [{"kind": "cgroup", "value": "/bench"}]}


def rule(priority: int) -> dict:
    return {
        "name": "bench-rule",
        "priority": priority,
        "match": {"tenant": "bench", "ops": ["read"], "path_prefix": "/data/"},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/bench"}}],
    }


def start_simulated(hosts: list[tuple[str, str]]) -> tuple[threading.Thread, asyncio.AbstractEventLoop, asyncio.Event]:
    """simagents.py's agents, one per (host_id, its own Redis URL), in a thread of their own."""
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(run_agents(hosts, stop))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, loop, stop


def tenant(run: int) -> dict:
    return {**TENANT, "classifiers": [{"kind": "cgroup", "value": f"/bench-{run}"}]}


def timed(api, method: str, path: str, body: dict) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    change = api.request(method, path, json=body)
    assert change.status_code == 200, change.text
    while (rollout := api.get(f"/api/v1/rollouts/{change.json()['rollout_id']}").json())["state"] == "pending":
        time.sleep(0.002)
    elapsed = time.perf_counter() - started
    assert rollout["state"] == "succeeded", rollout
    return elapsed, rollout


def server_clock(rollout: dict) -> float:
    created = datetime.fromisoformat(rollout["created_at"])
    return (max(datetime.fromisoformat(t["acked_at"]) for t in rollout["targets"]) - created).total_seconds()


def measure(cluster: Cluster, hosts: int, runs: int) -> dict:
    wait_for(f"{hosts} hosts enrolled", lambda: _enrolled(cluster) >= hosts, timeout=120)
    one, two, two_server = [], [], []
    with cluster.api() as api:
        api.post("/api/v1/tenants", json=TENANT)
        api.post("/api/v1/rules", json=rule(1))
        time.sleep(0.5)
        for run in range(runs):
            elapsed, rollout = timed(api, "PUT", "/api/v1/tenants/bench", tenant(run))
            assert rollout["phase"] is None, rollout
            one.append(elapsed)
            elapsed, rollout = timed(api, "PUT", "/api/v1/rules/bench-rule", rule(run + 2))
            assert rollout["phase"] == "install", rollout
            two.append(elapsed)
            two_server.append(server_clock(rollout))
    r = cluster.redis()
    host = sorted(r.keys("lachesis:agent:*:inbox"))[0]
    messages = [json.loads(f["msg"]) for _, f in r.xrevrange(host, count=2)]
    install, quiesce = (m for m in messages)
    # The controller deletes the acks it handled but the newest (bus.consumer.StreamTrim):
    # the install's. The quiesce ack is the same message with its phase and drained count.
    [(_, newest)] = r.xrevrange(host.replace(":inbox", ":acks"), count=1)
    install_ack = len(newest["msg"].encode())
    quiesce_acked = {**json.loads(newest["msg"]), "phase": "quiesce", "drained": 0}
    quiesce_ack = len(json.dumps(quiesce_acked, separators=(",", ":")).encode())
    assert quiesce.get("phase") == "quiesce" and install.get("phase") is None, messages
    return {
        "hosts": hosts,
        "one_ms": statistics.median(one) * 1000,
        "two_ms": statistics.median(two) * 1000,
        "two_p90_ms": sorted(two)[int(0.9 * (len(two) - 1))] * 1000,
        "two_server_ms": statistics.median(two_server) * 1000,
        "install_bytes": len(json.dumps(install, separators=(",", ":")).encode()),
        "quiesce_bytes": len(json.dumps(quiesce, separators=(",", ":")).encode()),
        "install_ack_bytes": install_ack,
        "quiesce_ack_bytes": quiesce_ack,
    }


def telemetry_bytes() -> list[tuple[str, int, int]]:
    """(fixture, bytes as one compact message, bytes of its largest tenant entry)."""
    rows = []
    for path in sorted((ROOT / "api-schemas/fixtures/telemetry").glob("valid-*.json")):
        message = json.loads(path.read_text())
        whole = len(json.dumps(message, separators=(",", ":")).encode())
        per_tenant = max(
            (len(json.dumps(t, separators=(",", ":")).encode()) for t in message.get("tenants", [])), default=0
        )
        rows.append((path.name, whole, per_tenant))
    return rows


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
                # the controller hears enrolled hosts only
                sim = start_simulated([(h, cluster.enroll(h)) for h in (f"sim-{i:03d}" for i in range(hosts))])
            result = measure(cluster, hosts, runs)
            if sim is not None:
                sim[1].call_soon_threadsafe(sim[2].set)
                sim[0].join(timeout=5)
            return {"kind": kind, **result}
        finally:
            cluster.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    scenarios = [("real", 1), ("real", 10), ("simulated", 100)]
    results = []
    for kind, hosts in scenarios:
        print(f"scenario: {hosts} {kind} agent(s), {args.runs} changes of each kind", file=sys.stderr, flush=True)
        results.append(scenario(kind, hosts, args.runs))
    print(
        "| agents | changes | one-phase median (ms) | two-phase median (ms) | two-phase p90 (ms) | "
        "two-phase server clock (ms) | two-phase / one-phase |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['hosts']} {r['kind']} | {args.runs}+{args.runs} | {r['one_ms']:.1f} | {r['two_ms']:.1f} | "
            f"{r['two_p90_ms']:.1f} | {r['two_server_ms']:.1f} | {r['two_ms'] / r['one_ms']:.2f} |"
        )
    r = results[0]
    print()
    print("| bus message (one host, one tenant, one rule) | bytes |")
    print("|---|---|")
    print(f"| desired-state, phase quiesce (written to the key and the inbox) | {r['quiesce_bytes']} |")
    print(f"| desired-state, install (written to the key and the inbox) | {r['install_bytes']} |")
    print(f"| ack, phase quiesce | {r['quiesce_ack_bytes']} |")
    print(f"| ack, install | {r['install_ack_bytes']} |")
    total = 2 * (r["quiesce_bytes"] + r["install_bytes"]) + r["quiesce_ack_bytes"] + r["install_ack_bytes"]
    print(f"| two-phase rule update, all of it | {total} |")
    for name, whole, per_tenant in telemetry_bytes():
        print(f"| telemetry {name} (whole message; largest tenant entry {per_tenant}) | {whole} |")


if __name__ == "__main__":
    main()
