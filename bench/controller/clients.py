"""REST capacity: 200 concurrent clients, closed loop, 90% reads, against one or more
controller replicas on PostgreSQL (issue 36's goal: read p99 < 100 ms and >= 2,000 reads/s,
writes p99 < 500 ms).

The deployment is scale.py's: a real redis-server, a throw-away PostgreSQL, --replicas
controller processes on it (the leader lease elects one to run the background loops) and
--agents simulated agents (simagents.py) that ack every rollout. One tenant per --tenants
with a rule each is made first. Then --clients clients, spread over the replicas in turn as a
load balancer would, each on a keep-alive connection of its own made before the clock starts,
run for --seconds: a client sends a request, reads the whole answer and sends the next (closed
loop, no think time). A request is a read (GET of the tenants, the rules, one rule, the hosts,
the rollouts, picked at random; --read-paths names others, e.g. /api/v1/tenants/{tenant}) or, with probability --write-share, a write (PUT of one
tenant's classifiers: a one-phase rollout to every host).

The clients are a minimal HTTP/1.1 client on asyncio streams, not httpx: at 2,000 requests/s
httpx costs a core of its own, which on a 2-core machine would be taken from the controller
and counted as its latency. Prints per run and as the median of --runs runs: reads/s,
writes/s, p50/p99 of reads and writes in ms, errors (non-2xx or a broken connection), and the
CPU seconds per request of the controllers, PostgreSQL, Redis and the clients' own process; progress on stderr, a
Markdown table on stdout (or one JSON object with --json).

  .lachesis/venv/bin/python bench/controller/clients.py [--clients 200] [--seconds 15] [--runs 3] [--replicas 1] [--agents 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from load import READS, rule, tenant  # noqa: E402
from scale import (  # noqa: E402
    TOKEN,
    Deployment,
    enroll_all,
    pct,
    postgres_bindir,
    postgres_server_class,
    start_simulators,
    wait_first_acks,
)


class Connection:
    """One keep-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: bytes = b"") -> int:
        """The answer's status; the body is read and dropped."""
        if self.writer is None:
            await self.connect()
        assert self.reader is not None and self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("closed by the server")
        status = int(status_line.split(b" ", 2)[1])
        length, close = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                raise ConnectionError("chunked answers are not expected from the controller")
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        await self.reader.readexactly(length)
        if close:
            await self.close()
        return status

    async def close(self) -> None:
        writer, self.writer, self.reader = self.writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass


async def client(
    conn: Connection,
    seed: int,
    args: argparse.Namespace,
    stop_at: float,
    out: dict[str, list[float]],
    errors: list[str],
) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:
        i = rng.randrange(args.tenants)
        write = rng.random() < args.write_share
        start = time.perf_counter()
        try:
            if write:
                body = json.dumps(tenant(i, 2000 + i + rng.randrange(1, 10_000) * 1000)).encode()
                status = await conn.request("PUT", f"/api/v1/tenants/t{i:03d}", body)
                what = f"{status} PUT tenant"
            else:
                path = rng.choice(args.read_paths).format(rule=f"r{i:03d}", tenant=f"t{i:03d}")
                status = await conn.request("GET", path)
                what = f"{status} GET {path}"
            ok = status < 300
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            ok, what = False, f"{type(exc).__name__} {exc}"
            await conn.close()
        elapsed = (time.perf_counter() - start) * 1000
        out["write" if write else "read"].append(elapsed)
        if not ok:
            errors.append(what)


async def one_run(dep: Deployment, args: argparse.Namespace, run: int) -> dict[str, float]:
    out: dict[str, list[float]] = {"read": [], "write": []}
    errors: list[str] = []
    ports = [int(u.rsplit(":", 1)[1]) for u in dep.urls]
    conns = [Connection("127.0.0.1", ports[c % len(ports)]) for c in range(args.clients)]
    await asyncio.gather(*(c.connect() for c in conns))
    cpu0 = dep.controller_cpu(), dep.postgres_cpu(), dep.redis_cpu(), time.process_time()
    started = time.monotonic()
    stop_at = started + args.seconds
    await asyncio.gather(*(client(c, run * 10_000 + i, args, stop_at, out, errors) for i, c in enumerate(conns)))
    elapsed = time.monotonic() - started
    cpu1 = dep.controller_cpu(), dep.postgres_cpu(), dep.redis_cpu(), time.process_time()
    await asyncio.gather(*(c.close() for c in conns))
    requests = len(out["read"]) + len(out["write"])
    if errors:
        print(f"    {len(errors)} errors, e.g. {sorted(set(errors))[:3]}", file=sys.stderr, flush=True)
    return {
        "reads_per_s": len(out["read"]) / elapsed,
        "writes_per_s": len(out["write"]) / elapsed,
        "read_p50_ms": pct(out["read"], 0.50) if out["read"] else float("nan"),
        "read_p99_ms": pct(out["read"], 0.99) if out["read"] else float("nan"),
        "write_p50_ms": pct(out["write"], 0.50) if out["write"] else float("nan"),
        "write_p99_ms": pct(out["write"], 0.99) if out["write"] else float("nan"),
        "errors": len(errors),
        "controller_cpu_ms_per_request": (cpu1[0] - cpu0[0]) * 1000 / max(requests, 1),
        "postgres_cpu_ms_per_request": (cpu1[1] - cpu0[1]) * 1000 / max(requests, 1),
        "redis_cpu_ms_per_request": (cpu1[2] - cpu0[2]) * 1000 / max(requests, 1),
        "clients_cpu_ms_per_request": (cpu1[3] - cpu0[3]) * 1000 / max(requests, 1),
    }


def seed(dep: Deployment, tenants: int) -> None:
    with httpx.Client(base_url=dep.urls[0], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as api:
        for i in range(tenants):
            r = api.post("/api/v1/tenants", json=tenant(i, 2000 + i))
            assert r.status_code == 201, r.text
            r = api.post("/api/v1/rules", json=rule(i))
            assert r.status_code == 201, r.text


def scenario(args: argparse.Namespace) -> dict:
    bindir, pg_class = postgres_bindir(), postgres_server_class()
    with tempfile.TemporaryDirectory(prefix="lachesis-clients-") as tmp:
        pg = pg_class(bindir)
        pg.start()
        dep = Deployment(Path(tmp), args.replicas, pg, pg.fresh_database())
        try:
            print(f"{args.replicas} replica(s), {args.agents} simulated agents: starting", file=sys.stderr, flush=True)
            dep.start()
            seed(dep, args.tenants)
            hosts = [f"sim-{i:04d}" for i in range(args.agents)]
            start_simulators(dep, asyncio.run(enroll_all(dep.urls, hosts)), 1)
            wait_first_acks(dep, args.agents)
            runs = []
            for run in range(1, args.runs + 1):
                print(f"  run {run}/{args.runs}: {args.clients} clients for {args.seconds:g} s", file=sys.stderr)
                result = asyncio.run(one_run(dep, args, run))
                print("    " + ", ".join(f"{k}={v:.2f}" for k, v in result.items()), file=sys.stderr, flush=True)
                runs.append(result)
            dep.check_simulators()
        finally:
            dep.stop()
            pg.stop()
    return {
        "replicas": args.replicas,
        "agents": args.agents,
        "clients": args.clients,
        "write_share": args.write_share,
        "seconds": args.seconds,
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
    }


def print_markdown(result: dict) -> None:
    keys = list(result["runs"][0])
    print(
        f"replicas={result['replicas']} agents={result['agents']} clients={result['clients']} "
        f"write_share={result['write_share']:g} seconds={result['seconds']:g} runs={len(result['runs'])}"
    )
    print("| " + " | ".join(["run", *keys]) + " |")
    print("|" + "---|" * (len(keys) + 1))
    for i, r in enumerate(result["runs"], 1):
        print("| " + " | ".join([str(i), *(f"{r[k]:.2f}" for k in keys)]) + " |")
    print("| median | " + " | ".join(f"{result['median'][k]:.2f}" for k in keys) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=1, help="controller processes; clients spread over them")
    parser.add_argument("--agents", type=int, default=10, help="simulated hosts every write rolls out to")
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--write-share", type=float, default=0.1)
    parser.add_argument(
        "--read-paths",
        type=lambda v: v.split(","),
        default=READS,
        help="comma-separated GET paths a read picks from ({tenant} and {rule} name the client's pick); "
        "default: " + ",".join(READS),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the Markdown table")
    args = parser.parse_args()
    if min(args.clients, args.runs, args.replicas, args.agents, args.tenants) < 1 or args.seconds <= 0:
        parser.error("--clients, --runs, --replicas, --agents, --tenants and --seconds must be positive")
    if not 0 <= args.write_share <= 1:
        parser.error("--write-share must be between 0 and 1")
    result = scenario(args)
    if args.json:
        print(json.dumps(result))
    else:
        print_markdown(result)


if __name__ == "__main__":
    main()
