"""The demo's phases over the REST API of a running deployment (`./lachesis up`).

One tenant per trace, each in its own cgroup (classified by it), replaying its miniature
trace as 4 KiB reads and writes of its own file in the data path's mount. Each tenant's rule
sends its IO through its own flash cache stage. With --compare-equal-split the same replays
first run with the cache split equally (fixed-size guarantees of C/n pin the allocation),
then on fresh stages with the guarantees gone, so the allocation loop sizes the stages from
the tenants' miss-ratio curves. Hit ratios are the real stages' counters over each phase, read
from reports the agent sent after the replays ended.

In a phase the tenants replay open loop, together at REPLAY_IOPS, each at its share of the
references (`replay.py --rate`): a phase replays every trace about once, and a tenant's
request rate, which the loop weighs it by, is its trace's and not an effect of the allocation.

`Demo.phase` replays for a time (the CLI's --seconds); `Demo.start_phase` and `Demo.replaying`
are its parts for a caller that decides by counts when to stop, and when to stop one tenant
(`Replays.stop`; e2e/test_closed_loop.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..client import Client
from ..errors import EXIT_FAILED, CliError
from . import traces

BLOCK = 4096
# The cache stages' unit (a region of the measuring device): the equal split is cut to whole
# ones, as the allocation loop's sizes are, so that installed = allocated in both phases.
REGION = 1 << 20
# References per second the replays may issue together through FUSE on a small host; the
# scaling rate is picked so a phase replays each trace about once.
REPLAY_IOPS = 4000
DEMO = "lachesis-demo"


def log(message: str) -> None:
    print(f"demo: {message}", file=sys.stderr, flush=True)


@dataclass
class Tenant:
    name: str
    trace: Path
    mini: traces.Miniature
    cgroup: Path
    file: Path  # in the mount
    stage: str = ""
    # References per second in a phase (its share of REPLAY_IOPS).
    rate: float = 0.0
    requests: int = 0
    counters: dict[str, Any] = field(default_factory=dict)


def cgroup2_mount() -> Path:
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mnt, kind, *_ = line.split()
        if kind == "cgroup2":
            return Path(mnt)
    raise CliError("no cgroup2 mount on this host: the demo classifies tenants by cgroup", EXIT_FAILED)


def slug(path: Path) -> str:
    stem = re.sub(r"\.(lis|zst|csv|bin)$", "", path.name.lower())
    stem = re.sub(r"\.(lis|oraclegeneral)$", "", stem)
    return re.sub(r"[^a-z0-9]+", "-", stem).strip("-")[:40] or "trace"


def paced_rates(references: dict[str, int]) -> dict[str, float]:
    """Each tenant's replay rate: REPLAY_IOPS shared in proportion to the references of its
    miniature, so the traces are replayed as if recorded over the same time (at least one a
    second, for a tenant whose sample kept nothing)."""
    total = sum(references.values()) or 1
    return {name: max(REPLAY_IOPS * n / total, 1.0) for name, n in references.items()}


class Replays:
    """The replayers of `Demo.replaying`, one per tenant. Called: raises if one that was not
    stopped has ended. `stop(name)` ends one tenant's replay while the others go on."""

    def __init__(self, procs: dict[str, subprocess.Popen[str]]) -> None:
        self.procs = procs
        self.stopped: dict[str, dict[str, int]] = {}

    def __call__(self) -> None:
        for name, p in self.procs.items():
            if name not in self.stopped and p.poll() is not None:
                raise CliError(f"the replay of {name} ended early (exit {p.returncode})", EXIT_FAILED)

    def stop(self, name: str) -> dict[str, int]:
        """Ends `name`'s replay and returns its counts (reads, writes, whole passes) once the
        replayer has exited: it issues no IO after this returns."""
        self()
        p = self.procs[name]
        p.terminate()
        out, _ = p.communicate(timeout=60)
        if p.returncode != 0:
            raise CliError(f"the replay of {name} failed (exit {p.returncode})", EXIT_FAILED)
        self.stopped[name] = json.loads(out.strip().splitlines()[-1])
        return self.stopped[name]

    def end(self) -> None:
        running = {n: p for n, p in self.procs.items() if n not in self.stopped}
        for p in running.values():
            if p.poll() is None:
                p.terminate()
        for p in running.values():
            p.communicate(timeout=60)


class Demo:
    def __init__(self, client: Client, home: Path, seconds: float, cache_bytes: int) -> None:
        self.client = client
        self.home = home
        self.seconds = seconds
        self.cache_bytes = cache_bytes
        self.tenants: list[Tenant] = []

    # --- set-up ------------------------------------------------------------------------------

    def prepare(self, paths: list[Path], rate: float | None = None) -> None:
        """One tenant per trace, replaying a miniature of it at `rate` (default: the rate at which
        a phase of `seconds` replays each trace about once at REPLAY_IOPS)."""
        # Bad input first: nothing is asked of the controller before every trace reads.
        read = [traces.read(p) for p in paths]
        host = self._host()
        mount, backing = self.home / "mnt", self.home / "data"
        if not (backing.is_dir() and mount.is_dir() and mount.stat().st_dev != backing.stat().st_dev):
            raise CliError(
                f"{mount} is not the data path's mount: start the deployment with './lachesis up'", EXIT_FAILED
            )
        total = sum(t.keys.size for t in read)
        if rate is None:
            rate = min(1.0, REPLAY_IOPS * self.seconds / total)
        log(f"host {host}; {len(read)} traces, {total:,} references; replaying a miniature of each at R = {rate:.4f}")
        root = cgroup2_mount() / DEMO
        root.mkdir(exist_ok=True)
        (backing / "demo").mkdir(exist_ok=True)
        names: set[str] = set()
        for t in read:
            name = base = f"demo-{slug(t.path)}"
            i = 2
            while name in names:
                name, i = f"{base}-{i}", i + 1
            names.add(name)
            mini = traces.miniature(t, rate)
            cgroup = root / name
            cgroup.mkdir(exist_ok=True)
            # Sparse: reads of holes are full 4 KiB blocks of zeros, cached like any other.
            with open(backing / "demo" / f"{name}.dat", "ab") as f:
                f.truncate(max(mini.blocks, 1) * BLOCK)
            self.tenants.append(Tenant(name, t.path, mini, cgroup, mount / "demo" / f"{name}.dat"))
        rates = paced_rates({t.name: int(t.mini.refs.size) for t in self.tenants})
        for tenant in self.tenants:
            mini = tenant.mini
            tenant.rate = rates[tenant.name]
            log(
                f"  {tenant.name}: {mini.refs.size:,} of {mini.full_references:,} references, "
                f"{mini.blocks:,} blocks, {tenant.rate:,.0f} references/s"
            )
        for tenant in self.tenants:
            body = {
                "name": tenant.name,
                "classifiers": [{"kind": "cgroup", "value": f"/{DEMO}/{tenant.name}"}],
                "description": f"lachesis demo: {tenant.trace.name}",
            }
            if self.client.request("POST", "/api/v1/tenants", json=body, ok=(409,)).status_code == 409:
                self.client.request("PUT", f"/api/v1/tenants/{tenant.name}", json=body)

    def _host(self) -> str:
        hosts = [h for h in self.client.get("/api/v1/hosts") if h.get("alive", True)]
        if not hosts:
            raise CliError("no agent has registered: start the deployment with './lachesis up'", EXIT_FAILED)
        return str(hosts[0]["id"])

    # --- phases ------------------------------------------------------------------------------

    def phase(self, label: str, equal: bool) -> dict[str, Any]:
        """Set the phase up, replay for `seconds`, report each stage's counters over the replay."""
        log(f"phase {label}: {'cache split equally' if equal else 'allocation loop on'}, {self.seconds:g} s")
        self.start_phase(label, equal)
        before = self._stage_counters()
        results = self._replay()
        after = self.counters_after(time.time())
        return self._report(results, before, after)

    def start_phase(self, label: str, equal: bool) -> datetime:
        """The allocation set to the equal split, pinned there by fixed-size guarantees (`equal`)
        or left to the loop, and a fresh stage per tenant, installed; returns when the equal
        split was computed (`computed_at` of the current allocation the loop starts from)."""
        share = self.equal_share()
        for t in self.tenants:
            if equal:
                self.client.request(
                    "PUT",
                    f"/api/v1/allocations/guarantees/{t.name}",
                    json={"guarantee": {"kind": "fixed_size", "size_bytes": share}},
                )
            else:
                self.client.request("DELETE", f"/api/v1/allocations/guarantees/{t.name}", ok=(404,))
        # Both phases start from the equal split; stating the capacity turns the loop on. With
        # the stored guarantees (equal phase) it cannot move; without them it follows the curves.
        flat = {
            t.name: {"sizes": [0.0, float(self.cache_bytes)], "miss_ratios": [1.0, 1.0], "weight": 0.0}
            for t in self.tenants
        }
        fixed = {t.name: {"kind": "fixed_size", "size_bytes": share} for t in self.tenants}
        self.client.request(
            "POST",
            "/api/v1/allocations/proposals",
            json={"capacity_bytes": self.cache_bytes, "curves": flat, "guarantees": fixed},
        )
        applied = self.client.request("POST", "/api/v1/allocations/apply").json()
        # Fresh stages for every phase: no phase starts warm from another's contents.
        for t in self.tenants:
            old, t.stage = t.stage, f"cache/{t.name}-{label}"
            stage = {
                "name": t.stage,
                "kind": "cache",
                "owner": t.name,
                "size_bytes": max(share, 1 << 20),
                "engine": "loc",
                "write_mode": "through",
            }
            self.client.request("POST", "/api/v1/stages", json=stage)
            rule = {
                "name": f"{t.name}-cached",
                "priority": 10,
                "match": {"tenant": t.name},
                "detours": [{"what": "io", "to": {"kind": "stage", "target": t.stage}}],
            }
            if self.client.request("POST", "/api/v1/rules", json=rule, ok=(409,)).status_code == 409:
                self.client.request("PUT", f"/api/v1/rules/{rule['name']}", json=rule)
            if old:
                self.client.request("DELETE", f"/api/v1/stages/{old}", ok=(404,))
        self._wait_installed()
        return datetime.fromisoformat(applied["computed_at"])

    def equal_share(self) -> int:
        """Each tenant's share of the equal split, in whole regions."""
        return max(self.cache_bytes // len(self.tenants) // REGION, 1) * REGION

    def _wait_installed(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            stages = self._stage_counters()
            if all(t.stage in stages and stages[t.stage].get("installed_bytes") is not None for t in self.tenants):
                return
            time.sleep(0.5)
        raise CliError(
            "the agent did not report the demo's stages installed within 120 s (see .lachesis/log/agent.log)",
            EXIT_FAILED,
        )

    def _stage_counters(self) -> dict[str, dict[str, Any]]:
        out = {}
        for s in self.client.get("/api/v1/stages"):
            hosts = [h for h in s["hosts"] if h.get("reported_at")]
            if hosts:
                out[s["name"]] = {**hosts[0], "allocated_bytes": hosts[0]["allocated_bytes"]}
        return out

    def stage_counters(self) -> dict[str, dict[str, Any]]:
        """Tenant -> the agent's latest report of its stage in this phase (hits, misses,
        allocated and installed bytes, reported_at); tenants without one are left out."""
        stages = self._stage_counters()
        return {t.name: stages[t.stage] for t in self.tenants if t.stage in stages}

    def counters_after(self, when: float) -> dict[str, dict[str, Any]]:
        """The stages' counters from reports the agent sent after `when` (time.time()): a
        replay that ended by then is in them whole, however late the next report comes."""
        deadline = time.monotonic() + 120
        while True:
            stages = self._stage_counters()
            if all(
                t.stage in stages and datetime.fromisoformat(stages[t.stage]["reported_at"]).timestamp() > when
                for t in self.tenants
            ):
                return stages
            if time.monotonic() > deadline:
                raise CliError(
                    "the agent sent no report of the demo's stages within 120 s of the replay's end "
                    "(see .lachesis/log/agent.log)",
                    EXIT_FAILED,
                )
            time.sleep(0.5)

    def _start_replays(
        self, until: float | None, paced: bool, names: list[str] | None = None
    ) -> dict[str, subprocess.Popen[str]]:
        """One replayer per tenant (or per tenant named), each at its `rate` when `paced`, else
        as fast as it can."""
        work = Path(tempfile.mkdtemp(prefix="lachesis-demo-"))
        procs = {}
        for t in self.tenants:
            if names is not None and t.name not in names:
                continue
            refs = work / f"{t.name}.npz"
            np.savez(refs, refs=t.mini.refs, writes=t.mini.writes)
            procs[t.name] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lachesis_cli.demo.replay",
                    "--refs",
                    str(refs),
                    "--file",
                    str(t.file),
                    "--cgroup",
                    str(t.cgroup),
                    *(["--until", repr(until)] if until is not None else []),
                    *(["--rate", repr(t.rate)] if paced else []),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        return procs

    @staticmethod
    def _results(procs: dict[str, subprocess.Popen[str]]) -> dict[str, dict[str, int]]:
        results = {}
        for name, p in procs.items():
            out, _ = p.communicate()
            if p.returncode != 0:
                raise CliError(f"the replay of {name} failed (exit {p.returncode})", EXIT_FAILED)
            results[name] = json.loads(out.strip().splitlines()[-1])
        return results

    def _replay(self) -> dict[str, dict[str, int]]:
        procs = self._start_replays(time.time() + self.seconds, paced=True)
        start = time.time()
        self.size_changes = []
        last: dict[str, int] = {}
        stage_of = {t.stage: t.name for t in self.tenants}
        while any(p.poll() is None for p in procs.values()):
            time.sleep(1.0)
            at = round(time.time() - start, 1)
            sizes = {stage_of[n]: s.get("allocated_bytes") for n, s in self._stage_counters().items() if n in stage_of}
            # Every change of a tenant's size, for the stability check (once per reaction time).
            for name, size in sizes.items():
                if size is not None and last.get(name, size) != size:
                    self.size_changes.append({"at_s": at, "tenant": name, "from_bytes": last[name], "to_bytes": size})
                if size is not None:
                    last[name] = size
            done = int(at)
            if done % 10 == 0 and done:
                log(
                    f"  {done:>4d} s: stage sizes {' '.join(f'{n}={(v or 0) / (1 << 20):g}MiB' for n, v in sorted(sizes.items()))}"
                )
        return self._results(procs)

    @contextmanager
    def replaying(self, names: list[str] | None = None, paced: bool = False) -> Iterator[Replays]:
        """Every tenant (or those named) replays its trace, pass after pass, as fast as it can
        or at its `rate` (`paced`), until the block ends (or its replay is stopped); yields the
        replays: calling them raises if a replayer died. The block decides how long (by the
        stages' counters in the e2e tests)."""
        unknown = sorted(set(names or []) - {t.name for t in self.tenants})
        if unknown:
            raise CliError(f"no such demo tenant: {', '.join(unknown)}", EXIT_FAILED)
        replays = Replays(self._start_replays(None, paced, names))
        try:
            yield replays
        finally:
            replays.end()

    def _report(
        self, results: dict[str, dict[str, int]], before: dict[str, Any], after: dict[str, Any]
    ) -> dict[str, Any]:
        rows = []
        for t in self.tenants:
            b, a = before.get(t.stage, {}), after.get(t.stage, {})
            hits = (a.get("hits") or 0) - (b.get("hits") or 0)
            misses = (a.get("misses") or 0) - (b.get("misses") or 0)
            allocated = a.get("allocated_bytes")
            rows.append(
                {
                    "name": t.name,
                    "trace": str(t.trace),
                    "requests": results[t.name]["reads"] + results[t.name]["writes"],
                    "paced_rate": round(t.rate, 1),
                    "allocated_bytes": allocated,
                    "installed_bytes": a.get("installed_bytes"),
                    "hits": hits,
                    "misses": misses,
                    "hit_ratio": hits / (hits + misses) if hits + misses else None,
                    "predicted_hit_ratio": self._predicted(t.name, allocated),
                }
            )
        hits = sum(r["hits"] for r in rows)
        total = hits + sum(r["misses"] for r in rows)
        return {
            "hit_ratio": hits / total if total else None,
            "tenants": rows,
            "size_changes": list(getattr(self, "size_changes", [])),
        }

    def predicted_aggregate(self, sizes: dict[str, int | None], weights: dict[str, int]) -> float | None:
        """The curves' aggregate hit ratio at `sizes`, tenants weighted by `weights` (their
        requests): what the allocator expects of an allocation."""
        total = sum(weights.values())
        preds = {n: self._predicted(n, s) for n, s in sizes.items()}
        if not total or any(p is None for p in preds.values()):
            return None
        return sum(weights[n] * p for n, p in preds.items() if p is not None) / total

    def _predicted(self, tenant: str, size: int | None) -> float | None:
        """The tenant's curve at its allocated size: what the allocator expected."""
        view = self.client.get_optional(f"/api/v1/tenants/{tenant}/telemetry")
        curve = view.get("curve") if view else None
        if not curve or size is None:
            return None
        sizes = [p["size_bytes"] for p in curve["points"]]
        ratios = [p["miss_ratio"] for p in curve["points"]]
        return float(1.0 - np.interp(size, sizes, ratios))

    def devices(self) -> list[dict[str, Any]]:
        return [
            {
                "host": d["host"],
                "name": d["name"],
                "kind": d["kind"],
                "placement_handles": d["placement_handles"],
                "host_bytes_written": d["host_bytes_written"],
                "media_bytes_written": d["media_bytes_written"],
                "dlwa": d["dlwa"],
                "predicted_dlwa": d["predicted_dlwa"],
            }
            for d in self.client.get("/api/v1/devices")
        ]

    # --- clean-up ----------------------------------------------------------------------------

    def clean_up(self) -> None:
        """Remove what the demo made, so it can run again (the curves and files stay)."""
        for t in self.tenants:
            self.client.request("DELETE", f"/api/v1/rules/{t.name}-cached", ok=(404,))
            if t.stage:
                self.client.request("DELETE", f"/api/v1/stages/{t.stage}", ok=(404,))
            self.client.request("DELETE", f"/api/v1/allocations/guarantees/{t.name}", ok=(404,))


def comparison(demo: Demo, equal: dict[str, Any], loop: dict[str, Any]) -> dict[str, Any]:
    """The loop's measured gain over the equal split against the gain the curves predict,
    both allocations read on the same (latest) curves, tenants weighted by the loop phase's
    requests so only the sizes differ."""
    weights = {r["name"]: r["requests"] for r in loop["tenants"]}
    share = demo.equal_share()
    predicted_equal = demo.predicted_aggregate({n: share for n in weights}, weights)
    predicted_loop = demo.predicted_aggregate({r["name"]: r["allocated_bytes"] for r in loop["tenants"]}, weights)
    measured = (
        None if loop["hit_ratio"] is None or equal["hit_ratio"] is None else loop["hit_ratio"] - equal["hit_ratio"]
    )
    predicted = None if predicted_equal is None or predicted_loop is None else predicted_loop - predicted_equal
    # The phases' aggregates weigh tenants by the requests each replayed, which moves with the
    # hit ratios themselves (a tenant that misses everything replays faster from the page
    # cache); the same tenants' hit ratios weighted as the prediction is show the sizes alone.
    ratios = {
        p: {r["name"]: r["hit_ratio"] for r in phase["tenants"]} for p, phase in (("equal", equal), ("loop", loop))
    }
    same = None
    if all(v is not None for r in ratios.values() for v in r.values()) and sum(weights.values()):
        same = sum(weights[n] * (ratios["loop"][n] - ratios["equal"][n]) for n in weights) / sum(weights.values())
    return {
        "measured_gain": measured,
        "measured_gain_same_weights": same,
        "predicted_gain": predicted,
        "predicted_equal": predicted_equal,
        "predicted_loop": predicted_loop,
        "gain_share": measured / predicted if measured is not None and predicted else None,
        "installed_equals_allocated": all(r["installed_bytes"] == r["allocated_bytes"] for r in loop["tenants"]),
    }


def run(
    client: Client,
    home: Path,
    paths: list[Path],
    seconds: float,
    cache_bytes: int,
    compare: bool,
    progress: Callable[[str], None] = log,
) -> dict[str, Any]:
    demo = Demo(client, home, seconds, cache_bytes)
    demo.prepare(paths)
    result: dict[str, Any] = {}
    try:
        if compare:
            result["equal_split"] = demo.phase("equal", equal=True)
        loop = demo.phase("loop", equal=False)
        # While the stages still exist: the broker's prediction is for the streams placed.
        devices = demo.devices()
    finally:
        demo.clean_up()
    result["tenants"] = loop["tenants"]
    result["loop"] = {"hit_ratio": loop["hit_ratio"], "size_changes": loop["size_changes"]}
    if compare:
        result["comparison"] = comparison(demo, result["equal_split"], loop)
    result["devices"] = devices
    return result
