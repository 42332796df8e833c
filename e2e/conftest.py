"""The e2e harness: real redis-server, controller and agents as separate processes.

Every process gets a free loopback port and a log file in the test's temporary directory; the
logs of a failed test are attached to its report so a failure explains itself.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from hang_guard import HangGuard

ROOT = Path(__file__).resolve().parent.parent
AGENT_BIN = Path(os.environ.get("LACHESIS_AGENT_BIN", ROOT / "agents" / "target" / "release" / "lachesis-agent"))
CONTROLLER_BIN = Path(sys.executable).parent / "lachesis-controller"
TOKEN = "e2e-token"
# The one agent of the `running` fixture.
HOST = "host-a"


def require(condition: bool, what: str) -> None:
    """Skip when a prerequisite is missing, except under CI, where that is a failure."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"missing prerequisite under CI: {what}")
    pytest.skip(f"missing prerequisite: {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ProcessExited(AssertionError):
    """What a wait was for can no longer happen: the process that would do it is gone."""


def wait_for(what: str, predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll until predicate returns something truthy; fail naming what never happened. The
    timeout only turns a hang into a failure: keep it generous (tests assert no durations)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except ProcessExited:
            raise
        except Exception as exc:  # the thing we wait for may not be up yet
            last_error = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last_error!r})" if last_error else "")
    )


@dataclass
class Process:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        assert self.popen is None or self.popen.poll() is not None, f"{self.name} already running"
        with self.log.open("ab") as out:
            out.write(f"--- start {' '.join(self.argv)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    tmp: Path
    redis_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    processes: dict[str, Process] = field(default_factory=dict)
    # Secure: Redis requires a password of its default user (the controller's). Either way each
    # agent is enrolled first (the controller hears enrolled hosts only) and runs as its own
    # Redis ACL user, as `./lachesis up` does.
    secure: bool = False
    redis_password: str = field(default_factory=lambda: secrets.token_hex(16))
    agent_urls: dict[str, str] = field(default_factory=dict)
    # More arguments of an agent's `run` (a --device here replaces the default flash0).
    agent_args: dict[str, list[str]] = field(default_factory=dict)
    # The controllers' database: SQLite in the test's directory unless a test names one
    # (test_ha.py: PostgreSQL shared by several controllers).
    database_url: str | None = None

    @property
    def redis_url(self) -> str:
        """The controller's (and the test's) Redis URL: full access."""
        auth = f":{self.redis_password}@" if self.secure else ""
        return f"redis://{auth}127.0.0.1:{self.redis_port}/0"

    def enroll(self, host_id: str) -> str:
        """The agent's own Redis URL, from the controller's enrolment API (which replaces
        any earlier secret of the host)."""
        with self.api() as api:
            r = api.post(f"/api/v1/hosts/{host_id}/enrollment")
            assert r.status_code == 201, r.text
            self.agent_urls[host_id] = r.json()["redis_url"]
        return self.agent_urls[host_id]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True, socket_timeout=5)

    def agent_messages(self, kind: str, host_id: str | None = None) -> list[dict]:
        """The messages on the agents' streams of `kind` (acks, registrations, telemetry,
        detours): one host's in stream order, or every host's ordered by entry id."""
        r = self.redis()
        streams = (
            [f"lachesis:agent:{host_id}:{kind}"]
            if host_id
            else list(r.scan_iter(match=f"lachesis:agent:*:{kind}", _type="stream"))
        )
        entries = [
            (tuple(map(int, entry_id.split("-"))), fields)
            for stream in streams
            for entry_id, fields in r.xrange(stream)
        ]
        return [json.loads(fields["msg"]) for _, fields in sorted(entries, key=lambda e: e[0])]

    def api(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)

    def _add(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        proc = Process(name, argv, {**os.environ, **(env or {})}, self.tmp / f"{name}.log")
        self.processes[name] = proc
        return proc

    def start_redis(self) -> Process:
        data = self.tmp / "redis"
        data.mkdir(exist_ok=True)
        proc = self.processes.get("redis") or self._add(
            "redis",
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.redis_port),
                "--dir",
                str(data),
                "--appendonly",
                "yes",
                "--save",
                "",
                "--daemonize",
                "no",
                # Above the default 10,000: bench/controller/scale.py's 5,000 simulated agents
                # hold two connections each. Redis lowers it to what the file limit allows.
                "--maxclients",
                "20000",
                *(["--requirepass", self.redis_password] if self.secure else []),
            ],
        )
        proc.start()
        wait_for("redis-server to answer PING", lambda: self.redis().ping())
        return proc

    def start_controller(
        self, name: str = "controller", port: int | None = None, env: dict[str, str] | None = None
    ) -> Process:
        """A controller serving on `port` (the cluster's api_port by default); another `name`
        and port start another replica on the same database and Redis."""
        port = port or self.api_port
        proc = self.processes.get(name) or self._add(
            name,
            [str(CONTROLLER_BIN)],
            {
                "LACHESIS_DATABASE_URL": self.database_url or f"sqlite:///{self.tmp / 'lachesis.db'}",
                "LACHESIS_REDIS_URL": self.redis_url,
                "LACHESIS_BIND": f"127.0.0.1:{port}",
                "LACHESIS_API_TOKEN": TOKEN,
                **(env or {}),
            },
        )
        proc.start()

        def ready() -> bool:
            if not proc.running:
                raise ProcessExited(f"{name} exited before it was ready; its log ends:\n{proc.text()[-3000:]}")
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200

        # A hang guard only: start-up on a loaded 2-CPU machine (a CI run beside other work)
        # has taken over a minute.
        wait_for(f"{name}'s /readyz", ready, timeout=180)
        return proc

    def start_agent(self, host_id: str) -> Process:
        name = f"agent-{host_id}"
        if host_id not in self.agent_urls:
            self.enroll(host_id)
        proc = self.processes.get(name) or self._add(
            name,
            [
                str(AGENT_BIN),
                "run",
                "--host-id",
                host_id,
                "--redis-url",
                self.agent_urls.get(host_id, self.redis_url),
                *(
                    []
                    if "--device" in self.agent_args.get(host_id, [])
                    else ["--device", f"flash0={self.tmp / (host_id + '-flash0.img')}:64MiB"]
                ),
                *self.agent_args.get(host_id, []),
                "--heartbeat-interval-ms",
                "500",
                "--heartbeat-ttl-s",
                "3",
            ],
            {"RUST_LOG": "info"},
        )
        proc.start()
        return proc

    def host(self, host_id: str) -> dict | None:
        with self.api() as api:
            r = api.get(f"/api/v1/hosts/{host_id}")
            return r.json() if r.status_code == 200 else None

    def rollout(self, rollout_id: str) -> dict:
        with self.api() as api:
            r = api.get(f"/api/v1/rollouts/{rollout_id}")
            assert r.status_code == 200, r.text
            return r.json()

    def wait_rollout_done(self, rollout_id: str, timeout: float) -> dict:
        return wait_for(
            f"rollout {rollout_id} to finish",
            lambda: (r := self.rollout(rollout_id))["state"] != "pending" and r,
            timeout=timeout,
        )

    def stop_all(self) -> None:
        for proc in reversed(list(self.processes.values())):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} ({p.log}) =====\n{p.text()[-6000:]}" for p in self.processes.values())


# A guard per test (pytest-timeout) that only turns a hang into a failure, so that a run
# ends with the stack of what hung and the processes' logs instead of running out of CI's
# time. SIGALRM interrupts the test's thread; the fixtures' teardown then stops the agents,
# which ends a FUSE mount whose callers a hang left stuck in the kernel. No test's outcome
# depends on it: it is far above the longest test here (the conformance module's, which waits
# for its background jobs) and only stops a run that would otherwise never end.
HANG_GUARD_S = 1200


# When SIGALRM cannot end the test (its thread is stuck in the kernel on an unanswered FUSE
# request), e2e/hang_guard.py says where every process is stuck and aborts the test's FUSE
# connections, a little later.
HANG_ABORT_S = HANG_GUARD_S + 120


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(HANG_GUARD_S, method="signal"))


def mount_roots(item: pytest.Item) -> list[Path]:
    """Where the test's mounts are: its tmp_path, and the conformance module's lab folder."""
    args = getattr(item, "funcargs", {})
    roots = [args["tmp_path"]] if isinstance(args.get("tmp_path"), Path) else []
    base = getattr(args.get("lab"), "base", None)
    return roots + ([base] if isinstance(base, Path) else [])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    marker = item.get_closest_marker("timeout")
    after = (marker.args[0] if marker and marker.args else HANG_GUARD_S) + (HANG_ABORT_S - HANG_GUARD_S)
    report = Path(tempfile.gettempdir()) / f"lachesis-e2e-hang-{os.getpid()}.txt"
    guard = HangGuard(item.nodeid, after, report, lambda: mount_roots(item)).start()
    try:
        yield
    finally:
        guard.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cluster = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    if report.failed and cluster is not None:
        report.sections.append(("process logs", cluster.logs()))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    require(shutil.which("redis-server") is not None, "redis-server (apt install redis-server)")
    require(AGENT_BIN.exists(), f"{AGENT_BIN} (cd agents && cargo build --release)")
    require(CONTROLLER_BIN.exists(), f"{CONTROLLER_BIN} (./lachesis install)")
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.stop_all()


@pytest.fixture
def running(cluster: Cluster) -> Cluster:
    """redis-server, the controller and one agent (HOST), enrolled and in step."""
    return start_hosts(cluster, [HOST])


def start_hosts(cluster: Cluster, hosts: tuple[str, ...] | list[str], timeout: float = 30) -> Cluster:
    """redis-server, the controller and an agent per host, each enrolled and at its first
    generation (enrolment ships generation 1, the state as it is, and the agent acks it)."""
    cluster.start_redis()
    cluster.start_controller()
    for host in hosts:
        cluster.start_agent(host)
    for host in hosts:
        wait_for(
            f"{host} to enrol and ack",
            lambda h=host: (x := cluster.host(h)) and x["acked_generation"] >= 1,
            timeout=timeout,
        )
    return cluster


def start_secure(cluster: Cluster, hosts: tuple[str, ...] | list[str]) -> Cluster:
    """start_hosts with a password on Redis: each agent runs as its own Redis user."""
    cluster.secure = True
    return start_hosts(cluster, hosts)


def start_with_datapath(cluster: Cluster, device_size: str, extra_args: list[str] | None = None) -> Path:
    """Starts redis, the controller and the agent HOST with a data path: a FUSE mount of
    `home/data` at `home/mnt` and a measuring flash device (and `extra_args` for its `run`);
    returns `home`."""
    require(os.geteuid() == 0, "root (FUSE mounts)")
    require(Path("/dev/fuse").exists(), "/dev/fuse")
    home = cluster.tmp / "home"
    (home / "data").mkdir(parents=True)
    (home / "mnt").mkdir()
    cluster.agent_args[HOST] = [
        "--mount",
        f"{home / 'data'}:{home / 'mnt'}",
        "--device",
        f"flash0={home / 'flash0.img'}:{device_size}",
        *(extra_args or []),
    ]
    start_hosts(cluster, [HOST], timeout=60)
    return home


def mounted(path: Path) -> bool:
    """Whether a file system is mounted at `path`."""
    return any(line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines())


@pytest.fixture
def confined_home(cluster: Cluster) -> Iterator[Path]:
    """`start_with_datapath` whose agent may write only under `tmp/endpoints`
    (`--endpoint-root`); a mount left behind (a killed agent's) is lazily unmounted at the end."""
    (cluster.tmp / "endpoints").mkdir()
    home = start_with_datapath(cluster, "64MiB", ["--endpoint-root", str(cluster.tmp / "endpoints")])
    try:
        yield home
    finally:
        cluster.stop_all()
        if mounted(home / "mnt"):
            subprocess.run(["umount", "-l", str(home / "mnt")], check=False)
