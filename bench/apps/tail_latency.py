"""Tail-latency routing (sRoute, Stefanovici thesis §6.5.1) against the application off, with
real processes (as e2e/test_app_tail_latency.py): redis-server, the controller, an agent with
a FUSE mount, and two `lachesis-fs serve` endpoints, E (the tenants' server) and F (idle).

E's capacity is a real server-side rate limit (`serve --max-iops E_IOPS`); a competing load
(COMPETITORS connections to E, each with one 4 KiB read always outstanding: another agent's
tenant scanning its data) fills it during the slow phase, so everything sent to E queues
behind it, as behind a loaded disk. Two tenant flows write at the same time, each paced at
PACE O_DIRECT 4 KiB writes a second on a fixed schedule (the k-th write is due at
t_start + k / PACE; a write that ends late does not move the schedule) at random blocks of its
own 8 MiB file, each acknowledged once durable on its server. Each write's response time (from
its due time to its end: what a client with its own clock sees, the headline) and service
time (from its issue to its end) are recorded (wrk2's correction for coordinated omission):

- **on**: routed by a `tail_latency` stage with alpha 3 (the application);
- **off**: routed by the same stage kind with alpha 1000 (the schema's maximum: it never
  forwards, so its writes always go to E; the same data path otherwise).

Phases: E fast (no competitor) -> E slow (competitor on) -> E fast again (competitor off;
the phase lasts until the application's reclaim is done, at least T3), after WARMUP
seconds of writing that are not counted. Per phase and
overall (by the time each write was due): p50/p99/p99.9 write response and service time of
both flows; the bytes the application forwarded and
reclaimed (as last seen in `GET /api/v1/apps/tail-latency` before the log leaves the route);
after the reclaim, each flow's file on E and read back through the mount against what was
written (sha256; a block that differs is reported with the write it holds, and the run's
files and logs are kept). Medians over RUNS runs (default 3); SCALE scales the
phases' lengths (SCALE=0.2 for a quick look). Progress on stderr, the page's section on stdout.

    python3 bench/apps/tail_latency.py OUT.png          (root; /dev/fuse; redis-server)
    env: RUNS, SCALE, PACE, E_IOPS, COMPETITORS, ALPHA, KEEP (bench/apps/tail_latency.sh says)
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import platform
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "e2e"))

if TYPE_CHECKING:
    import numpy as np
    from conftest import Cluster

# The writers and the competitor are this file run again (`--writer`, `--competitor`): they
# import only the standard library, so they start fast on a loaded machine; the
# orchestrator imports the e2e harness and numpy (`orchestrator()`).

BLOCK = 4096
FILE_BLOCKS = 2048  # 8 MiB per flow
PACE = int(os.environ.get("PACE", "100"))  # writes/s per flow
E_IOPS = int(os.environ.get("E_IOPS", "1000"))
COMPETITORS = int(os.environ.get("COMPETITORS", "32"))
RUNS = int(os.environ.get("RUNS", "3"))
SCALE = float(os.environ.get("SCALE", "1"))
T1, T2, T3 = 10 * SCALE, 60 * SCALE, 15 * SCALE  # seconds of each phase
WARMUP = 3
ALPHA_ON, ALPHA_OFF = float(os.environ.get("ALPHA", "3")), 1000
RECLAIM_BYTES_PER_S = 4 << 20
FS = Path(os.environ.get("LACHESIS_FS_BIN", ROOT / "agents" / "target" / "release" / "lachesis-fs"))
AGENT = Path(os.environ.get("LACHESIS_AGENT_BIN", ROOT / "agents" / "target" / "release" / "lachesis-agent"))
FLOWS = ("off", "on")
PHASES = ("E fast", "E slow", "E fast again", "overall")


def log(msg: str) -> None:
    print(f"[tail-latency {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the competing load: another agent's reads, in the forwarding wire format ----------------


def _crc32c_table() -> list[int]:
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC = _crc32c_table()


def crc32c(b: bytes) -> int:
    c = 0xFFFFFFFF
    for x in b:
        c = _CRC[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def read_frame(rid: int, path: str, off: int, length: int) -> bytes:
    """A Read request (agents/fs/src/remote/frame.rs: len | crc32c(body) | body)."""
    p = path.encode()
    body = struct.pack("<QBiQQHI", rid, 1, 0, off, length, len(p), 0) + p
    return struct.pack("<II", len(body), crc32c(body)) + body


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        got = s.recv(n - len(buf))
        if not got:
            raise ConnectionError("E closed the connection")
        buf += got
    return bytes(buf)


def competitor(addr: str, stop: threading.Event, done: list[int]) -> None:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rid, rng = 0, random.Random(addr)
        while not stop.is_set():
            rid += 1
            s.sendall(read_frame(rid, "competitor/data", rng.randrange(FILE_BLOCKS) * BLOCK, BLOCK))
            n, _ = struct.unpack("<II", recv_exact(s, 8))
            recv_exact(s, n)
            done[0] += 1


def run_competitor(addr: str) -> None:
    """`--competitor ADDR`: COMPETITORS connections, one request outstanding each, until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    done = [0]
    threads = [threading.Thread(target=competitor, args=(addr, stop, done)) for _ in range(COMPETITORS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(done[0])


# --- a tenant flow: paced O_DIRECT writes, each one timed -------------------------------------


def block_of(seed: int, k: int) -> bytes:
    """The content of the k-th write of a flow: unique per write."""
    return struct.pack("<QQ", seed, k) * (BLOCK // 16)


def run_writer(path: str, seed: int, out: str) -> None:
    """`--writer PATH SEED OUT`: writes over the file OUT.prefill wrote on a fixed schedule (the
    k-th write is due at t_start + k / PACE, whether or not the one before ended on time) until
    SIGTERM, then issues the writes already due; OUT.lat gets (due ns, start ns, end ns) per write
    (CLOCK_MONOTONIC, comparable across processes), OUT.want what the file must hold.

    Response time (end - due) is what a client with its own clock sees; service time
    (end - start) is what a closed-loop writer records: once a write ends late, the next starts
    late, and the writes that wait meanwhile are never timed (coordinated omission)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    want = bytearray(Path(out + ".prefill").read_bytes())
    rng = random.Random(seed)
    buf = mmap.mmap(-1, BLOCK)
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT)
    samples = array("q")
    Path(out + ".ready").touch()
    interval = 1e9 / PACE
    start = time.monotonic_ns()
    k, end_at = 0, None
    while True:
        due = start + int(k * interval)
        if end_at is None and stop.is_set():
            end_at = time.monotonic_ns()
        if end_at is not None and due >= end_at:
            break
        now = time.monotonic_ns()
        if now < due:
            time.sleep((due - now) / 1e9)
        b, data = rng.randrange(FILE_BLOCKS), block_of(seed, k)
        buf[:] = data
        t0 = time.monotonic_ns()
        n = os.pwritev(fd, [buf], b * BLOCK)
        t1 = time.monotonic_ns()
        if n != BLOCK:
            raise SystemExit(f"short write {n} at block {b}")
        want[b * BLOCK : (b + 1) * BLOCK] = data
        samples.extend((due, t0, t1))
        k += 1
    os.close(fd)
    Path(out + ".lat").write_bytes(samples.tobytes())
    Path(out + ".want").write_bytes(want)


# --- the orchestrator ---------------------------------------------------------------------------


def policy(e: int, f: int) -> str:
    stages, rules = [], []
    for flow, alpha in (("on", ALPHA_ON), ("off", ALPHA_OFF)):
        stages.append(f"""    - name: route/{flow}
      kind: tail_latency
      owner: db
      servers: ["tcp://127.0.0.1:{e}/{flow}-store", "tcp://127.0.0.1:{f}/{flow}-spill"]
      alpha: {alpha}
      reclaim_bytes_per_s: {RECLAIM_BYTES_PER_S}""")
        rules.append(f"""    - name: {flow}-routed
      priority: 10
      match: {{tenant: db, path_prefix: /{flow}}}
      detours: [{{what: io, to: {{kind: stage, target: route/{flow}}}}}]""")
    return (
        "apiVersion: lachesis.dev/v1\nkind: Policy\nmetadata: {name: tail-bench}\nspec:\n"
        '  tenants:\n    - name: db\n      classifiers: [{kind: uid, value: "0"}]\n'
        "  stages:\n" + "\n".join(stages) + "\n  rules:\n" + "\n".join(rules) + "\n"
    )


def sha_of_mount_file(path: Path) -> str:
    buf = mmap.mmap(-1, FILE_BLOCKS * BLOCK)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        n = os.preadv(fd, [buf], 0)
    finally:
        os.close(fd)
    if n != FILE_BLOCKS * BLOCK:
        raise SystemExit(f"{path}: read {n} bytes back, want {FILE_BLOCKS * BLOCK}")
    return hashlib.sha256(buf).hexdigest()


class Watcher:
    """Samples `GET /api/v1/apps/tail-latency` for the whole run: the on flow's state changes
    (with the time) and the log's counters as last seen (the log leaves the telemetry once it
    leaves the route, so what it copied back in its last moments may be missed)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.stop = cluster, threading.Event()
        self.states: list[tuple[int, str]] = []
        self.counters = {"forwarded_bytes": 0, "reclaimed_bytes": 0}
        self.seen, self.done = dict(self.counters), dict(self.counters)
        self.last: dict = {}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with self.cluster.api() as api:
            while not self.stop.is_set():
                try:
                    stages = {s["stage"]: s for s in api.get("/api/v1/apps/tail-latency").json()["stages"]}
                except (httpx.HTTPError, KeyError, ValueError):
                    stages = {}
                s = stages.get("route/on")
                if s:
                    self.last = s
                    if not self.states or self.states[-1][1] != s["state"]:
                        self.states.append((time.monotonic_ns(), s["state"]))
                        log(f"on flow: {s['state']} (E recent {s['recent_us']} us, mean {s['mean_us']} us)")
                    for k in ("forwarded_bytes", "reclaimed_bytes"):
                        # A log made anew (a later forwarding) counts from 0 again: sum the runs.
                        v = s.get(k)
                        if v is not None:
                            if v < self.seen[k]:
                                self.done[k] += self.seen[k]
                            self.seen[k] = v
                            self.counters[k] = self.done[k] + v
                time.sleep(0.2)


def lost(
    i: int, flow: str, tmp: Path, want: bytes, got: bytes, bounds: list[int], states: list, mount_reads_e: bool
) -> int:
    """Says which blocks differ and which writes they hold (each block names its write), when
    those writes were made against the phases and the application's states, and keeps the
    processes' logs; returns how many blocks differ."""
    lat = np.frombuffer((tmp / f"{flow}.lat").read_bytes(), dtype=np.int64).reshape(-1, 3)
    t0 = bounds[0]
    at = lambda k: f"{(lat[k, 0] - t0) / 1e9:+.3f} s" if 0 <= k < len(lat) else "prefill"  # noqa: E731
    bad = [
        b for b in range(len(want) // BLOCK) if want[b * BLOCK : (b + 1) * BLOCK] != got[b * BLOCK : (b + 1) * BLOCK]
    ]
    log(
        f"run {i + 1}, flow {flow}: DATA LOST: {len(bad)} blocks of E differ from what was written "
        f"(the mount reads {'the same as E' if mount_reads_e else 'other bytes'}); phases at "
        + ", ".join(f"{(b - t0) / 1e9:+.3f} s" for b in bounds)
        + "; states "
        + ", ".join(f"{s} {(t - t0) / 1e9:+.3f} s" for t, s in states)
    )
    for b in bad[:20]:
        kw = struct.unpack("<QQ", want[b * BLOCK : b * BLOCK + 16])[1]
        kg = struct.unpack("<QQ", got[b * BLOCK : b * BLOCK + 16])[1] if len(got) >= (b + 1) * BLOCK else -1
        log(f"  block {b}: want write {kw} ({at(kw)}), E holds write {kg} ({at(kg)})")
    keep = Path(os.environ.get("KEEP", "/tmp")) / f"tail-latency-lost-run{i + 1}-{flow}"
    subprocess.run(["cp", "-r", str(tmp), str(keep)], check=False)
    log(f"  logs and files kept in {keep}")
    return len(bad)


def one_run(i: int, tmp: Path) -> dict:
    from conftest import Cluster, free_port, mounted, wait_for

    cluster = Cluster(tmp)
    backing, mnt, e_root, f_root = tmp / "backing", tmp / "mnt", tmp / "e", tmp / "f"
    for d in (backing, mnt, e_root, f_root):
        d.mkdir(parents=True)
    e, f = free_port(), free_port()
    procs: list[subprocess.Popen] = []
    try:
        cluster.start_redis()
        cluster.start_controller()
        cluster._add(
            "serve-e",
            [str(FS), "serve", "--listen", f"127.0.0.1:{e}", "--root", str(e_root), "--max-iops", str(E_IOPS)],
        ).start()
        cluster._add("serve-f", [str(FS), "serve", "--listen", f"127.0.0.1:{f}", "--root", str(f_root)]).start()
        cluster._add(
            "agent-node-1",
            [
                str(AGENT),
                "run",
                "--host-id",
                "node-1",
                "--redis-url",
                cluster.enroll("node-1"),
                "--no-ebpf",
                "--mount",
                f"{backing}:{mnt}",
                "--endpoint-root",
                str(tmp),
                "--heartbeat-interval-ms",
                "500",
                "--heartbeat-ttl-s",
                "30",
            ],
            {"RUST_LOG": "warn"},
        ).start()
        wait_for("node-1 to register", lambda: (h := cluster.host("node-1")) and h["acked_generation"] >= 1, timeout=60)
        wait_for("node-1's FUSE mount", lambda: mounted(mnt), timeout=60)
        with cluster.api() as api:
            r = api.post("/api/v1/policies", content=policy(e, f), headers={"content-type": "application/yaml"})
            if r.status_code != 201:
                raise SystemExit(f"policy refused: {r.status_code} {r.text}")
        if cluster.wait_rollout_done(r.json()["rollout_id"], timeout=120)["state"] != "succeeded":
            raise SystemExit("the policy's rollout failed")
        files = {}
        pre = b"".join(block_of(99, b) for b in range(FILE_BLOCKS))
        for flow in FLOWS:
            p = mnt / flow / "v"
            p.parent.mkdir()
            Path(str(tmp / flow) + ".prefill").write_bytes(pre)
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_DIRECT)
            buf = mmap.mmap(-1, 64 * BLOCK)
            for off in range(0, len(pre), len(buf)):
                buf[:] = pre[off : off + len(buf)]
                os.pwritev(fd, [buf], off)
            os.close(fd)
            files[flow] = p
        log(f"run {i + 1}: processes up, files written; E fast for {T1:.0f} s")
        watcher = Watcher(cluster)
        watcher.thread.start()
        me = [sys.executable, __file__]
        writers = {
            flow: subprocess.Popen(
                [*me, "--writer", str(files[flow]), str(FLOWS.index(flow)), str(tmp / flow)],
                env={**os.environ, "PYTHONPATH": ""},
            )
            for flow in FLOWS
        }
        wait_for("the writers to start", lambda: all((tmp / f"{flow}.ready").exists() for flow in FLOWS), timeout=120)
        time.sleep(WARMUP)  # not counted: the writers' first seconds
        t0 = time.monotonic_ns()
        time.sleep(T1)
        t1 = time.monotonic_ns()
        log(f"run {i + 1}: E slow ({COMPETITORS} competing connections) for {T2:.0f} s")
        comp = subprocess.Popen([*me, "--competitor", f"127.0.0.1:{e}"], stdout=subprocess.PIPE, text=True)
        procs.append(comp)
        time.sleep(T2)
        comp.send_signal(signal.SIGTERM)
        competing = int(comp.communicate(timeout=60)[0].strip() or 0)
        t2 = time.monotonic_ns()
        log(f"run {i + 1}: E fast again; waiting for the reclaim (at least {T3:.0f} s)")
        time.sleep(T3)
        wait_for(
            "the on flow's reclaim to finish",
            lambda: watcher.last.get("state") == "normal" and watcher.last.get("reclaims", 0) >= 1,
            timeout=600,
        )
        for w in writers.values():
            w.send_signal(signal.SIGTERM)
        for flow, w in writers.items():
            if w.wait(timeout=60) != 0:
                raise SystemExit(f"the {flow} writer failed")
        t3 = time.monotonic_ns()
        watcher.stop.set()
        watcher.thread.join()
        # Nothing lost: E holds what was written, the mount reads the same.
        checks = {}
        for flow in FLOWS:
            want_bytes = (tmp / f"{flow}.want").read_bytes()
            e_bytes = (e_root / f"{flow}-store" / flow / "v").read_bytes()
            want, on_e = hashlib.sha256(want_bytes).hexdigest(), hashlib.sha256(e_bytes).hexdigest()
            via = sha_of_mount_file(files[flow])
            # Blocks of E that differ from what was written (0: nothing lost); the mount must
            # read what E holds either way.
            checks[flow] = (
                0
                if want == on_e == via
                else lost(i, flow, tmp, want_bytes, e_bytes, [t0, t1, t2, t3], watcher.states, via == on_e)
            )
        spill = f_root / "lachesis-forward"
        result = {
            "bounds": [t0, t1, t2, t3],
            "samples": {
                flow: np.frombuffer((tmp / f"{flow}.lat").read_bytes(), dtype=np.int64).reshape(-1, 3) for flow in FLOWS
            },
            "states": watcher.states,
            "counters": watcher.counters,
            "forwards": watcher.last.get("forwards"),
            "reclaims": watcher.last.get("reclaims"),
            "competitor_requests": competing,
            "log_file_bytes": sum(p.stat().st_size for p in spill.rglob("*") if p.is_file()) if spill.exists() else 0,
            "blocks_lost": checks,
        }
        log(
            f"run {i + 1}: done; forwarded {watcher.counters['forwarded_bytes']} B, "
            f"reclaimed {watcher.counters['reclaimed_bytes']} B, blocks lost {checks}"
        )
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        cluster.stop_all()
        if mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False)


# --- the report ---------------------------------------------------------------------------------

PCTS = (50, 99, 99.9)


TIMES = {
    "response": "response time (from the write's due time on the writer's schedule, by the phase it was due in; the headline)",
    "service": "service time (from when the write was issued, what a closed-loop writer records; by the phase it was issued in)",
}


def phase_latencies(run: dict, flow: str, kind: str) -> dict[str, np.ndarray]:
    """Latencies (ms) of the flow's writes by phase: response time (due -> end) by the phase the
    write was due in, service time (issue -> end) by the phase it was issued in (a late
    writer's backlog is issued after the phase it was due in)."""
    s = run["samples"][flow]
    b = run["bounds"]
    since = 0 if kind == "response" else 1
    lat, at = (s[:, 2] - s[:, since]) / 1e6, s[:, since]
    out = {}
    for k, name in enumerate(PHASES[:3]):
        out[name] = lat[(at >= b[k]) & (at < b[k + 1])]
    out["overall"] = lat[(at >= b[0]) & (at < b[3])]
    return out


def summarize(runs: list[dict], kind: str) -> dict:
    """Per flow and phase: the median over runs of each percentile and of the write count."""
    table: dict = {}
    for flow in FLOWS:
        per_run = [phase_latencies(r, flow, kind) for r in runs]
        for ph in PHASES:
            vals = [x[ph] for x in per_run]
            table[(flow, ph)] = {
                "writes": float(np.median([len(v) for v in vals])),
                **{p: float(np.median([np.percentile(v, p) if len(v) else np.nan for v in vals])) for p in PCTS},
            }
    return table


def state_times(run: dict) -> tuple[float | None, float | None]:
    """Seconds from E slow to the on flow forwarding, and from E fast again to it normal."""
    _, t1, t2, _ = run["bounds"]
    fwd = next((t for t, s in run["states"] if s == "forwarding" and t >= t1), None)
    back = next((t for t, s in run["states"] if s == "normal" and t >= t2), None)
    return ((fwd - t1) / 1e9 if fwd else None, (back - t2) / 1e9 if back else None)


def plot(runs: list[dict], table: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
    run = runs[len(runs) // 2]
    t0 = run["bounds"][0]
    colors = {"off": "#c0392b", "on": "#2471a3"}
    for flow in FLOWS:
        s = run["samples"][flow]
        s = s[s[:, 0] >= t0]  # the warm-up is not counted
        a.scatter(
            (s[:, 0] - t0) / 1e9,
            (s[:, 2] - s[:, 0]) / 1e6,
            s=2,
            alpha=0.4,
            color=colors[flow],
            label=f"application {flow} (alpha {ALPHA_ON if flow == 'on' else ALPHA_OFF})",
        )
    for t in run["bounds"][1:3]:
        a.axvline((t - t0) / 1e9, color="k", lw=0.8, ls="--")
    # Where the on flow's writes were forwarded (forwarding or reclaiming).
    spans, start = [], None
    for t, s in run["states"] + [(run["bounds"][3], "end")]:
        if s in ("forwarding", "reclaiming") and start is None:
            start = t
        elif s not in ("forwarding", "reclaiming") and start is not None:
            spans.append((start, t))
            start = None
    for s0, s1 in spans:
        a.axvspan((s0 - t0) / 1e9, (s1 - t0) / 1e9, color="#aed6f1", alpha=0.35, lw=0)
    a.set_yscale("log")
    a.set_xlabel("time the write was due (s): E fast | E slow (competing load) | E fast again")
    a.set_ylabel("write response time (ms)")
    a.set_title(f"one run (run {len(runs) // 2 + 1} of {len(runs)}); shaded: on flow forwarded to F")
    a.legend(loc="upper left", markerscale=4, fontsize=8)
    x = np.arange(len(PHASES))
    w = 0.13
    for j, p in enumerate(PCTS):
        for k, flow in enumerate(FLOWS):
            v = [table[(flow, ph)][p] for ph in PHASES]
            b.bar(x + (j * 2 + k - 2.5) * w, v, w, color=colors[flow], alpha=0.4 + 0.3 * j, label=f"p{p:g} {flow}")
    b.set_xticks(x, PHASES, fontsize=8)
    b.set_yscale("log")
    b.set_ylabel(f"write response time (ms), median of {len(runs)} runs")
    b.set_title("p50 / p99 / p99.9 per phase")
    b.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def machine() -> str:
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if ln.startswith("Model name")
        ),
        platform.processor(),
    )
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}, {time.strftime('%Y-%m-%d')}"


def lost_cell(lost: dict[str, int]) -> str:
    if not any(lost.values()):
        return "equal (nothing lost)"
    return "**differ**: " + ", ".join(f"{n} blocks of {flow} hold older writes" for flow, n in lost.items() if n)


def latency_table(table: dict, kind: str) -> list[str]:
    ms = lambda v: f"{v:.2f}" if v < 10 else f"{v:,.1f}"  # noqa: E731
    lines = [
        f"Write {TIMES[kind]}:",
        "",
        "| phase | writes (off / on) | p50 ms (off / on) | p99 ms (off / on) | p99.9 ms (off / on) | p99, off / on | p99.9, off / on |",
        "|---|---|---|---|---|---|---|",
    ]
    for ph in PHASES:
        o, n = table[("off", ph)], table[("on", ph)]
        lines.append(
            f"| {ph} | {o['writes']:,.0f} / {n['writes']:,.0f} | {ms(o[50])} / {ms(n[50])} | {ms(o[99])} / {ms(n[99])} "
            f"| {ms(o[99.9])} / {ms(n[99.9])} | **{o[99] / n[99]:.1f}x** | **{o[99.9] / n[99.9]:.1f}x** |"
        )
    return lines + [""]


def report(runs: list[dict], out: Path) -> str:
    response = summarize(runs, "response")
    plot(runs, response, out)
    mib = 1 << 20
    lines = latency_table(response, "response") + latency_table(summarize(runs, "service"), "service")
    lines += [
        "| run | forwards, reclaims | forwarded MiB | reclaimed MiB | log file on F, MiB | E slow to forwarding, s | E fast to normal, s | competitor requests | checksums after the reclaim |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for k, r in enumerate(runs):
        fwd, back = state_times(r)
        c = r["counters"]
        lines.append(
            f"| {k + 1} | {r['forwards']}, {r['reclaims']} | {c['forwarded_bytes'] / mib:.1f} | {c['reclaimed_bytes'] / mib:.1f} "
            f"| {r['log_file_bytes'] / mib:.1f} | {fwd if fwd is None else f'{fwd:.1f}'} | {back if back is None else f'{back:.1f}'} "
            f"| {r['competitor_requests']:,} | {lost_cell(r['blocks_lost'])} |"
        )
    head = (
        f"`bench/apps/tail_latency.sh` (RUNS={len(runs)}, SCALE={SCALE:g}; {machine()}). Load: two flows of "
        f"O_DIRECT 4 KiB writes paced at {PACE}/s each to random blocks of an 8 MiB file through the agent's FUSE "
        f"mount; E `serve --max-iops {E_IOPS}`; the competing load {COMPETITORS} connections with one 4 KiB read "
        f"outstanding each; phases {T1:.0f} s / {T2:.0f} s / at least {T3:.0f} s and until the reclaim is done; "
        f"reclaim at {RECLAIM_BYTES_PER_S / mib:.0f} MiB/s. Medians of {len(runs)} runs."
    )
    return head + "\n\n" + "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) >= 3 and sys.argv[1] == "--competitor":
        return run_competitor(sys.argv[2])
    if len(sys.argv) >= 5 and sys.argv[1] == "--writer":
        return run_writer(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    orchestrator()


def orchestrator() -> None:
    global np, httpx
    import httpx
    import numpy as np

    for what, ok in (
        ("root (the agent mounts a FUSE namespace)", os.geteuid() == 0),
        ("/dev/fuse", os.path.exists("/dev/fuse")),
        (str(AGENT), AGENT.exists()),
        (str(FS), FS.exists()),
    ):
        if not ok:
            raise SystemExit(f"tail_latency: missing {what}")
    # The e2e's pace of telemetry and reconciliation: reports every 300 ms.
    os.environ.setdefault("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    os.environ.setdefault("LACHESIS_RECONCILE_INTERVAL_S", "0.3")
    runs = []
    for i in range(RUNS):
        with tempfile.TemporaryDirectory(prefix="tail-bench-") as d:
            runs.append(one_run(i, Path(d)))
    raw = Path(sys.argv[1]).with_suffix(".json")
    raw.write_text(json.dumps([{k: v for k, v in r.items() if k != "samples"} for r in runs], indent=1))
    print(report(runs, Path(sys.argv[1])))


if __name__ == "__main__":
    main()
