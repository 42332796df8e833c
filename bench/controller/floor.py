"""The floor of the controller's stack on this machine: clients.py's closed-loop clients against
a bare uvicorn + FastAPI app with one GET route that returns bytes made once, on uvloop and
httptools as the controller runs (main.py), with --workers 1 and 2 uvicorn worker processes.

Nothing of the controller runs: no database, no Redis, no auth, no middleware. What one request
costs here (CPU of uvicorn's processes, the parent and its workers, over the requests) is the
least the controller's Python stack can spend on one, so it says how far a goal in requests per
second on this machine is from what any Python handler could reach. The clients are clients.py's
minimal HTTP/1.1 client in this process; their CPU per request is shown too, since on 2 cores
they take from the same CPUs.

  .lachesis/venv/bin/python bench/controller/floor.py [--workers 1,2] [--clients 200] [--seconds 10] [--runs 3] [--json]

Run as `floor.py --serve` by itself, it is the app (uvicorn imports `floor:app`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from clients import Connection  # noqa: E402
from scale import children, cpu_seconds, free_port, pct, wait_for  # noqa: E402

# The size of a cached tenant's answer in clients.py's deployment.
BODY = json.dumps(
    {
        "name": "t000",
        "classifiers": [{"kind": "uid", "value": "2000"}],
        "description": "",
        "created_at": "2026-11-29T10:00:00Z",
        "updated_at": "2026-11-29T10:00:00Z",
    }
).encode()


def make_app():  # type: ignore[no-untyped-def]
    from fastapi import FastAPI, Response

    app = FastAPI()

    @app.get("/floor")
    async def floor() -> Response:
        return Response(BODY, media_type="application/json")

    return app


app = make_app() if os.environ.get("LACHESIS_FLOOR_APP") else None


async def one_run(port: int, pids: list[int], clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors = 0
    conns = [Connection("127.0.0.1", port) for _ in range(clients)]
    await asyncio.gather(*(c.connect() for c in conns))

    async def loop(conn: Connection, stop_at: float) -> None:
        nonlocal errors
        while time.monotonic() < stop_at:
            start = time.perf_counter()
            try:
                ok = await conn.request("GET", "/floor") == 200
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError):
                ok = False
                await conn.close()
            latencies.append((time.perf_counter() - start) * 1000)
            errors += not ok

    cpu0 = sum(cpu_seconds(p) for p in pids), time.process_time()
    started = time.monotonic()
    await asyncio.gather(*(loop(c, started + seconds) for c in conns))
    elapsed = time.monotonic() - started
    cpu1 = sum(cpu_seconds(p) for p in pids), time.process_time()
    await asyncio.gather(*(c.close() for c in conns))
    n = max(len(latencies), 1)
    return {
        "reads_per_s": len(latencies) / elapsed,
        "read_p50_ms": pct(latencies, 0.50),
        "read_p99_ms": pct(latencies, 0.99),
        "errors": errors,
        "server_cpu_ms_per_request": (cpu1[0] - cpu0[0]) * 1000 / n,
        "clients_cpu_ms_per_request": (cpu1[1] - cpu0[1]) * 1000 / n,
    }


def scenario(workers: int, args: argparse.Namespace) -> dict:
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "floor:app", "--app-dir", str(HERE), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--loop", "uvloop", "--http", "httptools", "--no-access-log"]
    argv += ["--log-level", "warning", "--workers", str(workers)]
    server = subprocess.Popen(argv, env={**os.environ, "LACHESIS_FLOOR_APP": "1"}, stdin=subprocess.DEVNULL)
    try:
        wait_for("the floor app", lambda: httpx.get(f"http://127.0.0.1:{port}/floor", timeout=2).status_code == 200)
        # uvicorn's parent answers nothing with --workers > 1; its workers are its children.
        wait_for(f"{workers} worker(s)", lambda: workers == 1 or len(children(server.pid)) >= workers)
        pids = [server.pid, *children(server.pid)]
        runs = []
        for run in range(1, args.runs + 1):
            print(f"  {workers} worker(s), run {run}/{args.runs}", file=sys.stderr, flush=True)
            result = asyncio.run(one_run(port, pids, args.clients, args.seconds))
            print("    " + ", ".join(f"{k}={v:.2f}" for k, v in result.items()), file=sys.stderr, flush=True)
            runs.append(result)
    finally:
        server.terminate()
        server.wait(30)
    return {
        "workers": workers,
        "clients": args.clients,
        "seconds": args.seconds,
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="comma-separated uvicorn worker counts, one scenario each")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the Markdown table")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    if min(args.clients, args.runs, *workers) < 1 or args.seconds <= 0:
        parser.error("--workers, --clients, --runs and --seconds must be positive")
    results = [scenario(w, args) for w in workers]
    if args.json:
        print(json.dumps({"scenarios": results}))
        return
    keys = list(results[0]["median"])
    print("| " + " | ".join(["workers", *keys]) + " |")
    print("|" + "---|" * (len(keys) + 1))
    for r in results:
        print("| " + " | ".join([str(r["workers"]), *(f"{r['median'][k]:.2f}" for k in keys)]) + " |")


if __name__ == "__main__":
    main()
