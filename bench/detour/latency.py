"""Write latency through a controller detour, against plain writes of the same mount in the
same run (medians of several runs; the machine is shared, so absolute times are noisy).

A real redis-server, the controller and one agent mounting the FUSE switch (root, /dev/fuse).
Rows, each 4 KiB pwrite on a file of the mount:
- plain: a rule sending writes to a local replica directory (the baseline);
- remembered: a rule asking `approve` first, after its `proceed` is remembered (no round trip);
- ask approve: the first write after the rule table changed (one round trip agent -> Redis ->
  controller -> Redis -> agent);
- ask readset: the first write of a read-only flow (the `readset` application switches the
  read set to the primary through a two-phase rollout before it answers).

Usage: sudo .lachesis/venv/bin/python bench/detour/latency.py [--agent-bin PATH] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))

from conftest import AGENT_BIN, Cluster, wait_for  # noqa: E402

BLOCK = 4096


def mounted(path: Path) -> bool:
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


def file_detour(d: Path) -> dict:
    return {"what": "io", "to": {"kind": "file", "target": str(d)}}


def ask(target: str) -> dict:
    return {"what": "header", "to": {"kind": "controller", "target": target}}


def timed_write(fd: int, off: int) -> float:
    t0 = time.perf_counter()
    os.pwrite(fd, b"x" * BLOCK, off)
    return (time.perf_counter() - t0) * 1000


def post(cluster: Cluster, body: dict) -> None:
    with cluster.api() as api:
        r = api.post("/api/v1/rules", json=body)
        assert r.status_code == 201, r.text
        assert cluster.wait_rollout_done(r.json()["rollout_id"], timeout=30)["state"] == "succeeded"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--agent-bin", type=Path, default=Path(os.environ.get("LACHESIS_AGENT_BIN", AGENT_BIN)))
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--writes", type=int, default=200, help="writes per run for the plain and remembered rows")
    args = p.parse_args()
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not args.agent_bin.exists():
        sys.exit("needs root, /dev/fuse and the agent binary (--agent-bin)")
    os.environ["LACHESIS_READSET_QUIET_S"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="detour-bench-"))
    cluster = Cluster(tmp)
    dirs = {n: tmp / n for n in ("backing", "mnt", "r1", "r2")}
    for d in dirs.values():
        d.mkdir()
    for sub in ("plain", "ask", "rs"):
        (dirs["backing"] / sub).mkdir()
    try:
        cluster.start_redis()
        cluster.start_controller()
        cluster._add(
            "agent-b",
            [
                str(args.agent_bin),
                "run",
                "--host-id",
                "b",
                "--redis-url",
                cluster.enroll("b"),
                "--no-ebpf",
                "--mount",
                f"{dirs['backing']}:{dirs['mnt']}",
                "--endpoint-root",
                str(tmp),
                "--heartbeat-interval-ms",
                "500",
                "--heartbeat-ttl-s",
                "3",
            ],
            {"RUST_LOG": "warn"},
        ).start()
        wait_for("the agent", lambda: (h := cluster.host("b")) and h["acked_generation"] >= 1, timeout=30)
        wait_for("the mount", lambda: mounted(dirs["mnt"]), timeout=10)
        r1, r2 = dirs["r1"], dirs["r2"]
        post(
            cluster,
            {
                "name": "plain",
                "priority": 10,
                "match": {"ops": ["write"], "path_prefix": "/plain"},
                "detours": [file_detour(r1)],
            },
        )
        post(
            cluster,
            {
                "name": "ask",
                "priority": 10,
                "match": {"ops": ["write"], "path_prefix": "/ask"},
                "detours": [ask("approve"), file_detour(r1)],
            },
        )
        post(
            cluster,
            {
                "name": "rs-reads",
                "priority": 20,
                "match": {"ops": ["read"], "path_prefix": "/rs"},
                "detours": [file_detour(r1), file_detour(r2)],
            },
        )
        post(
            cluster,
            {
                "name": "rs-writes",
                "priority": 10,
                "match": {"ops": ["write"], "path_prefix": "/rs"},
                "detours": [ask("readset"), file_detour(r1), file_detour(r2)],
            },
        )
        fds = {n: os.open(dirs["mnt"] / n / "f", os.O_RDWR | os.O_CREAT, 0o644) for n in ("plain", "ask", "rs")}
        rows: dict[str, list[float]] = {"plain": [], "remembered": [], "ask approve": [], "ask readset": []}
        for run in range(args.runs):
            # A new rule table: the next ask-rule write asks again.
            post(
                cluster,
                {
                    "name": f"bump-{run}",
                    "priority": 900,
                    "match": {"path_prefix": f"/none{run}"},
                    "detours": [file_detour(r1)],
                },
            )
            rows["ask approve"].append(timed_write(fds["ask"], 0))
            # Interleaved, so both rows see the same machine load.
            plain, remembered = [], []
            for i in range(args.writes):
                plain.append(timed_write(fds["plain"], (i % 64) * BLOCK))
                remembered.append(timed_write(fds["ask"], (i % 64) * BLOCK))
            rows["plain"].append(statistics.median(plain))
            rows["remembered"].append(statistics.median(remembered))
            # The read set is back to all replicas after the quiet time (1 s).
            with cluster.api() as api:
                wait_for(
                    "the read set to be all replicas",
                    lambda: len(api.get("/api/v1/rules/rs-reads").json()["detours"]) == 2,
                    timeout=30,
                )
            rows["ask readset"].append(timed_write(fds["rs"], 0))
            print(f"run {run + 1}/{args.runs} done", file=sys.stderr)
        base = statistics.median(rows["plain"])
        print(f"| write (4 KiB) | median of {args.runs} runs, ms | vs plain |")
        print("|---|---|---|")
        for name, values in rows.items():
            m = statistics.median(values)
            print(f"| {name} | {m:.3f} | {m / base:.1f}x |")
        for fd in fds.values():
            os.close(fd)
    finally:
        cluster.stop_all()
        if mounted(dirs["mnt"]):
            os.system(f"umount -l {dirs['mnt']}")


if __name__ == "__main__":
    main()
