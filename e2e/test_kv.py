"""The agent's key-value front end with real clients: redis-server, the controller and an
agent running `--kv-listen` (and a per-tenant port) on a measuring flash device; a policy
with two tenants by key prefix, a hybrid flash cache each and a key-prefix rule through a
rate limit. pymemcache and libmemcached's memcslap store and read objects; each tenant's
objects land in its own cache stage on its own placement handles; a clean restart comes back
warm; a byte flipped on the device while the agent is down makes its object a counted miss.
Counted polls only."""

from __future__ import annotations

import json
import mmap
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import HOST, Cluster, free_port, require, start_hosts, wait_for
from pymemcache.client.base import Client

POLICY = """
apiVersion: lachesis.dev/v1
kind: Policy
metadata: {name: kv-e2e}
spec:
  tenants:
    - name: sessions
      classifiers: [{kind: key_prefix, value: "sess:"}]
    - name: catalog
      classifiers: [{kind: key_prefix, value: "cat:"}]
  stages:
    - {name: kv/sessions, kind: cache, owner: sessions, engine: hybrid, size_bytes: 33554432}
    - {name: kv/catalog, kind: cache, owner: catalog, engine: hybrid, size_bytes: 33554432}
    - {name: qos/catalog-bulk, kind: qos, owner: catalog, max_iops: 5}
  rules:
    - name: catalog-bulk-limited
      priority: 5
      match: {tenant: catalog, key_prefix: "cat:bulk:"}
      detours: [{what: io, to: {kind: stage, target: qos/catalog-bulk}}]
    - name: catalog-cached
      priority: 10
      match: {tenant: catalog, key_prefix: "cat:"}
      detours: [{what: io, to: {kind: stage, target: kv/catalog}}]
    - name: sessions-cached
      priority: 10
      match: {tenant: sessions, key_prefix: "sess:"}
      detours: [{what: io, to: {kind: stage, target: kv/sessions}}]
"""

# Small objects (Kangaroo's) and large ones (the log's), three times the DRAM in front of
# each stage's flash (1/32 of it), so most live on flash; one the test finds on the device.
SESSIONS = {f"sess:{i}": (f"session-{i}-".encode() * 60)[:600] for i in range(5000)}
CATALOG = {f"cat:item:{i}": (b"%06d" % i) * 1700 for i in range(300)}
MARKER_KEY = "cat:item:marker"
MARKER = b"lachesis-corrupt-me-" + os.urandom(16).hex().encode() + b"-" * 9000


def stats(port: int) -> dict[str, str]:
    """`stats lachesis` of the front end: its STAT lines as a dict."""
    c = Client(("127.0.0.1", port), connect_timeout=5, timeout=10)
    try:
        return {k.decode(): v.decode() if isinstance(v, bytes) else str(v) for k, v in c.stats("lachesis").items()}
    finally:
        c.close()


def stat(port: int, name: str) -> int:
    return int(stats(port).get(name, "0"))


@pytest.fixture
def kv(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> tuple[Cluster, int, int]:
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "500")
    port, catalog_port = free_port(), free_port()
    cluster.agent_args[HOST] = [
        "--device",
        f"flash0={cluster.tmp / 'flash0.img'}:1GiB",
        "--state-dir",
        str(cluster.tmp / "agent-state"),
        "--kv-listen",
        f"127.0.0.1:{port}",
        "--kv-tenant-port",
        f"catalog={catalog_port}",
    ]
    start_hosts(cluster, [HOST], timeout=60)
    return cluster, port, catalog_port


def client(port: int) -> Client:
    return Client(("127.0.0.1", port), connect_timeout=5, timeout=30)


def test_two_tenants_partitions_rate_limit_warm_restart_and_a_corrupt_page(kv: tuple[Cluster, int, int]) -> None:
    require(shutil.which("memcslap") is not None, "memcslap (apt install libmemcached-tools)")
    cluster, port, catalog_port = kv
    with cluster.api() as api:
        applied = api.post("/api/v1/policies", content=POLICY.encode(), headers={"content-type": "application/yaml"})
        assert applied.status_code == 201, applied.text
        rollout = cluster.wait_rollout_done(applied.json()["rollout_id"], timeout=60)
        assert rollout["state"] == "succeeded", rollout

    # Two tenants store and read through pymemcache.
    c = client(port)
    assert c.set(MARKER_KEY, MARKER, noreply=False)
    assert c.set_many(SESSIONS, noreply=False) == []
    assert c.set_many(CATALOG, noreply=False) == []
    # A cache may drop what it cannot hold (Kangaroo admits by set); what it answers is
    # what was stored.
    for objects in (SESSIONS, CATALOG):
        got = c.get_many(list(objects))
        assert got and all(objects[k] == v for k, v in got.items()), len(got)
    assert c.get(MARKER_KEY) == MARKER

    # memcslap on the catalogue's own port: its keys (no prefix) are the catalogue's.
    before = stat(port, "tenant:catalog:sets")
    for test in ("set", "get"):
        run = subprocess.run(
            [
                "memcslap",
                f"--servers=127.0.0.1:{catalog_port}",
                f"--test={test}",
                "--execute-number=300",
                "--concurrency=2",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout + run.stderr
    s = stats(port)
    assert int(s["tenant:catalog:sets"]) - before >= 600, s
    assert int(s["tenant:catalog:get_hits"]) >= 1, s

    # Each tenant's objects are in its own stage: the counts add up per stage.
    assert int(s["stage:kv/sessions:sets"]) == len(SESSIONS), s
    assert int(s["stage:kv/sessions:kangaroo:objects"]) > 0 and int(s["stage:kv/sessions:loc:objects"]) == 0, s
    assert int(s["stage:kv/catalog:loc:objects"]) > 0, s
    assert int(s["stage:kv/sessions:flash_bytes"]) > 0 and int(s["stage:kv/catalog:flash_bytes"]) > 0, s
    assert s["stage:kv/sessions:owner"] == "sessions" and s["stage:kv/catalog:owner"] == "catalog", s

    # ... on its own placement handles (the broker's), which the device measured writes on,
    # and the controller serves the stages' counters as it does the file tenants'.
    state = cluster.redis().get(f"lachesis:agent:{HOST}:desired")
    shipped = {st["name"]: st for st in json.loads(state)["stages"]}
    handles = {name: {p["handle"] for p in shipped[name]["placement"]} for name in ("kv/sessions", "kv/catalog")}
    assert handles["kv/sessions"] and handles["kv/catalog"], shipped
    assert not handles["kv/sessions"] & handles["kv/catalog"], handles

    def served() -> dict[str, dict] | None:
        with cluster.api() as api:
            rows = {
                st["name"]: st["hosts"][0]
                for st in api.get("/api/v1/stages").json()
                if st["name"] in handles and st["hosts"] and st["hosts"][0]["hits"]
            }
        return rows if len(rows) == 2 else None

    rows = wait_for("the controller to serve both KV stages' hits", served, timeout=60)
    assert rows["kv/sessions"]["hits"] >= 1, rows
    assert rows["kv/sessions"]["installed_bytes"] > 0, rows
    # The engine parts with the handles they write with: Kangaroo the small, the log the large.
    for name, row in rows.items():
        assert row["front_end"] == "kv", row
        parts = {p["part"]: p for p in row["parts"]}
        assert {h for p in parts.values() for h in p["handles"]} == handles[name], (row, handles)
    assert {p["part"]: p["objects"] > 0 for p in rows["kv/sessions"]["parts"]} == {"kangaroo": True, "loc": False}, rows

    def device() -> dict | None:
        with cluster.api() as api:
            for d in api.get("/api/v1/devices").json():
                used = {x["handle"] for x in d["handles"] if x["host_bytes_written"] > 0}
                if d["host"] == HOST and handles["kv/sessions"] & used and handles["kv/catalog"] & used:
                    return d
        return None

    flash = wait_for("the device to measure writes on both tenants' handles", device, timeout=60)
    assert flash["dlwa"] is not None and flash["dlwa"] >= 1, flash

    # The KV tenants get curves from their requests, as file tenants do.
    def curve(name: str) -> dict | None:
        with cluster.api() as api:
            r = api.get(f"/api/v1/tenants/{name}/telemetry")
            return r.json().get("curve") if r.status_code == 200 else None

    assert wait_for("a curve of the sessions tenant", lambda: curve("sessions"), timeout=60)["references"] >= len(
        SESSIONS
    )

    # ... and their requests as their IO (the rates the dashboard and the loop read): each
    # poll reads the sessions again, so some report interval holds gets.
    def reads(name: str) -> bool:
        c.get_many(list(SESSIONS)[:100])
        with cluster.api() as api:
            r = api.get(f"/api/v1/tenants/{name}/telemetry")
            return r.status_code == 200 and any(p["read_iops"] > 0 for p in r.json()["series"])

    assert wait_for("the sessions tenant's gets as its read IOPS", lambda: reads("sessions"), timeout=60)

    # The key-prefix rule sends the catalogue's bulk keys through the rate limit; no other
    # key is limited.
    limited_before = stat(port, "tenant:catalog:rate_limited")
    for i in range(20):
        assert c.set(f"cat:bulk:{i}", b"x" * 100, noreply=False)
    s = stats(port)
    limited = int(s["tenant:catalog:rate_limited"]) - limited_before
    assert 1 <= limited <= 20, s
    assert int(s["tenant:sessions:rate_limited"]) == 0, s
    c.close()

    # A clean restart (SIGTERM, start again) comes back warm.
    agent = cluster.processes[f"agent-{HOST}"]
    agent.stop(signal.SIGTERM)
    assert agent.popen is not None and agent.popen.returncode == 0, agent.text()[-3000:]
    # While it is down, a byte of the marker's page goes bad on the device (every copy of it).
    assert corrupt(cluster.tmp / "flash0.img", MARKER[:40]) >= 1
    agent.start()

    c = client(port)
    back = wait_for(
        "the restarted front end to serve sessions it had before",
        lambda: client(port).get_many(list(SESSIONS)),
        timeout=60,
    )
    assert back and all(SESSIONS[k] == v for k, v in back.items()), len(back)
    s = stats(port)
    assert int(s["tenant:sessions:sets"]) == 0, s
    assert int(s["tenant:sessions:get_hits"]) >= len(back), s
    c.close()

    # The corrupt page reads as a miss, counted, never as other bytes.
    c = client(port)
    assert c.get(MARKER_KEY) is None
    s = stats(port)
    assert int(s["stage:kv/catalog:corrupt_reads"]) >= 1, s
    assert int(s["stage:kv/sessions:corrupt_reads"]) == 0, s
    c.close()


def corrupt(image: Path, needle: bytes) -> int:
    """Flips a byte inside every copy of `needle` in the device file; how many it found."""
    found = 0
    with image.open("r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        at = m.find(needle)
        while at != -1:
            m[at + len(needle) // 2] ^= 0xFF
            found += 1
            at = m.find(needle, at + len(needle))
        m.flush()
    return found
