"""Cache allocation end to end: four tenants replay different real traces through a real agent
with eBPF; the controller's allocation loop turns the agent's curves into cache sizes, the
agent measures each tenant's hit ratio at its size with a shadow cache, and the measured total
hit rate under the controller's allocation beats an equal split. When one tenant stops, its
space goes to the others after the reaction time.

The workload (see `miniature.py`): `cloudPhysicsIO.csv`, ARC `OLTP`, and the first and the
second half of ARC `P3` (two halves of a workstation trace: the second has 56% more distinct
blocks and its own loop sizes, so its curve is a different one), each scaled down to 2% of its
blocks by spatially consistent sampling and replayed as O_DIRECT 4 KiB reads of its own file
from its own cgroup. Every tenant replays its trace once per pass of PASS_S seconds, so the
request rates (the allocator's weights) keep the traces' proportions.

Two phases measured on the same replay, both with warm caches: pass 1 under an equal split
(four fixed-size guarantees of C/4, the product's own way to pin sizes), pass 3 under the
loop's allocation (the guarantees removed at the start of pass 2; pass 2 lets the resized
caches warm up). Pass 0 warms the curves and the caches. The total hit rate of a pass is
Σ hits / Σ references of the agent's cumulative shadow-cache counters, read from the
telemetry stream at the pass's boundaries; the shadow caches scale sampled references by
the sampling rate, so each tenant counts in proportion to its references.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from conftest import HOST, ROOT, Cluster, require, wait_for
from miniature import BLOCK, Miniature, arc_blocks, cloudphysics_blocks, make_file, miniature
from test_telemetry import ebpf_host, fast_telemetry  # noqa: F401 (fixtures: cgroup v2, bpffs, 500 ms reports)

TRACES = ROOT / ".." / "shared" / "traces"
RATE = 0.02
PASS_S = 20.0
INTERVAL_S = 1.0
REACTION_S = 6.0
# The cache: 15% of the four working sets together (where the curves differ most: the
# optimum gives the P3 halves' loops what they need, an equal split starves both).
CACHE_SHARE = 0.15


def workloads() -> list[Miniature]:
    p3 = arc_blocks(TRACES / "arc" / "P3.lis.zst")
    half = p3.size // 2
    return [
        miniature("cloudphysics", cloudphysics_blocks(TRACES / "cloudPhysicsIO.csv"), RATE),
        miniature("oltp", arc_blocks(TRACES / "arc" / "OLTP.lis.zst"), RATE),
        miniature("p3-first", p3[:half], RATE),
        miniature("p3-second", p3[half:], RATE),
    ]


@dataclass
class Tenant:
    mini: Miniature
    cgroup: Path
    file: Path
    refs: Path
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def name(self) -> str:
        return self.mini.name

    def start(self, start_at: float, passes: int) -> None:
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("miniature.py")), "replay", "--refs", str(self.refs),
                 "--file", str(self.file), "--cgroup", str(self.cgroup), "--start-at", repr(start_at),
                 "--pass-s", str(PASS_S), "--passes", str(passes)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def check_running(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"replayer of {self.name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")

    def lags(self) -> list[float]:
        return [json.loads(line)["lag_s"] for line in self.log.read_text().splitlines() if line.startswith("{")]


@pytest.fixture
def tenants(fast_telemetry: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Tenant]]:  # noqa: F811
    """Four tenants (cgroups under the test's cgroup, files of their blocks); the controller
    started after this fixture runs its loop every INTERVAL_S with a REACTION_S reaction."""
    require(shutil.which("zstd") is not None, "zstd (apt install zstd)")
    require((TRACES / "arc" / "P3.lis.zst").exists(), f"the traces in {TRACES}")
    monkeypatch.setenv("LACHESIS_ALLOCATION_INTERVAL_S", str(INTERVAL_S))
    monkeypatch.setenv("LACHESIS_ALLOCATION_REACTION_S", str(REACTION_S))
    parent, _ = fast_telemetry
    data = Path(os.environ.get("LACHESIS_TEST_DIR", "/var/tmp")) / f"lachesis-e2e-alloc-{os.getpid()}"
    data.mkdir()
    out: list[Tenant] = []
    try:
        for m in workloads():
            cg = parent / m.name
            cg.mkdir()
            t = Tenant(m, cg, data / f"{m.name}.dat", tmp_path / f"{m.name}.npy", tmp_path / f"replay-{m.name}.log")
            out.append(t)
            np.save(t.refs, m.refs)
            make_file(t.file, m.blocks)
        yield out
    finally:
        for t in out:
            t.stop()
        for t in out:
            t.cgroup.rmdir()
        shutil.rmtree(data, ignore_errors=True)


def telemetry_messages(cluster: Cluster) -> list[tuple[float, dict[str, dict]]]:
    """(sent_at, tenant → report) of every message of the agent so far."""
    out = []
    for _, fields in cluster.redis().xrange("lachesis:telemetry"):
        msg = json.loads(fields["msg"])
        if msg["host_id"] == HOST:
            out.append((datetime.fromisoformat(msg["sent_at"]).timestamp(), {t["name"]: t for t in msg["tenants"]}))
    return out


@dataclass
class Window:
    hit_rate: float
    per_tenant: dict[str, float]
    sizes: dict[str, set[int]]


def measure(cluster: Cluster, names: list[str], start: float, end: float) -> Window:
    """Total hit rate of the shadow caches over [start, end] from the cumulative counters of
    the last reports at or before each end (reports come every 500 ms; samples are drained at
    least every 200 ms before a report)."""
    msgs = telemetry_messages(cluster)
    at = lambda t: max((m for m in msgs if m[0] <= t + 0.25), key=lambda m: m[0])  # noqa: E731
    (_, first), (_, last) = at(start), at(end)
    inside = [m for at_s, m in msgs if start + 0.25 < at_s <= end + 0.25]
    hits = refs = 0
    per = {}
    for n in names:
        a, b = first[n].get("cache"), last[n].get("cache")
        assert a is not None and b is not None, f"{n} has no shadow cache in the window: {first[n]} {last[n]}"
        h, r = b["hits"] - a["hits"], b["hits"] + b["misses"] - a["hits"] - a["misses"]
        hits, refs = hits + h, refs + r
        per[n] = h / r if r else float("nan")
    sizes = {n: {m[n]["cache"]["size_bytes"] for m in inside if m[n].get("cache")} for n in names}
    return Window(hits / refs, per, sizes)


def current_sizes(cluster: Cluster) -> dict[str, dict]:
    with cluster.api() as api:
        r = api.get("/api/v1/allocations")
        assert r.status_code == 200, r.text
        return {t["tenant"]: t["current"] for t in r.json() if t["current"] is not None}


def desired_caches(cluster: Cluster) -> tuple[int, dict[str, int]]:
    state = json.loads(cluster.redis().get(f"lachesis:agent:{HOST}:desired"))
    return state["generation"], {c["tenant"]: c["size_bytes"] for c in state.get("caches", [])}


def test_allocation_beats_an_equal_split_and_reclaims_a_stopped_tenant(tenants: list[Tenant], running: Cluster) -> None:
    names = [t.name for t in tenants]
    capacity = 4 * BLOCK * round(CACHE_SHARE * sum(t.mini.blocks for t in tenants) / 4)
    with running.api() as api:
        for t in tenants:
            r = api.post("/api/v1/tenants", json={"name": t.name, "classifiers": [
                {"kind": "cgroup", "value": f"/{t.cgroup.parent.name}/{t.cgroup.name}"}]})
            assert r.status_code == 201, r.text
            running.wait_rollout_done(r.json()["rollout_id"], timeout=30)
            # The equal split: each tenant pinned to a quarter.
            r = api.put(f"/api/v1/allocations/guarantees/{t.name}",
                        json={"guarantee": {"kind": "fixed_size", "size_bytes": capacity / 4}})
            assert r.status_code == 200, r.text

    start_at = time.time() + 3.0
    for t in tenants:
        t.start(start_at, passes=1000)  # until stopped
    passes = [(start_at + p * PASS_S, start_at + (p + 1) * PASS_S) for p in range(4)]

    # The operator states the cache's capacity once, proposing from the measured curves; from
    # then on the loop follows telemetry.
    def curves() -> dict[str, dict] | None:
        with running.api() as api:
            bodies = {n: api.get(f"/api/v1/tenants/{n}/telemetry").json() for n in names}
        if not all(b["curve"] for b in bodies.values()):
            return None
        return {n: {"sizes": [p["size_bytes"] for p in b["curve"]["points"]],
                    "miss_ratios": [p["miss_ratio"] for p in b["curve"]["points"]]} for n, b in bodies.items()}

    measured = wait_for("curves of all four tenants", curves, timeout=start_at - time.time() + 15, interval=0.5)
    with running.api() as api:
        r = api.post("/api/v1/allocations/proposals", json={"capacity_bytes": capacity, "curves": measured})
        assert r.status_code == 200, r.text
    equal = {n: round(capacity / 4) for n in names}
    wait_for("the equal split at the agent", lambda: desired_caches(running)[1] == equal, timeout=PASS_S / 2)

    # Pass 1 under the equal split; at its end the guarantees go and the loop allocates.
    time.sleep(max(0.0, passes[2][0] - time.time()))
    for t in tenants:
        t.check_running()
    with running.api() as api:
        for n in names:
            assert api.delete(f"/api/v1/allocations/guarantees/{n}").status_code == 204
    _, allocated = wait_for("the loop's allocation at the agent",
                            lambda: (d := desired_caches(running))[1] != equal and d, timeout=REACTION_S + 5)
    time.sleep(max(0.0, passes[3][1] + 0.5 - time.time()))
    for t in tenants:
        t.check_running()

    eq = measure(running, names, *passes[1])
    opt = measure(running, names, *passes[3])
    with running.api() as api:
        summary = api.get("/api/v1/allocations/summary").json()["current"]
    report = (f"equal split {eq.hit_rate:.4f} {eq.per_tenant}; allocation {opt.hit_rate:.4f} {opt.per_tenant}; "
              f"sizes {allocated}; predicted utility {summary['utility']:.1f}; lags "
              f"{ {t.name: t.lags() for t in tenants} }")
    print(report)
    assert all(s == {capacity // 4} for s in eq.sizes.values()), eq.sizes
    final = desired_caches(running)[1]
    assert all(opt.sizes[n] == {final[n]} for n in names), f"the allocation changed during the pass: {opt.sizes}"
    assert final != equal and sum(final.values()) == pytest.approx(capacity, abs=len(names))
    assert all(max(t.lags()[:4], default=0.0) < 0.1 * PASS_S for t in tenants), report
    # The measured total hit rate, not just the predicted one, beats the equal split.
    assert opt.hit_rate > 1.15 * eq.hit_rate, report

    # The tenant with the largest share stops: after the reaction time its space goes to the others.
    before = current_sizes(running)
    stopped = max(names, key=lambda n: before[n]["size_bytes"])
    victim = next(t for t in tenants if t.name == stopped)
    victim.stop()
    stopped_at = time.time()
    after = wait_for(f"{stopped}'s space to be reclaimed",
                     lambda: (c := current_sizes(running))[stopped]["size_bytes"] == 0 and c,
                     timeout=REACTION_S + 15, interval=0.25)
    took = time.time() - stopped_at
    print(f"{stopped} stopped: its space went to the others {took:.1f} s later (reaction time {REACTION_S:g} s)")
    assert took >= REACTION_S - 1.5, f"reclaimed {took:.1f} s after the stop, before the reaction time"
    assert after[stopped]["idle"]
    others = [n for n in names if n != stopped]
    moved = sum(after[n]["size_bytes"] - before[n]["size_bytes"] for n in others)
    assert moved == pytest.approx(before[stopped]["size_bytes"], abs=len(names))
    assert sum(after[n]["size_bytes"] for n in others) == pytest.approx(capacity, abs=len(names))
    generation, caches = wait_for("the new sizes in the agent's desired state",
                                  lambda: (d := desired_caches(running))[1][stopped] == 0 and d, timeout=10)
    assert caches == {n: max(0, round(after[n]["size_bytes"])) for n in names}
    wait_for("the agent to ack it", lambda: running.host(HOST)["acked_generation"] >= generation, timeout=15)
    # The agent's shadow caches run at the new sizes.
    wait_for("telemetry at the new sizes", lambda: all(
        telemetry_messages(running)[-1][1][n]["cache"]["size_bytes"] == caches[n] for n in names), timeout=10)
