"""1,000 simulated agents against one or two controller replicas on PostgreSQL.

Per replica count (--replicas, e.g. 1,2): a real redis-server (a password on the default user,
an ACL user per agent, as `./lachesis up` runs it), a real PostgreSQL (a throw-away cluster,
controller/tests/conftest.py's PostgresServer) and that many controller processes on it. One
tenant and one rule are made, --agents hosts are enrolled over the REST API, and the simulated
agents (simagents.py: register, resync, ack every phase, heartbeat, each as its own Redis user)
start in --agent-procs processes. Once every host acked its first generation, --runs runs of
--rollouts rollouts each: a rule's priority changes (a two-phase rollout to every host: quiesce
and drain, then install), the REST call going to the replicas in turn.

Measured, as medians over the runs:
- rollout latency p50/p99: from before the REST call until the database says the rollout
  succeeded (the controller recorded the last host's install ack); the state is read from
  PostgreSQL directly every 5 ms, so polling costs the controller nothing;
- the two phases on the controller's clock (median): created until the last drain recorded,
  then until it succeeded;
- CPU seconds per rollout of the controller processes (utime + stime from /proc, all
  replicas), of redis-server (INFO cpu), of PostgreSQL (the postmaster's children) and of the
  simulated agents' processes (on stderr only), over
  the run divided by its rollouts; the controllers' idle CPU rate (heartbeats, reconciler)
  over --idle-s before the runs says how much of that is background;
- Redis memory per host: INFO used_memory before enrolment, once every host acked (ACL user,
  streams, desired and heartbeat keys, and the buffers of the agents' two connections, shown
  apart: mem_clients_normal) and after the runs, over the hosts; after each run also (on
  stderr) with the connection buffers and the entries of all streams per host, so that growth
  over many rollouts shows where it is.
Progress on stderr, a Markdown table on stdout (or with --json one JSON object: `{"runs":
[{"replicas", "agents", "rollout_p50_s", "rollout_p99_s", "controller_cpu_s_per_rollout",
"redis_bytes_per_host"}]}`, the Redis bytes per host being those after the runs, nulls for a
replica count pending HA), with the ratio of each replica count to the
first. Two replicas need the controllers' leader lease (ha/lease.py); a controller whose
`/readyz` says nothing about leading is one that cannot share its database, and that row is
printed as "pending HA" rather than measured.

  .lachesis/venv/bin/python bench/controller/scale.py [--agents 1000] [--rollouts 10] [--runs 3] [--replicas 1,2] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))
from conftest import CONTROLLER_BIN, TOKEN, Cluster, Process, free_port, wait_for  # noqa: E402
from rollout_latency import TENANT, rule  # noqa: E402

SIMAGENTS = Path(__file__).with_name("simagents.py")
TICKS = os.sysconf("SC_CLK_TCK")


def postgres_server_class() -> type:
    """controller/tests/conftest.py's PostgresServer (a throw-away cluster at the migration
    head), loaded under its own name: e2e's conftest is already `conftest`."""
    spec = importlib.util.spec_from_file_location("controller_conftest", ROOT / "controller/tests/conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():  # what its imports say about test clients is not ours
        warnings.simplefilter("ignore")
        spec.loader.exec_module(module)
    return module.PostgresServer


def postgres_bindir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if not found:
        sys.exit("scale.py: PostgreSQL is not installed (apt-get install postgresql)")
    return found[-1].parent


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def children(ppid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == ppid:
                pids.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    return pids


@dataclass
class Deployment:
    """Redis, PostgreSQL and N controller replicas, with the simulated agents' processes."""

    tmp: Path
    replicas: int
    pg: object
    database_url: str
    cluster: Cluster = field(init=False)
    controllers: list[Process] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    simulators: list[subprocess.Popen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cluster = Cluster(self.tmp, secure=True)
        self.db: Engine = create_engine(self.database_url, pool_size=1)

    def start(self) -> None:
        self.cluster.start_redis()
        for i in range(self.replicas):
            port = self.cluster.api_port if i == 0 else free_port()
            proc = Process(
                f"controller-{i}",
                [str(CONTROLLER_BIN)],
                {
                    **os.environ,
                    "LACHESIS_DATABASE_URL": self.database_url,
                    "LACHESIS_REDIS_URL": self.cluster.redis_url,
                    "LACHESIS_BIND": f"127.0.0.1:{port}",
                    "LACHESIS_API_TOKEN": TOKEN,
                    "LACHESIS_REPLICA_ID": f"controller-{i}",
                    # A slow rollout is measured, not failed and rolled back.
                    "LACHESIS_ROLLOUT_TIMEOUT_S": "300",
                },
                self.tmp / f"controller-{i}.log",
            )
            self.cluster.processes[proc.name] = proc
            self.controllers.append(proc)
            self.urls.append(f"http://127.0.0.1:{port}")
            proc.start()
        for url in self.urls:
            wait_for(f"{url}/readyz", lambda u=url: httpx.get(f"{u}/readyz", timeout=2).status_code == 200, timeout=120)

    def leads(self) -> list[object]:
        """What each replica's /readyz says about leading (None: nothing, a controller
        without the leader lease)."""
        said = []
        for url in self.urls:
            body = httpx.get(f"{url}/readyz", timeout=5).json()
            flat = {**body, **body.get("checks", {})}
            said.append(next((v for k, v in flat.items() if "lead" in k), None))
        return said

    def controller_cpu(self) -> float:
        return sum(cpu_seconds(p.popen.pid) for p in self.controllers if p.popen is not None)

    def agents_cpu(self) -> float:
        return sum(cpu_seconds(sim.pid) for sim in self.simulators)

    def redis_cpu(self) -> float:
        info = self.cluster.redis().info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def postgres_cpu(self) -> float:
        postmaster = int((self.pg.data / "postmaster.pid").read_text().split()[0])  # type: ignore[attr-defined]
        return cpu_seconds(postmaster) + sum(cpu_seconds(c) for c in children(postmaster))

    def redis_memory(self) -> tuple[int, int]:
        """used_memory, and of it the normal clients' connection buffers."""
        info = self.cluster.redis().info("memory")
        return int(info["used_memory"]), int(info["mem_clients_normal"])

    def stream_entries(self) -> int:
        """Entries in all of Redis's streams (the agents' streams and the hosts' inboxes)."""
        redis = self.cluster.redis()
        keys = list(redis.scan_iter(match="*", count=1000, _type="stream"))
        pipe = redis.pipeline(transaction=False)
        for key in keys:
            pipe.xlen(key)
        return sum(pipe.execute())

    def scalar(self, query: str, **params: object) -> object:
        with self.db.connect() as connection:
            return connection.execute(text(query), params).scalar()

    def phases(self, rollout_id: str) -> tuple[float, float]:
        """Server clock of a two-phase rollout: created until the last host's drain was
        recorded, and from then until it succeeded."""
        with self.db.connect() as connection:
            created, drained, completed = connection.execute(
                text(
                    "SELECT r.created_at, max(t.drained_at), r.completed_at FROM rollouts r "
                    "JOIN rollout_targets t ON t.rollout_id = r.id WHERE r.id = :id GROUP BY r.id"
                ),
                {"id": rollout_id},
            ).one()
        return (drained - created).total_seconds(), (completed - drained).total_seconds()

    def check_simulators(self) -> None:
        for i, sim in enumerate(self.simulators):
            if sim.poll() is not None:
                raise RuntimeError(
                    f"simulated agents {i} exited {sim.returncode}: "
                    f"{(self.tmp / f'simagents-{i}.log').read_text()[-2000:]}"
                )

    def stop(self) -> None:
        for sim in self.simulators:
            sim.terminate()
        for sim in self.simulators:
            try:
                sim.wait(10)
            except subprocess.TimeoutExpired:
                sim.kill()
        self.cluster.stop_all()
        self.db.dispose()


async def enroll_all(urls: list[str], hosts: list[str], concurrency: int = 16) -> dict[str, str]:
    """Each host's agent Redis URL, enrolled over the replicas in turn, `concurrency` at once."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    clients = [httpx.AsyncClient(base_url=u, headers=headers, timeout=120) for u in urls]
    gate = asyncio.Semaphore(concurrency)
    out: dict[str, str] = {}

    async def one(i: int, host: str) -> None:
        async with gate:
            r = await clients[i % len(clients)].post(f"/api/v1/hosts/{host}/enrollment")
            assert r.status_code == 201, r.text
            out[host] = r.json()["redis_url"]
            if len(out) % 100 == 0:
                print(f"  enrolled {len(out)}/{len(hosts)}", file=sys.stderr, flush=True)

    try:
        await asyncio.gather(*(one(i, h) for i, h in enumerate(hosts)))
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))
    return out


def start_simulators(dep: Deployment, agent_urls: dict[str, str], procs: int) -> None:
    hosts = sorted(agent_urls.items())
    for i in range(procs):
        share = hosts[i::procs]
        log = (dep.tmp / f"simagents-{i}.log").open("wb")
        sim = subprocess.Popen(
            [sys.executable, str(SIMAGENTS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert sim.stdin is not None
        sim.stdin.write(json.dumps(share))
        sim.stdin.close()
        dep.simulators.append(sim)
    for i, sim in enumerate(dep.simulators):
        assert sim.stdout is not None
        line = sim.stdout.readline().strip()
        if line != "ready":
            raise RuntimeError(
                f"simulated agents {i} did not start: {(dep.tmp / f'simagents-{i}.log').read_text()[-2000:]}"
            )


def wait_first_acks(dep: Deployment, agents: int) -> None:
    # A counted poll of its own: wait_for would swallow the query psycopg cancels on ^C.
    for _ in range(2400):
        if dep.scalar("SELECT count(*) FROM hosts WHERE acked_generation >= 1") == agents:
            return
        dep.check_simulators()
        time.sleep(0.5)
    raise RuntimeError(f"not every one of {agents} hosts acked its first generation")


def wait_rollout(dep: Deployment, rollout_id: str) -> str:
    """Poll the rollout's state in the database every 5 ms until it is decided."""
    dep.check_simulators()
    polls = 0
    while (state := dep.scalar("SELECT state FROM rollouts WHERE id = :id", id=rollout_id)) == "pending":
        polls += 1
        if polls > 120_000:  # ten minutes of polls: a hang, not a measurement
            raise RuntimeError(f"rollout {rollout_id} still pending after {polls} polls")
        time.sleep(0.005)
    return str(state)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_run(
    dep: Deployment, apis: list[httpx.Client], rollouts: int, start_priority: int, memory_before: int, agents: int
) -> dict[str, float]:
    latencies, quiesce, install = [], [], []
    cpu0, redis0, pg0, agents0 = dep.controller_cpu(), dep.redis_cpu(), dep.postgres_cpu(), dep.agents_cpu()
    for i in range(rollouts):
        api = apis[i % len(apis)]
        started = time.perf_counter()
        change = api.put("/api/v1/rules/bench-rule", json=rule(start_priority + i))
        assert change.status_code == 200, change.text
        rollout_id = change.json()["rollout_id"]
        state = wait_rollout(dep, rollout_id)
        latencies.append(time.perf_counter() - started)
        if state != "succeeded":
            raise RuntimeError(
                f"rollout {rollout_id} {state}: "
                f"{dep.scalar('SELECT reason FROM rollouts WHERE id = :id', id=rollout_id)}"
            )
        phase1, phase2 = dep.phases(rollout_id)
        quiesce.append(phase1)
        install.append(phase2)
    return {
        "p50_s": pct(latencies, 0.50),
        "p99_s": pct(latencies, 0.99),
        "quiesce_s": statistics.median(quiesce),
        "install_s": statistics.median(install),
        "controller_cpu_s": (dep.controller_cpu() - cpu0) / rollouts,
        "redis_cpu_s": (dep.redis_cpu() - redis0) / rollouts,
        "postgres_cpu_s": (dep.postgres_cpu() - pg0) / rollouts,
        # The simulated agents share the machine: at thousands of hosts they are a large part
        # of what a rollout waits for (docs/benchmarks/controller.md).
        "agents_cpu_s": (dep.agents_cpu() - agents0) / rollouts,
        # After the run, to see whether Redis memory per host stays flat run after run.
        "redis_bytes_per_host_now": (dep.redis_memory()[0] - memory_before) / agents,
        "redis_client_bytes_per_host_now": dep.redis_memory()[1] / agents,
        "stream_entries_per_host_now": dep.stream_entries() / agents,
    }


def scenario(args: argparse.Namespace, replicas: int, pg_class: type, bindir: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="lachesis-scale-") as tmp:
        pg = pg_class(bindir)
        pg.start()
        dep = Deployment(Path(tmp), replicas, pg, pg.fresh_database())
        try:
            print(
                f"{replicas} replica(s): starting redis-server, PostgreSQL and the controllers",
                file=sys.stderr,
                flush=True,
            )
            dep.start()
            leads = dep.leads()
            if replicas > 1 and all(lead is None for lead in leads):
                print(
                    f"  /readyz of the replicas says nothing about leading: no leader lease in this tree, "
                    f"{replicas} replicas not measured (pending HA)",
                    file=sys.stderr,
                    flush=True,
                )
                return {"replicas": replicas, "pending": True}
            apis = [
                httpx.Client(base_url=u, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) for u in dep.urls
            ]
            assert apis[0].post("/api/v1/tenants", json=TENANT).status_code == 201
            assert apis[0].post("/api/v1/rules", json=rule(1)).status_code == 201
            memory_before = dep.redis_memory()
            hosts = [f"sim-{i:04d}" for i in range(args.agents)]
            print(f"  enrolling {args.agents} hosts", file=sys.stderr, flush=True)
            started = time.perf_counter()
            agent_urls = asyncio.run(enroll_all(dep.urls, hosts))
            enrol_s = time.perf_counter() - started
            print(
                f"  starting {args.agents} simulated agents in {args.agent_procs} processes",
                file=sys.stderr,
                flush=True,
            )
            started = time.perf_counter()
            start_simulators(dep, agent_urls, args.agent_procs)
            wait_first_acks(dep, args.agents)
            first_ack_s = time.perf_counter() - started
            memory_enrolled = dep.redis_memory()
            cpu0 = dep.controller_cpu()
            time.sleep(args.idle_s)  # the background alone: heartbeats, the reconciler's passes
            idle = (dep.controller_cpu() - cpu0) / args.idle_s
            per_host = [(m - b) / args.agents for m, b in zip(memory_enrolled, memory_before, strict=True)]
            print(
                f"  enrolled in {enrol_s:.1f} s, all acked {first_ack_s:.1f} s later; {per_host[0]:.0f} B of Redis "
                f"per host ({per_host[1]:.0f} B connection buffers); idle controller CPU {idle:.3f} s/s",
                file=sys.stderr,
                flush=True,
            )
            runs = []
            for run in range(args.runs):
                print(f"  run {run + 1}/{args.runs}: {args.rollouts} rollouts", file=sys.stderr, flush=True)
                result = one_run(dep, apis, args.rollouts, 2 + run * args.rollouts, memory_before[0], args.agents)
                print("    " + ", ".join(f"{k}={v:.3f}" for k, v in result.items()), file=sys.stderr, flush=True)
                runs.append(result)
            memory_after = dep.redis_memory()
            for api in apis:
                api.close()
            median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            return {
                "replicas": replicas,
                "pending": False,
                "leads": leads,
                "runs": runs,
                **median,
                "idle_cpu_s_per_s": idle,
                "enrol_s": enrol_s,
                "first_ack_s": first_ack_s,
                "redis_bytes_per_host": per_host[0],
                "redis_client_bytes_per_host": per_host[1],
                "redis_bytes_per_host_after": (memory_after[0] - memory_before[0]) / args.agents,
            }
        finally:
            dep.stop()
            pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--rollouts", type=int, default=10, help="rollouts per run")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--replicas", default="1,2", help="comma-separated controller replica counts")
    parser.add_argument("--agent-procs", type=int, default=2, help="processes the simulated agents are spread over")
    parser.add_argument(
        "--idle-s", type=float, default=5.0, help="seconds of idle controller CPU measured before the runs"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the Markdown tables")
    args = parser.parse_args()
    try:
        replica_counts = [int(r) for r in args.replicas.split(",")]
    except ValueError:
        parser.error(f"--replicas: {args.replicas!r} is not a comma-separated list of numbers")
    if (
        any(r < 1 for r in replica_counts)
        or args.agents < 1
        or args.rollouts < 1
        or args.runs < 1
        or args.agent_procs < 1
    ):
        parser.error("--replicas, --agents, --rollouts, --runs and --agent-procs must be at least 1")
    bindir, pg_class = postgres_bindir(), postgres_server_class()
    results = [scenario(args, r, pg_class, bindir) for r in replica_counts]
    if args.json:
        print(json.dumps(json_report(results, args.agents)))
    else:
        print_markdown(results, args)


def json_report(results: list[dict], agents: int) -> dict:
    """The issue's `--json` object: one entry per replica count, nulls where not measured."""

    def run(r: dict) -> dict:
        measured = not r["pending"]
        return {
            "replicas": r["replicas"],
            "agents": agents,
            "rollout_p50_s": r["p50_s"] if measured else None,
            "rollout_p99_s": r["p99_s"] if measured else None,
            "controller_cpu_s_per_rollout": r["controller_cpu_s"] if measured else None,
            "redis_bytes_per_host": r["redis_bytes_per_host_after"] if measured else None,
        }

    return {"runs": [run(r) for r in results]}


def print_markdown(results: list[dict], args: argparse.Namespace) -> None:
    print(f"agents={args.agents} rollouts={args.rollouts} runs={args.runs} agent_procs={args.agent_procs}")
    print(
        "| replicas | rollout p50 (s) | rollout p99 (s) | quiesce phase (s) | install phase (s) | controller CPU s / rollout | idle controller CPU s/s | "
        "Redis CPU s / rollout | PostgreSQL CPU s / rollout | Redis B / host (enrolled) | of which connections | "
        "Redis B / host (after runs) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = next((r for r in results if not r["pending"]), None)
    for r in results:
        if r["pending"]:
            print(f"| {r['replicas']} | pending HA | | | | | | | | | | |")
            continue
        print(
            f"| {r['replicas']} | {r['p50_s']:.2f} | {r['p99_s']:.2f} | {r['quiesce_s']:.2f} | {r['install_s']:.2f} | {r['controller_cpu_s']:.2f} | {r['idle_cpu_s_per_s']:.3f} | "
            f"{r['redis_cpu_s']:.3f} | {r['postgres_cpu_s']:.2f} | {r['redis_bytes_per_host']:.0f} | "
            f"{r['redis_client_bytes_per_host']:.0f} | {r['redis_bytes_per_host_after']:.0f} |"
        )
    for r in results:
        if base is not None and r is not base and not r["pending"]:
            print(
                f"| {r['replicas']} / {base['replicas']} | {r['p50_s'] / base['p50_s']:.2f} | {r['p99_s'] / base['p99_s']:.2f} | "
                f"{r['quiesce_s'] / base['quiesce_s']:.2f} | {r['install_s'] / base['install_s']:.2f} | "
                f"{r['controller_cpu_s'] / base['controller_cpu_s']:.2f} | | {r['redis_cpu_s'] / base['redis_cpu_s']:.2f} | "
                f"{r['postgres_cpu_s'] / base['postgres_cpu_s']:.2f} | | | |"
            )
    print()
    for r in results:
        if not r["pending"]:
            print(
                f"{r['replicas']} replica(s): enrolment {r['enrol_s']:.1f} s, first generation acked by all "
                f"{r['first_ack_s']:.1f} s after the agents started; /readyz leader: {r['leads']}"
            )


if __name__ == "__main__":
    main()
