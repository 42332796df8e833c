"""The closed loop on real IO: real redis-server, controller and
agent, the agent's FUSE data path over a backing directory and a measuring flash device, one
tenant per shared trace in its own cgroup replaying through the mount, each through its own
flash cache stage.

- The allocation moves off the equal split, and the real stages' aggregate hit ratio under
  the loop beats the equal split's, same traces, same test.
- After each allocation, every stage's installed size equals its allocation exactly (whole regions).
- A tenant that stops has its space given to the others within two allocation decisions.
- Shrinking a write-back stage under writes loses no acknowledged write (checksums).
- The device reports measured DLWA and the broker's prediction.

Everything is ordered by counters and generations. The comparison is counted in passes of each
tenant's trace (its stage's reads): a pass of every tenant to warm the stages, then a measured
one, under the equal split and under the loop's allocation (made from the curves of the equal
split's passes, with every tenant active), so how fast the host replays changes neither the
curves nor what is measured. A tenant is stopped once the loop has settled (every tenant
active in its latest allocation, installed, and a pass of every trace replayed on it); its
space is looked for in the loop's decisions (generations) after the stop, until the
controller counts it idle. The clocks are hang guards, and the loop's own reaction time.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import HOST, ROOT, Cluster, require, start_with_datapath, wait_for

from lachesis_cli.client import Client
from lachesis_cli.demo import run as demo_run
from lachesis_cli.settings import Target

TRACES = sorted((ROOT.parent / "shared" / "traces").glob("*.csv")) + sorted(
    (ROOT.parent / "shared" / "traces" / "arc").glob("*.lis.zst")
)
# The miniatures' sampling rate (a pass of P3 is ~78 K reads, OLTP ~18 K,
# CloudPhysics ~2 K), fixed rather than fitted to a time.
RATE = 0.02
# Only turns a hang into a failure (a pass of P3 at a few hundred reads per second on a loaded
# host is minutes); no outcome depends on it.
GUARD_S = 900.0
CACHE = 24 << 20
# The cache stages' eviction and resize unit (agents/fs: a loc engine's region).
REGION = 1 << 20


def cgroup2_mount() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mnt, kind, *_ = line.split()
        if kind == "cgroup2":
            return Path(mnt)
    return None


@pytest.fixture
def loop_cluster(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    """The cluster with a data path, fast telemetry and a fast allocation loop."""
    require(cgroup2_mount() is not None, "a cgroup2 mount")
    require(len(TRACES) >= 2, "the shared traces in ../shared/traces")
    monkeypatch.setenv("LACHESIS_ALLOCATION_INTERVAL_S", "2")
    monkeypatch.setenv("LACHESIS_ALLOCATION_REACTION_S", "6")
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "1000")
    cluster.home = start_with_datapath(cluster, "256MiB")  # type: ignore[attr-defined]
    return cluster


def client(cluster: Cluster) -> Client:
    return Client(Target(cluster.url, "e2e-token"), timeout_s=30)


def test_the_loop_beats_an_equal_split_on_the_real_stages(loop_cluster: Cluster) -> None:
    with client(loop_cluster) as api:
        # No timed phase: the seconds are the CLI's, unused here.
        demo = demo_run.Demo(api, loop_cluster.home, 0.0, CACHE)  # type: ignore[attr-defined]
        demo.prepare(TRACES, rate=RATE)
        # Reads of one pass of each tenant's trace: the unit of warm-up and of measurement.
        per_pass = {t.name: int((~t.mini.writes).sum()) for t in demo.tenants}

        demo.start_phase("equal", equal=True)
        with demo.replaying() as check:
            warm = counted(demo, check, per_pass, "a pass of every tenant on the equal split")
            end = counted(
                demo,
                check,
                {k: reads(warm[k]) + per_pass[k] for k in per_pass},
                "a measured pass of every tenant on the equal split",
            )
        equal = window(warm, end, per_pass)

        applied_at = demo.start_phase("loop", equal=False)
        with demo.replaying() as check:
            # The curves are the equal phase's passes; the loop's first allocation with every
            # tenant active is made from them. Measured once every tenant has replayed a pass on
            # the stages at the loop's latest allocation.
            allocation, warm = loop_allocation_warm(api, demo, check, applied_at, per_pass)
            end = counted(
                demo,
                check,
                {k: reads(warm[k]) + per_pass[k] for k in per_pass},
                "a measured pass of every tenant under the loop",
            )
            # Installed = allocated once the agent acked every generation (the loop's included).
            installed = acked_stages(api, demo, check)
        loop = window(warm, end, per_pass)
        loop["allocation"] = allocation
        report = f"per pass {per_pass}\nequal split {equal}\nloop {loop}"
        print(report)

        # Sizes are whole regions (the equal split's and the loop's): installed = allocated exactly.
        for t in equal["tenants"].values():
            assert all(s == demo.equal_share() for s in t["allocated_bytes"]), f"not the equal split\n{report}"
            assert t["installed_bytes"] == t["allocated_bytes"], report
        sizes = list(allocation.values())
        assert max(sizes) - min(sizes) > REGION, f"the loop did not move off the equal split\n{report}"
        for name, s in installed.items():
            assert s["installed_bytes"] == s["allocated_bytes"], f"{name}: {s}\n{report}"
            assert s["allocated_bytes"] % REGION == 0, f"{name}: {s}\n{report}"
        assert loop["hit_ratio"] > equal["hit_ratio"], report

        devices = demo.devices()
        assert devices and all(d["kind"] == "measured" for d in devices), devices
        for d in devices:
            assert d["host_bytes_written"] > 0 and d["dlwa"] is not None and d["dlwa"] >= 1.0, devices
            assert d["predicted_dlwa"] is not None, devices
        demo.clean_up()


def reads(stage: dict) -> int:
    """Block reads a stage has counted since it was built (each 4 KiB pread is one)."""
    return int(stage["hits"] or 0) + int(stage["misses"] or 0)


def until(what: str | Callable[[], str], predicate: Callable[[], Any], check: Callable[[], None]) -> Any:
    """Poll until predicate returns something truthy; a replayer that died fails at once.
    GUARD_S only turns a hang into a failure: how much IO happens meanwhile decides nothing."""
    deadline = time.monotonic() + GUARD_S
    while (value := predicate()) is None or value is False:
        check()
        if time.monotonic() >= deadline:  # a hang guard only, as conftest.wait_for's
            raise TimeoutError(f"timed out after {GUARD_S:g} s waiting for {what if isinstance(what, str) else what()}")
        time.sleep(0.5)
    return value


def counted(demo: demo_run.Demo, check: Callable[[], None], targets: dict[str, int], what: str) -> dict[str, dict]:
    """Per tenant, the first report of its stage seen with at least targets[tenant] reads."""
    got: dict[str, dict] = {}

    def done() -> dict[str, dict] | None:
        for name, stage in demo.stage_counters().items():
            if name not in got and reads(stage) >= targets[name]:
                got[name] = stage
        return got if len(got) == len(targets) else None

    return until(what, done, check)  # type: ignore[no-any-return]


def window(first: dict[str, dict], last: dict[str, dict], per_pass: dict[str, int]) -> dict[str, Any]:
    """Each tenant's hit ratio over the reads its stage counted between its two reports (at
    least a pass), the sizes then, and their aggregate over one pass of every trace: a window
    runs over its pass by what the agent's report interval holds, which must not weigh."""
    tenants = {}
    for name in first:
        a, b = first[name], last[name]
        hits, total = b["hits"] - a["hits"], reads(b) - reads(a)
        tenants[name] = {
            "reads": total,
            "hits": hits,
            "hit_ratio": hits / total,
            "allocated_bytes": [a["allocated_bytes"], b["allocated_bytes"]],
            "installed_bytes": [a["installed_bytes"], b["installed_bytes"]],
        }
    ratio = sum(per_pass[k] * t["hit_ratio"] for k, t in tenants.items()) / sum(per_pass.values())
    return {"hit_ratio": ratio, "tenants": tenants}


def loop_allocation_warm(
    api: Client, demo: demo_run.Demo, check: Callable[[], None], applied_at: datetime, per_pass: dict[str, int]
) -> tuple[dict[str, float], dict[str, dict]]:
    """The loop's allocation made after `applied_at` with every tenant active, once every
    tenant has replayed per_pass reads on its stage at that allocation, installed (started
    over when the loop allocates again meanwhile); the stages' reports then."""
    since: dict[str, Any] = {}
    seen: dict[str, Any] = {}  # computed_at -> sizes of each allocation seen, for the failure message

    def warmed() -> tuple[dict[str, float], dict[str, dict]] | None:
        current = api.get("/api/v1/allocations/summary")["current"]
        if current is not None:
            seen.setdefault(current["computed_at"], None)
        if (
            current is None
            or current["computed_by"] != "allocation-loop"
            or datetime.fromisoformat(current["computed_at"]) <= applied_at
        ):
            return None
        shares = {a["tenant"]: a["current"] for a in api.get("/api/v1/allocations")}
        seen[current["computed_at"]] = {n: (round(sh["size_bytes"]), sh["idle"]) for n, sh in shares.items() if sh}
        if any(shares.get(t.name) is None or shares[t.name]["idle"] for t in demo.tenants):
            return None
        stages = demo.stage_counters()
        if since.get("at") != current["computed_at"]:
            # Counted from the first report with every stage installed at this allocation.
            if len(stages) < len(demo.tenants) or not all(
                s["installed_bytes"] is not None
                and abs(s["allocated_bytes"] - shares[name]["size_bytes"]) <= 1
                and abs(s["installed_bytes"] - s["allocated_bytes"]) <= REGION
                for name, s in stages.items()
            ):
                return None
            since.clear()
            since.update(at=current["computed_at"], reads={name: reads(s) for name, s in stages.items()})
        if all(reads(stages[name]) - since["reads"][name] >= per_pass[name] for name in per_pass):
            return {name: shares[name]["size_bytes"] for name in per_pass}, stages
        return None

    return until(
        lambda: (
            f"the loop's allocation after {applied_at} with every tenant active, and a pass of "
            f"every tenant on it; allocations seen (size, idle): {seen}"
        ),
        warmed,
        check,
    )  # type: ignore[no-any-return]


def acked_stages(api: Client, demo: demo_run.Demo, check: Callable[[], None]) -> dict[str, dict]:
    """The stages' reports sent after the agent had acked the latest generation."""

    def settled() -> dict[str, dict] | None:
        host = api.get(f"/api/v1/hosts/{HOST}")
        if host["acked_generation"] != host["desired_generation"]:
            return None
        seen = time.time()
        stages = demo.counters_after(seen)
        if api.get(f"/api/v1/hosts/{HOST}")["desired_generation"] != host["desired_generation"]:
            return None
        return {t.name: stages[t.stage] for t in demo.tenants}

    return until("the agent to ack the latest generation and report its stages", settled, check)  # type: ignore[no-any-return]


def test_a_stopped_tenant_gives_its_space_within_two_decisions(loop_cluster: Cluster) -> None:
    with client(loop_cluster) as api:
        demo = demo_run.Demo(api, loop_cluster.home, 0.0, CACHE)  # type: ignore[attr-defined]
        demo.prepare(TRACES, rate=RATE)
        n = len(demo.tenants)
        per_pass = {t.name: int((~t.mini.writes).sum()) for t in demo.tenants}
        applied_at = demo.start_phase("loop", equal=False)
        with demo.replaying() as replays:
            # The loop settled with every tenant active: its latest allocation, installed, with
            # a pass of every tenant replayed on it.
            allocation, _ = loop_allocation_warm(api, demo, replays, applied_at, per_pass)
            # The tenant with the most space stops; the others go on.
            stopped = max(allocation, key=lambda name: allocation[name])
            stage = next(t.stage for t in demo.tenants if t.name == stopped)
            # Every loop decision in a generation after `before` is counted, one made just
            # before the stop included.
            before, shipped = until("the agent to ack the latest generation", lambda: in_step(loop_cluster), replays)
            held = shipped[stage]
            assert held > REGION, f"{stopped} holds no space to give: {allocation} {shipped}"
            replays.stop(stopped)

            def idle() -> dict[str, dict] | None:
                current = api.get("/api/v1/allocations/summary")["current"]
                if current is None or current["computed_by"] != "allocation-loop":
                    return None
                shares = {a["tenant"]: a["current"] for a in api.get("/api/v1/allocations")}
                return shares if shares.get(stopped) and shares[stopped]["idle"] else None

            # The controller counts it idle (no IO for the reaction time) and allocates without it.
            shares = until(f"the controller to count {stopped} idle", idle, replays)
            decisions = loop_decisions(api, loop_cluster, before)
            # The agent acked it and reports every stage at its new size.
            installed = acked_stages(api, demo, replays)
        report = (
            f"{stopped} stopped holding {held} (generation {before}); loop decisions since: {decisions}; "
            f"allocation: { {k: (v['size_bytes'], v['idle']) for k, v in shares.items() if v} }; "
            f"installed: { {k: (v['allocated_bytes'], v['installed_bytes']) for k, v in installed.items()} }"
        )
        print(report)

        assert all(not shares[t.name]["idle"] for t in demo.tenants if t.name != stopped), (
            f"another tenant idle\n{report}"
        )
        given = [i for i, (_, sizes) in enumerate(decisions) if sizes.get(stage) == 0]
        assert given, f"{stopped} kept its space\n{report}"
        assert given[0] < 2, f"{stopped}'s space went only at allocation decision {given[0] + 1}\n{report}"
        _, sizes = decisions[given[0]]
        # All of it to the others: the whole cache is theirs (to the byte, one per tenant).
        assert abs(sum(sizes.values()) - CACHE) <= n, report
        for name, s in installed.items():
            assert s["installed_bytes"] == s["allocated_bytes"], f"{name}: {s}\n{report}"
            assert s["allocated_bytes"] % REGION == 0, f"{name}: {s}\n{report}"
        assert installed[stopped]["allocated_bytes"] == 0, report
        demo.clean_up()


def in_step(cluster: Cluster) -> tuple[int, dict[str, int]] | None:
    """(generation, cache stage -> size) the agent was last sent, once it has acked it."""
    state = json.loads(cluster.redis().get(f"lachesis:agent:{HOST}:desired"))
    host = cluster.host(HOST)
    if not host or host["acked_generation"] != state["generation"] or host["desired_generation"] != state["generation"]:
        return None
    return state["generation"], cache_sizes(state)


def cache_sizes(state: dict) -> dict[str, int]:
    return {s["name"]: s["size_bytes"] for s in state.get("stages", []) if s["kind"] == "cache"}


def loop_decisions(api: Client, cluster: Cluster, after: int) -> list[tuple[int, dict[str, int]]]:
    """(generation, cache stage -> size) of every allocation the loop rolled out to the agent
    in a generation after `after`, in order (from its rollouts and the agent's inbox)."""
    loop = {
        t["generation"]
        for r in api.get("/api/v1/rollouts?limit=500")
        if r["cause"].startswith("cache allocation: ")
        for t in r["targets"]
        if t["host_id"] == HOST
    }
    out = {}
    for _, fields in cluster.redis().xrange(f"lachesis:agent:{HOST}:inbox"):
        state = json.loads(fields["msg"])
        if state["generation"] > after and state["generation"] in loop and state.get("phase") != "quiesce":
            out[state["generation"]] = cache_sizes(state)
    return sorted(out.items())


WRITER = r"""
import hashlib, os, sys
path, blocks, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
for i in range(blocks):
    block = hashlib.sha256(f"{start}-{i}".encode()).digest() * 128
    os.pwrite(fd, block, i * 4096)
    # One line per acknowledged write: the test learns how far the writer got.
    print(i, flush=True)
os.close(fd)
"""


def test_shrinking_a_write_back_stage_under_writes_loses_no_acknowledged_write(loop_cluster: Cluster) -> None:
    home: Path = loop_cluster.home  # type: ignore[attr-defined]
    with loop_cluster.api() as api:
        assert (
            api.post(
                "/api/v1/tenants", json={"name": "writer", "classifiers": [{"kind": "path_prefix", "value": "/wb/"}]}
            ).status_code
            == 201
        )
        stage = {
            "name": "cache/wb",
            "kind": "cache",
            "owner": "writer",
            "size_bytes": 32 << 20,
            "engine": "loc",
            "write_mode": "back",
            "max_dirty_bytes": 16 << 20,
        }
        assert api.post("/api/v1/stages", json=stage).status_code == 201, "stage"
        rule = {
            "name": "wb",
            "priority": 5,
            "match": {"tenant": "writer"},
            "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/wb"}}],
        }
        created = api.post("/api/v1/rules", json=rule)
        assert created.status_code == 201, created.text
        loop_cluster.wait_rollout_done(created.json()["rollout_id"], timeout=60)
        (home / "mnt" / "wb").mkdir()
        target = home / "mnt" / "wb" / "data.bin"
        blocks = 6000  # 23 MiB: more than the stage will shrink to
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(target), str(blocks), "1"], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None
        acked = 0
        for line in writer.stdout:
            acked = int(line) + 1
            if acked == blocks // 3:
                # Shrink while the writer is a third of the way in and dirty data is held.
                r = api.patch("/api/v1/stages/cache/wb", json={"size_bytes": 2 << 20})
                assert r.status_code == 200, r.text
        assert writer.wait(timeout=300) == 0
        assert acked == blocks
        wait_for(
            "the shrunk stage installed",
            lambda: installed(api, "cache/wb") is not None and installed(api, "cache/wb") <= (2 << 20) + REGION,
            timeout=60,
        )
        expect = [hashlib.sha256(f"1-{i}".encode()).digest() * 128 for i in range(blocks)]
        data = target.read_bytes()
        bad = [i for i in range(blocks) if data[i * 4096 : (i + 1) * 4096] != expect[i]]
        assert not bad, f"{len(bad)} blocks differ through the mount, first {bad[:5]}"
        # The backing file has every acknowledged write once the stage wrote back (sync).
        with open(target, "rb+") as f:
            os.fsync(f.fileno())
        backing = (home / "data" / "wb" / "data.bin").read_bytes()
        bad = [i for i in range(blocks) if backing[i * 4096 : (i + 1) * 4096] != expect[i]]
        assert not bad, f"{len(bad)} blocks differ in the backing file, first {bad[:5]}"


def installed(api, name: str) -> int | None:  # type: ignore[no-untyped-def]
    r = api.get(f"/api/v1/stages/{name}")
    hosts = [h for h in r.json()["hosts"] if h.get("installed_bytes") is not None] if r.status_code == 200 else []
    return hosts[0]["installed_bytes"] if hosts else None
