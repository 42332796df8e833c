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

Two phases measured on the same replay, both with warm caches: a pass under an equal split
(four fixed-size guarantees of C/4, the product's own way to pin sizes), then, after the
guarantees are removed, a pass under the loop's allocation. Each measured pass is the first
that begins at least half a pass after the agent's shadow caches run at the sizes measured
(the caches warm up meanwhile); normally passes 1 and 3. If the loop allocates again before
its pass is reported whole, the loop's pass is looked for again at the new allocation: what
is measured is a pass at one allocation, whenever the loop settles. The total hit rate of a pass is
Σ hits / Σ references of the agent's cumulative shadow-cache counters, read from the
telemetry stream at the pass's boundaries; the shadow caches scale sampled references by
the sampling rate, so each tenant counts in proportion to its references.

Passes are told apart by counts, never by clocks: a tenant's pass p is its reads
p·N to (p+1)·N of its N-reference trace, and the agent reports each tenant's cumulative read
count, so the reports around a tenant's pass are found by its own count however late its
replayer runs. The guarantees are removed only after every tenant's equal-split pass has
been reported whole; the stopped tenant's space moves in the first allocation that changes
it, after every earlier one kept it (read from the agent's inbox, generation by generation).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
# Only turns a hang into a failure (a replayer that falls behind its pace takes longer over a
# pass than PASS_S); no outcome depends on it.
GUARD_S = 900.0
# The loop's allocations a measured pass may start over at before the test gives up.
LOOP_ALLOCATIONS = 8
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

    @property
    def per_pass(self) -> int:
        """Reads of one pass (one per reference of the miniature trace)."""
        return int(self.mini.refs.size)

    def start(self, start_at: float, passes: int) -> None:
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("miniature.py")),
                    "replay",
                    "--refs",
                    str(self.refs),
                    "--file",
                    str(self.file),
                    "--cgroup",
                    str(self.cgroup),
                    "--start-at",
                    repr(start_at),
                    "--pass-s",
                    str(PASS_S),
                    "--passes",
                    str(passes),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def check_running(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"replayer of {self.name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}"
            )

    def lags(self) -> list[float]:
        return [json.loads(line)["lag_s"] for line in self.log.read_text().splitlines() if line.startswith("{")]


@pytest.fixture
def tenants(
    fast_telemetry: tuple[Path, Path],  # noqa: F811 - the fixture imported above, by name
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[list[Tenant]]:
    """Four tenants (cgroups under the test's cgroup, files of their blocks); the controller
    started after this fixture runs its loop every INTERVAL_S with a REACTION_S reaction."""
    require(shutil.which("zstd") is not None, "zstd (apt install zstd)")
    require((TRACES / "arc" / "P3.lis.zst").exists(), f"the traces in {TRACES}")
    monkeypatch.setenv("LACHESIS_ALLOCATION_INTERVAL_S", str(INTERVAL_S))
    monkeypatch.setenv("LACHESIS_ALLOCATION_REACTION_S", str(REACTION_S))
    # The caches here are the agent's shadow caches, whose unit is a 4 KiB block (no stage, no
    # 1 MiB region): the loop's sizes are whole blocks, and C/4 is one.
    monkeypatch.setenv("LACHESIS_ALLOCATION_UNIT_BYTES", str(BLOCK))
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


def telemetry_messages(cluster: Cluster) -> list[dict[str, dict]]:
    """tenant → report of every message of the agent so far, in stream order."""
    out = []
    for msg in cluster.agent_messages("telemetry", HOST):
        out.append({t["name"]: t for t in msg["tenants"]})
    return out


def reads(report: dict[str, dict], name: str) -> int:
    return report[name]["ops_read"] if name in report else 0


def pass_window(msgs: list[dict[str, dict]], t: Tenant, p: int) -> tuple[int, int] | None:
    """The reports around tenant t's pass p (its reads p·N to (p+1)·N): the last one before
    the pass began and the first one after it ended; None until the agent reported its end."""
    begin, end = p * t.per_pass, (p + 1) * t.per_pass
    a = max((i for i, m in enumerate(msgs) if reads(m, t.name) <= begin), default=None)
    b = next((i for i, m in enumerate(msgs) if reads(m, t.name) >= end), None)
    return None if a is None or b is None else (a, b)


def first_pass_after(report: dict[str, dict], t: Tenant) -> int:
    """The first pass of tenant t that begins at least half a pass after `report` (so its
    caches warmed up at the sizes of that report for half a pass or more)."""
    return math.ceil((reads(report, t.name) + t.per_pass / 2) / t.per_pass)


def wait_for_sizes(cluster: Cluster, tenants: list[Tenant], sizes: dict[str, int], after: int = 0) -> dict[str, dict]:
    """The first report (from the `after`th on) in which every tenant's shadow cache runs at `sizes`."""

    def found() -> dict[str, dict] | None:
        for t in tenants:
            t.check_running()
        return next(
            (
                m
                for m in telemetry_messages(cluster)[after:]
                if all(m.get(t.name, {}).get("cache", {}).get("size_bytes") == sizes[t.name] for t in tenants)
            ),
            None,
        )

    return wait_for(f"the shadow caches at {sizes}", found, timeout=120, interval=0.5)


@dataclass
class Window:
    hit_rate: float
    per_tenant: dict[str, float]
    sizes: dict[str, set[int]]
    passes: dict[str, int]


def measure(cluster: Cluster, tenants: list[Tenant], passes: dict[str, int]) -> Window:
    """Total hit rate of the shadow caches over each tenant's pass `passes[name]`, from the
    cumulative counters of the reports around it (waiting until every such pass has been
    reported whole), and the sizes the reports inside each pass show."""

    def windows() -> tuple[list[dict[str, dict]], dict[str, tuple[int, int]]] | None:
        for t in tenants:
            t.check_running()
        msgs = telemetry_messages(cluster)
        w = {t.name: pass_window(msgs, t, passes[t.name]) for t in tenants}
        return (msgs, w) if all(w.values()) else None  # type: ignore[return-value]

    msgs, w = wait_for(f"passes {passes} to be reported", windows, timeout=GUARD_S, interval=0.5)
    hits = refs = 0
    per, sizes = {}, {}
    for t in tenants:
        a, b = w[t.name]
        first, last = msgs[a].get(t.name, {}).get("cache"), msgs[b].get(t.name, {}).get("cache")
        assert first is not None and last is not None, f"{t.name} has no shadow cache around pass {passes[t.name]}"
        h, r = last["hits"] - first["hits"], last["hits"] + last["misses"] - first["hits"] - first["misses"]
        hits, refs = hits + h, refs + r
        per[t.name] = h / r if r else float("nan")
        sizes[t.name] = {
            m[t.name]["cache"]["size_bytes"] for m in msgs[a + 1 : b + 1] if m.get(t.name, {}).get("cache")
        }
    return Window(hits / refs, per, sizes, passes)


def inbox_caches(cluster: Cluster) -> list[tuple[int, dict[str, int]]]:
    """(generation, tenant → cache size) of every desired state sent to the agent, in order."""
    out = []
    for _, fields in cluster.redis().xrange(f"lachesis:agent:{HOST}:inbox"):
        state = json.loads(fields["msg"])
        out.append((state["generation"], {c["tenant"]: c["size_bytes"] for c in state.get("caches", [])}))
    return out


def current_sizes(cluster: Cluster) -> dict[str, dict]:
    with cluster.api() as api:
        r = api.get("/api/v1/allocations")
        assert r.status_code == 200, r.text
        return {t["tenant"]: t["current"] for t in r.json() if t["current"] is not None}


def desired_caches(cluster: Cluster) -> tuple[int, dict[str, int]]:
    state = json.loads(cluster.redis().get(f"lachesis:agent:{HOST}:desired"))
    return state["generation"], {c["tenant"]: c["size_bytes"] for c in state.get("caches", [])}


def loop_pass(cluster: Cluster, tenants: list[Tenant], equal: dict[str, int]) -> tuple[dict[str, int], Window]:
    """The loop's allocation at the agent and the first pass of every tenant that begins half a
    pass after the shadow caches run at it; started over at the new allocation when the loop
    allocates again before every such pass is reported whole (its curves may still move)."""
    deadline = time.monotonic() + GUARD_S
    seen: list[dict[str, int]] = []
    while True:
        reported = len(telemetry_messages(cluster))
        _, allocated = wait_for(
            "the loop's allocation at the agent", lambda: (d := desired_caches(cluster))[1] != equal and d, timeout=60
        )
        seen.append(allocated)
        at = wait_for_sizes(cluster, tenants, allocated, after=reported)
        window = measure(cluster, tenants, {t.name: first_pass_after(at, t) for t in tenants})
        if all(window.sizes[t.name] == {allocated[t.name]} for t in tenants):
            return allocated, window
        # Counted, not timed: a loop whose curves settle allocates a few times at most.
        assert len(seen) < LOOP_ALLOCATIONS, f"no pass at one allocation in {len(seen)} allocations of the loop: {seen}"
        if time.monotonic() >= deadline:  # a hang guard only, as conftest.wait_for's
            raise TimeoutError(f"no pass at one allocation of the loop within {GUARD_S:g} s: {seen}")


def test_allocation_beats_an_equal_split_and_reclaims_a_stopped_tenant(tenants: list[Tenant], running: Cluster) -> None:
    names = [t.name for t in tenants]
    capacity = 4 * BLOCK * round(CACHE_SHARE * sum(t.mini.blocks for t in tenants) / 4)
    with running.api() as api:
        for t in tenants:
            r = api.post(
                "/api/v1/tenants",
                json={
                    "name": t.name,
                    "classifiers": [{"kind": "cgroup", "value": f"/{t.cgroup.parent.name}/{t.cgroup.name}"}],
                },
            )
            assert r.status_code == 201, r.text
            running.wait_rollout_done(r.json()["rollout_id"], timeout=30)
            # The equal split: each tenant pinned to a quarter.
            r = api.put(
                f"/api/v1/allocations/guarantees/{t.name}",
                json={"guarantee": {"kind": "fixed_size", "size_bytes": capacity / 4}},
            )
            assert r.status_code == 200, r.text

    # The replayers start together and pace their passes (the request rates are the
    # allocator's weights); what is measured is told by their read counts, not by this clock.
    start_at = time.time() + 3.0
    for t in tenants:
        t.start(start_at, passes=1000)  # until stopped

    # The operator states the cache's capacity once, proposing from the measured curves; from
    # then on the loop follows telemetry.
    def curves() -> dict[str, dict] | None:
        with running.api() as api:
            bodies = {n: api.get(f"/api/v1/tenants/{n}/telemetry").json() for n in names}
        if not all(b["curve"] for b in bodies.values()):
            return None
        return {
            n: {
                "sizes": [p["size_bytes"] for p in b["curve"]["points"]],
                "miss_ratios": [p["miss_ratio"] for p in b["curve"]["points"]],
            }
            for n, b in bodies.items()
        }

    measured = wait_for("curves of all four tenants", curves, timeout=120, interval=0.5)
    with running.api() as api:
        r = api.post("/api/v1/allocations/proposals", json={"capacity_bytes": capacity, "curves": measured})
        assert r.status_code == 200, r.text
    equal = {n: round(capacity / 4) for n in names}
    wait_for("the equal split at the agent", lambda: desired_caches(running)[1] == equal, timeout=60)

    # A pass under the equal split; once every tenant's is reported whole, the guarantees go
    # and the loop allocates.
    eq = measure(
        running, tenants, {t.name: first_pass_after(wait_for_sizes(running, tenants, equal), t) for t in tenants}
    )
    with running.api() as api:
        for n in names:
            assert api.delete(f"/api/v1/allocations/guarantees/{n}").status_code == 204
    allocated, opt = loop_pass(running, tenants, equal)

    with running.api() as api:
        summary = api.get("/api/v1/allocations/summary").json()["current"]
    report = (
        f"equal split {eq.hit_rate:.4f} {eq.per_tenant} (passes {eq.passes}); allocation {opt.hit_rate:.4f} "
        f"{opt.per_tenant} (passes {opt.passes}); sizes {allocated}; predicted utility {summary['utility']:.1f}; "
        f"lags { ({t.name: t.lags() for t in tenants}) }"
    )
    print(report)
    assert all(s == {capacity // 4} for s in eq.sizes.values()), eq.sizes
    assert allocated != equal and sum(allocated.values()) == pytest.approx(capacity, abs=len(names)), allocated
    # The measured total hit rate, not just the predicted one, beats the equal split.
    assert opt.hit_rate > 1.15 * eq.hit_rate, report

    # The tenant with the largest share stops: after the reaction time its space goes to the
    # others, and not before it counts as idle (every allocation rolled out until then keeps
    # its size; the one that moves it is the idle path's).
    before = current_sizes(running)
    stopped = max(names, key=lambda n: before[n]["size_bytes"])
    sent_before = len(inbox_caches(running))
    held = desired_caches(running)[1][stopped]
    victim = next(t for t in tenants if t.name == stopped)
    victim.stop()
    after = wait_for(
        f"{stopped}'s space to be reclaimed",
        lambda: (c := current_sizes(running))[stopped]["size_bytes"] == 0 and c,
        timeout=GUARD_S,
        interval=0.25,
    )
    assert after[stopped]["idle"]
    others = [n for n in names if n != stopped]
    moved = sum(after[n]["size_bytes"] - before[n]["size_bytes"] for n in others)
    assert moved == pytest.approx(before[stopped]["size_bytes"], abs=len(names))
    assert sum(after[n]["size_bytes"] for n in others) == pytest.approx(capacity, abs=len(names))
    generation, caches = wait_for(
        "the new sizes in the agent's desired state",
        lambda: (d := desired_caches(running))[1][stopped] == 0 and d,
        timeout=120,
    )
    assert caches == {n: max(0, round(after[n]["size_bytes"])) for n in names}
    since_stop = [(g, c) for g, c in inbox_caches(running)[sent_before:] if g <= generation]
    assert since_stop and since_stop[-1][0] == generation, since_stop
    assert all(c[stopped] == held for _, c in since_stop[:-1]), (
        f"{stopped}'s space moved before it was idle: {since_stop}"
    )
    wait_for("the agent to ack it", lambda: running.host(HOST)["acked_generation"] >= generation, timeout=120)
    # The agent's shadow caches run at the new sizes.
    wait_for(
        "telemetry at the new sizes",
        lambda: all(telemetry_messages(running)[-1][n]["cache"]["size_bytes"] == caches[n] for n in names),
        timeout=120,
    )
