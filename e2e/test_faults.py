"""Fault injection with real processes: kill -9 of an agent, the controller or Redis at each
phase of a two-phase rollout, and of an agent under fsync'ed writes through its mount.

The moment of each kill is picked by hooks, never by sleeping: a frozen agent (SIGSTOP)
holds a rollout in its quiesce phase while the other agent drains; a switch quiesce holds
one after every agent drained; resuming it while one agent is frozen leaves it with the
install sent and only the other agent's ack in. Whatever the rollout's fate after the kill
(it may succeed, fail or roll back), recovery must end in one consistent state:

- nothing pending, and on every host desired = acked = installed (the generation the
  agent itself reports in its heartbeat) = the generation on the bus;
- the API agrees with what is installed: the rules GET returns are the rules every host runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from conftest import HOST, Cluster, require, start_secure, start_with_datapath, wait_for

HOSTS = ["host-a", "host-b"]
# host-a always gets to ack; host-b is the one frozen to hold a phase open.
LEADER, LAGGARD = HOSTS
TENANT = {"name": "analytics", "classifiers": [{"kind": "uid", "value": "1001"}]}


def rule(target: str) -> dict:
    return {
        "name": "analytics-reads",
        "priority": 10,
        "match": {"tenant": "analytics", "ops": ["read"]},
        "detours": [{"what": "io", "to": {"kind": "stage", "target": target}}],
    }


@pytest.fixture
def two(cluster: Cluster) -> Iterator[Cluster]:
    start_secure(cluster, HOSTS)
    with cluster.api() as api:
        assert api.post("/api/v1/tenants", json=TENANT).status_code == 201
        created = api.post("/api/v1/rules", json=rule("cache/analytics"))
        assert created.status_code == 201, created.text
    assert cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)["state"] == "succeeded"
    yield cluster


def freeze(cluster: Cluster, host: str) -> None:
    cluster.processes[f"agent-{host}"].popen.send_signal(signal.SIGSTOP)


def thaw(cluster: Cluster, host: str) -> None:
    proc = cluster.processes[f"agent-{host}"]
    if proc.running:
        proc.popen.send_signal(signal.SIGCONT)


def phases(cluster: Cluster, rollout_id: str) -> dict[str, tuple[str, str]]:
    return {t["host_id"]: (t["phase"], t["status"]) for t in cluster.rollout(rollout_id)["targets"]}


def hold_in_quiesce(cluster: Cluster) -> str:
    """A flow move with the laggard frozen: the leader drained, the laggard has not."""
    freeze(cluster, LAGGARD)
    with cluster.api() as api:
        r = api.put("/api/v1/rules/analytics-reads", json=rule("cache/analytics-2"))
        assert r.status_code == 200, r.text
    rollout_id = r.json()["rollout_id"]
    wait_for(
        "the leader to drain while the laggard has not",
        lambda: phases(cluster, rollout_id) == {LEADER: ("drained", "pending"), LAGGARD: ("quiesce", "pending")},
        timeout=60,
    )
    return rollout_id


def hold_drained(cluster: Cluster) -> str:
    """A switch quiesce: every host drained, the install waits for an explicit resume."""
    with cluster.api() as api:
        r = api.post("/api/v1/switch/quiesce", json={"flow": {"tenant": "analytics"}})
        assert r.status_code == 202, r.text
    rollout_id = r.json()["id"]
    wait_for(
        "every host to drain and the rollout to hold",
        lambda: (o := cluster.rollout(rollout_id))["phase"] == "hold"
        and all(t["phase"] == "drained" for t in o["targets"]),
        timeout=60,
    )
    return rollout_id


def hold_in_install(cluster: Cluster) -> str:
    """The held quiesce resumed with the laggard frozen: the install went out to both hosts,
    and only the leader acked it."""
    rollout_id = hold_drained(cluster)
    freeze(cluster, LAGGARD)
    with cluster.api() as api:
        r = api.post("/api/v1/switch/resume", json={"flow": {"tenant": "analytics"}})
        assert r.status_code == 200, r.text
    wait_for(
        "the leader to install while the laggard has not",
        lambda: phases(cluster, rollout_id) == {LEADER: ("install", "applied"), LAGGARD: ("install", "pending")},
        timeout=60,
    )
    return rollout_id


HOLDS = {"quiesce": hold_in_quiesce, "drained": hold_drained, "install": hold_in_install}


def kill_and_restart(cluster: Cluster, victim: str) -> None:
    proc = cluster.processes[{"agent": f"agent-{LEADER}", "controller": "controller", "redis": "redis"}[victim]]
    proc.kill9()
    if victim == "redis":
        cluster.start_redis()
    elif victim == "controller":
        cluster.start_controller()
    else:
        proc.start()


def bus_state(cluster: Cluster, host: str) -> tuple[dict | None, dict | None]:
    r = cluster.redis()
    desired, beat = r.get(f"lachesis:agent:{host}:desired"), r.get(f"lachesis:agent:{host}:heartbeat")
    return (json.loads(desired) if desired else None), (json.loads(beat) if beat else None)


def pending(cluster: Cluster) -> list[str]:
    with cluster.api() as api:
        r = api.get("/api/v1/rollouts", params={"limit": 500})
        assert r.status_code == 200, r.text
        return [o["id"] for o in r.json() if o["state"] == "pending"]


def consistent(cluster: Cluster) -> str | None:
    """None when the whole system agrees; else what still disagrees (for the wait's message)."""
    if stuck := pending(cluster):
        return f"pending rollouts {stuck}"
    for host in HOSTS:
        h = cluster.host(host)
        desired, beat = bus_state(cluster, host)
        if h is None or desired is None or beat is None:
            return f"{host}: host record, desired key or heartbeat missing"
        seen = (h["desired_generation"], h["acked_generation"], desired["generation"], beat["generation"])
        if len(set(seen)) != 1:
            return f"{host}: desired/acked/bus/installed generations {seen}"
    return None


def agreement(cluster: Cluster) -> None:
    """Every host runs the rules the API shows (after the wait for consistency)."""
    with cluster.api() as api:
        r = api.get("/api/v1/rules")
        assert r.status_code == 200, r.text
        shown = sorted((x["name"], json.dumps(x["detours"], sort_keys=True)) for x in r.json())
    for host in HOSTS:
        desired, _ = bus_state(cluster, host)
        assert desired is not None
        running = sorted((x["name"], json.dumps(x["detours"], sort_keys=True)) for x in desired["rules"])
        assert running == shown, f"{host} runs {running}, the API shows {shown}"


@pytest.mark.parametrize("victim", ["agent", "controller", "redis"])
@pytest.mark.parametrize("phase", list(HOLDS))
def test_kill_during_a_two_phase_rollout_recovers_to_one_consistent_state(
    two: Cluster, phase: str, victim: str
) -> None:
    rollout_id = HOLDS[phase](two)
    kill_and_restart(two, victim)
    thaw(two, LAGGARD)
    if phase == "drained":
        # A held quiesce ends only when someone resumes it (or it expires); the orchestrator
        # that asked for it resumes after the fault. 409: it ended already (rolled back).
        def resumed() -> bool:
            with two.api() as api:
                code = api.post("/api/v1/switch/resume", json={"flow": {"tenant": "analytics"}}).status_code
            return code in (200, 409)

        wait_for("the held quiesce to be resumed", resumed, timeout=60)
    wait_for("the system to settle", lambda: consistent(two) is None, timeout=120)
    assert consistent(two) is None
    agreement(two)
    assert two.rollout(rollout_id)["state"] != "pending"
    # The settled system still rolls out: a change now reaches both hosts.
    with two.api() as api:
        r = api.put("/api/v1/rules/analytics-reads", json=rule("cache/analytics-3"))
        assert r.status_code == 200, r.text
    assert two.wait_rollout_done(r.json()["rollout_id"], timeout=60)["state"] == "succeeded"
    wait_for("the system to settle after the change", lambda: consistent(two) is None, timeout=60)
    agreement(two)


# A writer that fsyncs each file and only then reports it (name and SHA-256) on stdout, until
# its IO fails (the mount's daemon was killed). Only reported files were promised durable.
WRITER = r"""
import hashlib, os, sys
root, n = sys.argv[1], 0
while True:
    data = hashlib.sha256(str(n).encode()).digest() * (64 + n % 512)
    name = f"f{n:06d}"
    try:
        fd = os.open(os.path.join(root, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        print(f"error {exc.errno}", flush=True)
        break
    print(name, hashlib.sha256(data).hexdigest(), flush=True)
    n += 1
"""


def test_kill_9_of_the_agent_under_fsynced_writes_keeps_every_fsynced_file(cluster: Cluster) -> None:
    require(os.geteuid() == 0, "root (FUSE mounts)")
    home = start_with_datapath(cluster, "64MiB")
    mnt = home / "mnt"
    (mnt / "w").mkdir()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(mnt / "w")], stdout=subprocess.PIPE, text=True)
    # Its lines are read on a thread, so a writer that hangs fails the wait below, not the suite.
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(writer.stdout), daemon=True)
    reader.start()
    try:
        # The hook: the writer's own count of fsynced files, not a clock.
        wait_for("the writer to fsync 200 files", lambda: len(lines) >= 200 or writer.poll() is not None, timeout=120)
        assert not any(line.startswith("error") for line in lines), f"the writer stopped early: {lines[-1:]}"
        cluster.processes[f"agent-{HOST}"].kill9()
        # Until the writer's IO fails on the dead mount and it exits.
        wait_for("the writer to see the dead mount", lambda: writer.poll() is not None, timeout=120)
        reader.join(timeout=30)
    finally:
        writer.kill()
        writer.wait()
    reported = dict(line.split() for line in lines if not line.startswith("error"))
    # The agent comes back over its own dead mount and serves the same files.
    cluster.processes[f"agent-{HOST}"].start()
    wait_for("the restarted agent to mount again", lambda: (mnt / "w" / "f000000").exists(), timeout=60)
    for name, digest in sorted(reported.items()):
        assert hashlib.sha256((mnt / "w" / name).read_bytes()).hexdigest() == digest, f"{name} read through the mount"
        assert hashlib.sha256((home / "data" / "w" / name).read_bytes()).hexdigest() == digest, (
            f"{name} in the backing dir"
        )
    assert len(reported) >= 200
