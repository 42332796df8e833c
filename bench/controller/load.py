"""REST load: many concurrent clients against one controller, read and write latency.

A real redis-server, the controller (SQLite, auth on) and one real agent, started like the
e2e suite does; the state is seeded with --tenants tenants and a rule each. Then --clients
asyncio clients, each with its own connection, run for --seconds: a client sends a request,
waits for the answer, thinks for an exponentially distributed time of mean --think-ms (0: a
closed loop, the harshest case) and sends the next. A request is a read (GET of the tenants,
the rules, one rule, the hosts, the rollouts) or, with probability --write-share, a write
(PUT of one tenant's classifiers: a one-phase rollout to the agent). Prints per run and as
the median of --runs runs: requests, throughput, p50/p99 of reads and writes, errors (any
non-2xx or transport error) — progress on stderr, the table on stdout. The clients are made
and connected before the clock starts, and with a think time each starts after a first one.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))
from conftest import TOKEN, Cluster, wait_for  # noqa: E402

READS = ["/api/v1/tenants", "/api/v1/rules", "/api/v1/rules/{rule}", "/api/v1/hosts", "/api/v1/rollouts"]


def tenant(i: int, uid: int) -> dict:
    return {"name": f"t{i:03d}", "classifiers": [{"kind": "uid", "value": str(uid)}]}


def rule(i: int) -> dict:
    return {
        "name": f"r{i:03d}",
        "priority": 10 + i,
        "match": {"tenant": f"t{i:03d}", "ops": ["read"], "path_prefix": f"/data/t{i:03d}/"},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": f"cache/t{i:03d}"}}],
    }


def seed(cluster: Cluster, tenants: int) -> None:
    with cluster.api() as api:
        for i in range(tenants):
            assert api.post("/api/v1/tenants", json=tenant(i, 2000 + i)).status_code == 201
            r = api.post("/api/v1/rules", json=rule(i))
            assert r.status_code == 201, r.text


async def client(
    http: httpx.AsyncClient,
    seed_: int,
    args: argparse.Namespace,
    stop_at: float,
    out: dict[str, list[float]],
    errors: list[str],
) -> None:
    rng = random.Random(seed_)
    if args.think_ms > 0:
        # Clients of an orchestrator do not all fire in the same millisecond: each starts
        # after a first think time, as it would after its previous request.
        await asyncio.sleep(rng.expovariate(1000 / args.think_ms))
    while time.monotonic() < stop_at:
        i = rng.randrange(args.tenants)
        write = rng.random() < args.write_share
        start = time.perf_counter()
        try:
            if write:
                r = await http.put(
                    f"/api/v1/tenants/t{i:03d}", json=tenant(i, 2000 + i + rng.randrange(1, 10_000) * 1000)
                )
            else:
                r = await http.get(rng.choice(READS).format(rule=f"r{i:03d}"))
            ok = r.status_code < 300
            what = f"{r.status_code} {r.request.method} {r.request.url.path}"
        except httpx.HTTPError as exc:
            ok, what = False, f"{type(exc).__name__} {exc}"
        elapsed = (time.perf_counter() - start) * 1000
        (out["write" if write else "read"]).append(elapsed)
        if not ok:
            errors.append(what)
        if args.think_ms > 0:
            await asyncio.sleep(rng.expovariate(1000 / args.think_ms))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_run(url: str, args: argparse.Namespace, run: int) -> dict[str, float]:
    out: dict[str, list[float]] = {"read": [], "write": []}
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    # Made (and connected) before the clock starts: making 200 clients blocks this process's
    # loop for seconds, which would be counted as the controller's latency.
    https = [
        httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=httpx.Limits(max_connections=1))
        for _ in range(args.clients)
    ]
    await asyncio.gather(*(h.get("/healthz") for h in https))
    stop_at = time.monotonic() + args.seconds
    await asyncio.gather(*(client(h, run * 10_000 + c, args, stop_at, out, errors) for c, h in enumerate(https)))
    await asyncio.gather(*(h.aclose() for h in https))
    total = len(out["read"]) + len(out["write"])
    if errors:
        print(f"  run {run}: {len(errors)} errors, e.g. {sorted(set(errors))[:3]}", file=sys.stderr)
    return {
        "requests": total,
        "rps": total / args.seconds,
        "errors": len(errors),
        "read_p50": pct(out["read"], 0.50),
        "read_p99": pct(out["read"], 0.99),
        "write_p50": pct(out["write"], 0.50),
        "write_p99": pct(out["write"], 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument(
        "--think-ms", type=float, default=0, help="mean think time between a client's requests; 0: closed loop"
    )
    parser.add_argument("--write-share", type=float, default=0.1)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lachesis-load-") as tmp:
        cluster = Cluster(Path(tmp), secure=True)
        try:
            cluster.start_redis()
            cluster.start_controller()
            cluster.start_agent("host-a")
            wait_for(
                "the agent to ack", lambda: (h := cluster.host("host-a")) and h["acked_generation"] >= 1, timeout=60
            )
            seed(cluster, args.tenants)
            results = []
            for run in range(1, args.runs + 1):
                print(f"run {run}/{args.runs}: {args.clients} clients for {args.seconds:.0f} s ...", file=sys.stderr)
                result = asyncio.run(one_run(cluster.url, args, run))
                print("  " + ", ".join(f"{k}={v:.1f}" for k, v in result.items()), file=sys.stderr)
                results.append(result)
        finally:
            cluster.stop_all()
    keys = list(results[0])
    median = {k: statistics.median(r[k] for r in results) for k in keys}
    print(
        f"clients={args.clients} think_ms={args.think_ms:g} write_share={args.write_share:g} seconds={args.seconds:g} runs={args.runs}"
    )
    print("| " + " | ".join(["run", *keys]) + " |")
    print("|" + "---|" * (len(keys) + 1))
    for i, r in enumerate(results, 1):
        print("| " + " | ".join([str(i), *(f"{r[k]:.1f}" for k in keys)]) + " |")
    print("| median | " + " | ".join(f"{median[k]:.1f}" for k in keys) + " |")


if __name__ == "__main__":
    main()
