#!/usr/bin/env python3
"""Side-by-side KV benchmark: a real memcached and Lachesis's KV front end (lachesis-kv), both
driven by lachesis-kvload with the same workload in the same run. Called by run.sh (which
builds the binaries); Markdown on stdout, progress on stderr, every kvload report in --json.

Sections:
  throughput  DRAM-resident working set, 1 and 2 client threads: ops/s, p50/p99 per command,
              Lachesis / memcached (median of RUNS runs, servers alternating within a run).
  tiny        Zipf tiny objects (50-300 B), a working set 20x the DRAM, equal DRAM: miss ratio
              of memcached (DRAM only) vs Lachesis (DRAM + Kangaroo on the measuring device);
              DRAM bits per flash-cached object, flash write rate, ALWA, DLWA.
  fdp         two tenants with small and large objects on one measuring device at 100%
              utilisation, at steady state: DLWA (and per half of the window) with separate
              placement handles vs all on one handle, for each small-object engine
              (FDP_SMALL_ENGINES, default "kangaroo fairywren"; FDP_HANDLES, default
              "separate shared"; FDP_SMALL_FRACTION, default 0.04), and where the media
              writes come from per engine part (the device's per-handle counters).

Environment: KVLOAD, LACHESIS_KV, MEMCACHED (binaries), SCALE (sizes, default 1), RUNS
(default 3), DURATION (measured seconds per throughput run, default 10), SERVERS (default
"memcached lachesis"; "memcached" alone runs without lachesis-kv), WORKDIR (device files).
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

KVLOAD = os.environ.get("KVLOAD", "lachesis-kvload")
LACHESIS_KV = os.environ.get("LACHESIS_KV", "lachesis-kv")
MEMCACHED = os.environ.get("MEMCACHED", "memcached")
SCALE = float(os.environ.get("SCALE", "1"))
RUNS = int(os.environ.get("RUNS", "3"))
DURATION = float(os.environ.get("DURATION", "10"))
SERVERS = os.environ.get("SERVERS", "memcached lachesis").split()
SERVER_THREADS = 2  # memcached -t 2, lachesis-kv --threads 2: two connection threads each
MIB = 1 << 20
KEY_BYTES = 18  # "t0:" + 16 hex digits: kvload's key names
RESULTS = []  # every kvload report, with its section and server, for --json and the plot


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc, what):
    """Counted poll: the server accepts a connection within 400 tries, or the run stops."""
    for _ in range(400):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port}")


class Server:
    """A server process on a free port, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, name, argv_for_port):
        self.name = name
        self.port = free_port()
        self.argv = argv_for_port(self.port)
        self.proc = None

    def __enter__(self):
        log(f"  start {self.name}: {' '.join(self.argv)}")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_listening(self.port, self.proc, self.name)
        except RuntimeError:
            self.stop()
            raise
        return self

    def rss_mib(self):
        """Peak resident memory (VmHWM) of the server so far."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        err = self.proc.stderr.read() if self.proc and self.proc.stderr else ""
        if self.proc and self.proc.returncode not in (0, -signal.SIGTERM):
            log(f"  {self.name} exited {self.proc.returncode}: {err.strip()[-400:]}")

    def __exit__(self, *exc):
        self.stop()


def memcached(dram_mib):
    return Server(
        "memcached",
        lambda port: [
            MEMCACHED,
            "-u",
            "root",
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-p",
            str(port),
            "-m",
            str(dram_mib),
            "-t",
            str(SERVER_THREADS),
        ],
    )


def lachesis(
    dram_mib,
    flash_mib,
    tenants,
    device_mib,
    handles="separate",
    small_fraction=0.5,
    workdir=None,
    small_engine="kangaroo",
):
    """lachesis-kv with one measuring device of device_mib and, per tenant prefix, a hybrid
    cache of flash_mib flash (small_fraction of it the small-object engine, Kangaroo or
    FairyWREN, the rest the log) behind dram_mib of DRAM."""
    path = os.path.join(workdir, f"flash-{free_port()}.img")

    def argv(port):
        a = [
            LACHESIS_KV,
            "--listen",
            f"127.0.0.1:{port}",
            "--device",
            f"flash0={path}:{device_mib}MiB",
            "--dram-mib",
            str(dram_mib),
            "--cache-mib",
            str(flash_mib),
            "--handles",
            handles,
            "--small-fraction",
            str(small_fraction),
            "--small-engine",
            small_engine,
            "--threads",
            str(SERVER_THREADS),
        ]
        for t in tenants:
            a += ["--tenant", f"{t.rstrip(':')}=prefix:{t}"]
        return a

    s = Server(f"lachesis-kv ({handles} handles)", argv)
    s.device_file = path
    return s


def kvload(server, section, *flags):
    args = [KVLOAD, "--server", f"127.0.0.1:{server.port}", "-q", *map(str, flags)]
    log(f"    kvload {' '.join(map(str, flags))}")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    r["section"], r["server_name"], r["server_rss_mib"] = section, server.name, server.rss_mib()
    RESULTS.append(r)
    return r


def stat_delta(r, name, group="lachesis"):
    """A server counter's change over the measured phase (None where the server lacks it)."""
    a, b = r["stats_before"].get(group) or {}, r["stats_after"].get(group) or {}
    if name not in a or name not in b:
        return None
    return float(b[name]) - float(a[name])


def stat_after(r, name, group="lachesis"):
    v = (r["stats_after"].get(group) or {}).get(name)
    return None if v is None else float(v)


def cpu_us_per_op(r):
    """The server's CPU time (user + system, from `stats` rusage) per request of the measured
    phase: steadier than ops/s on a shared machine, since other work takes wall time, not this."""
    d = [stat_delta(r, k, group="stats") for k in ("rusage_user", "rusage_system")]
    return sum(d) * 1e6 / r["ops"] if None not in d and r["ops"] else None


def median_known(values):
    """The median of the values that are not None (servers without a figure give None)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def row(*cols):
    print("| " + " | ".join(str(c) for c in cols) + " |", flush=True)


def servers_for(dram_mib, flash_mib, workdir, small_fraction=0.5):
    """The servers of a comparison (one tenant: every key), in the order they run."""
    out = []
    if "memcached" in SERVERS:
        out.append(("memcached", lambda: memcached(dram_mib)))
    if "lachesis" in SERVERS:
        out.append(
            (
                "lachesis",
                lambda: lachesis(
                    dram_mib, flash_mib, [], device_mib=flash_mib, small_fraction=small_fraction, workdir=workdir
                ),
            )
        )
    return out


def throughput(workdir):
    keys = int(100_000 * SCALE)
    dram = max(64, int(256 * SCALE))
    print(f"### Throughput and latency, DRAM-resident working set (median of {RUNS} runs)\n")
    print(
        f"{keys} keys, values uniform 50-300 B (~{keys * (175 + KEY_BYTES) / MIB:.0f} MiB), all set "
        f"first (`--prefill`), then 2 s of warm-up and {DURATION:.0f} s measured of a 90% get / 10% set mix, "
        f"Zipf 0.99; {dram} MiB of DRAM for each server (memcached `-m {dram} -t {SERVER_THREADS}`, "
        f"lachesis-kv `--dram-mib {dram} --threads {SERVER_THREADS}` in front of its flash cache); one blocking connection per "
        f"client thread, no pipelining. Each run starts fresh servers; the servers alternate who "
        f"goes first.\n"
    )
    by = {}
    for run in range(RUNS):
        order = servers_for(dram, dram, workdir)
        if run % 2:
            order.reverse()
        for name, make in order:
            for threads in (1, 2):
                with make() as s:
                    r = kvload(
                        s,
                        "throughput",
                        "--threads",
                        threads,
                        "--keys",
                        keys,
                        "--value-size",
                        "50-300",
                        "--mode",
                        "mix",
                        "--get-ratio",
                        0.9,
                        "--prefill",
                        "--warmup",
                        2,
                        "--duration",
                        DURATION,
                        "--seed",
                        run + 1,
                    )
                by.setdefault((name, threads), []).append(r)
    med = lambda rs, f: statistics.median(f(r) for r in rs)
    row(
        "server",
        "client threads",
        "ops/s",
        "get p50 µs",
        "get p99 µs",
        "get p99.9 µs",
        "get mean µs",
        "set p50 µs",
        "set p99 µs",
        "miss ratio",
        "server CPU µs per op",
        "ops/s vs memcached",
    )
    row(*["---"] * 12)
    summary = {}
    for threads in (1, 2):
        base = None
        for name in ("memcached", "lachesis"):
            rs = by.get((name, threads))
            if not rs:
                continue
            ops = med(rs, lambda r: r["ops_per_s"])
            summary[(name, threads)] = ops
            base = ops if name == "memcached" else base
            row(
                name,
                threads,
                f"{ops:,.0f}",
                f"{med(rs, lambda r: r['get']['p50_us']):.1f}",
                f"{med(rs, lambda r: r['get']['p99_us']):.1f}",
                f"{med(rs, lambda r: r['get']['p999_us']):.0f}",
                f"{med(rs, lambda r: r['get']['mean_us']):.1f}",
                f"{med(rs, lambda r: r['set']['p50_us']):.1f}",
                f"{med(rs, lambda r: r['set']['p99_us']):.1f}",
                f"{med(rs, lambda r: r['miss_ratio']):.4f}",
                fmt(median_known(map(cpu_us_per_op, rs)), ".2f"),
                fmt(ratio(ops, base) if name == "lachesis" else None, ".2f"),
            )
    print()
    for threads in (1, 2):
        m, l = summary.get(("memcached", threads)), summary.get(("lachesis", threads))
        if m and l:
            goal = "meets" if l / m >= 1.0 else "misses"
            print(f"- {threads} thread(s): Lachesis {l / m:.2f}x memcached's ops/s ({goal} the goal of 1.0x).")
    print()


def lookaside(keys, sizes):
    """kvload's flags for a look-aside run (get, set on a miss): 2 threads, 8 in flight, Zipf 0.9."""
    return [
        "--threads",
        2,
        "--pipeline",
        8,
        "--keys",
        keys,
        "--dist",
        "zipf:0.9",
        "--value-size",
        sizes,
        "--mode",
        "lookaside",
    ]


def tiny(workdir):
    dram = max(8, int(32 * SCALE))
    mean_object = 175 + KEY_BYTES
    keys = int(20 * dram * MIB / mean_object)
    flash = max(64, int(1024 * SCALE))
    warm = keys  # per thread: with 2 threads, two requests per key
    measured = max(100_000, keys // 2)
    print("### Tiny objects: working set 20x the DRAM, equal DRAM\n")
    print(
        f"{keys:,} keys (Zipf 0.9), values uniform 50-300 B: a working set of "
        f"{keys * mean_object / MIB:.0f} MiB, 20x the {dram} MiB of DRAM each server gets. Look-aside "
        f"(get, set on a miss), 2 client threads with 8 requests in flight; {warm:,} warm-up and "
        f"{measured:,} measured requests per thread. memcached: `-m {dram}`, DRAM only. Lachesis: "
        f"`--dram-mib {dram}` in front of Kangaroo (90% of the flash: every object is small) and the "
        f"log on a {flash} MiB measuring device (`--cache-mib {flash} --small-fraction 0.9`).\n"
    )
    rows = []
    for name, make in servers_for(dram, flash, workdir, small_fraction=0.9):
        with make() as s:
            r = kvload(
                s,
                "tiny",
                *lookaside(keys, "50-300"),
                "--warmup-requests",
                warm,
                "--requests",
                measured,
            )
        rows.append((name, r))
    row(
        "server",
        "miss ratio",
        "objects held",
        "DRAM bits / flash object",
        "flash write MB/s",
        "ALWA",
        "DLWA",
        "peak RSS MiB",
        "ops/s",
    )
    row(*["---"] * 9)
    for name, r in rows:
        held = stat_after(r, "curr_items", "stats")
        lach = {k: v for k, v in (r["stats_after"].get("lachesis") or {}).items()}
        flash_w = sum_delta(r, lach, ":flash_bytes_written", prefix="tenant:")
        app_w = sum_delta(r, lach, ":bytes_written", prefix="tenant:")
        host = sum_delta(r, lach, ":host_bytes", prefix="device:")
        media = sum_delta(r, lach, ":media_bytes", prefix="device:")
        index_dram = index_dram_bytes(lach)
        flash_objects = flash_object_count(lach)
        bits = ratio(index_dram * 8 if index_dram is not None else None, flash_objects)
        row(
            name,
            f"{r['miss_ratio']:.4f}",
            fmt(held, ",.0f"),
            fmt(bits, ".1f"),
            fmt(flash_w / r["wall_s"] / 1e6 if flash_w is not None else None, ".2f"),
            fmt(ratio(flash_w, app_w), ".2f"),
            fmt(ratio(media, host), ".3f"),
            f"{r['server_rss_mib']:.0f}",
            f"{r['ops_per_s']:,.0f}",
        )
    print()
    print(
        "DRAM bits per flash object: the flash engines' DRAM (index, Bloom filters; not the DRAM cache "
        "in front) over the objects they hold. ALWA: bytes the engines wrote to flash over the bytes "
        "the clients set; DLWA: the measuring device's media over host bytes; both over the measured "
        "phase.\n"
    )


def sum_delta(r, lach, suffix, prefix):
    """The change over the measured phase of `stats lachesis` counters matching prefix*suffix."""
    names = [k for k in lach if k.startswith(prefix) and k.endswith(suffix)]
    vals = [stat_delta(r, k) for k in names]
    vals = [v for v in vals if v is not None]
    return sum(vals) if vals else None


def index_dram_bytes(lach):
    """DRAM of the flash engines: each stage's parts' dram_bytes (the DRAM cache excluded)."""
    vals = [
        float(v) for k, v in lach.items() if k.startswith("stage:") and k.count(":") == 3 and k.endswith(":dram_bytes")
    ]
    return sum(vals) if vals else None


def flash_object_count(lach):
    vals = [
        float(v) for k, v in lach.items() if k.startswith("stage:") and k.count(":") == 3 and k.endswith(":objects")
    ]
    return sum(vals) if vals else None


FDP_WARM_WRITES = 2.0  # warm-up: the host writes this many times the device's capacity
FDP_HALF_WRITES = 5.0  # each half of the measured window at least this many device writes
FDP_HALVES_AGREE = 0.05  # a steady run's two halves' DLWA agree within this (relative)


def device_bytes(r, field, which="stats_after"):
    lach = r[which].get("lachesis") or {}
    vals = [float(v) for k, v in lach.items() if k.startswith("device:") and k.endswith(f":{field}")]
    return sum(vals) if vals else None


def window_delta(a, b, name):
    """A counter's change from report a's start to report b's end (two consecutive phases)."""
    x, y = (a["stats_before"].get("lachesis") or {}), (b["stats_after"].get("lachesis") or {})
    return float(y[name]) - float(x[name]) if name in x and name in y else None


def window_sum(a, b, suffix, prefix):
    lach = b["stats_after"].get("lachesis") or {}
    vals = [window_delta(a, b, k) for k in lach if k.startswith(prefix) and k.endswith(suffix)]
    vals = [v for v in vals if v is not None]
    return sum(vals) if vals else None


def streams(a, b):
    """Per engine part (summed over tenants): host, media and GC bytes over the window from
    report a's start to report b's end, from the device's per-handle counters
    (`handle:<device>:<h>:<field>`) and the stages' placement (`placement:<stage>:<part>`)."""
    lach = b["stats_after"].get("lachesis") or {}
    parts = {}
    for k, v in lach.items():
        if k.startswith("placement:"):
            parts.setdefault(v, set()).add(k.rsplit(":", 1)[1])
    part_of = {h: "+".join(sorted(p)) for h, p in parts.items()}
    out = {}
    for k in lach:
        if not (k.startswith("handle:") and k.endswith(":host_bytes")):
            continue
        _, dev, h, _ = k.split(":")
        part = part_of.get(h, f"handle {h}")
        acc = out.setdefault(part, {"host": 0.0, "media": 0.0, "gc": 0.0})
        for f, key in (("host", "host_bytes"), ("media", "media_bytes"), ("gc", "gc_bytes")):
            acc[f] += window_delta(a, b, f"handle:{dev}:{h}:{key}") or 0.0
    return out


def fdp_run(s, engine, handles, keys, tenants):
    """One server: warm-up, then two measured halves, each a kvload invocation (other seeds,
    the same workload). Returns the run's figures and whether it is at steady state."""
    common = [
        *lookaside(keys, "wide"),
        "--tenant",
        tenants[0],
        "--tenant",
        tenants[1],
        "--warmup-requests",
        0,
    ]
    capacity = None
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    # Warm-up in steps until the host has written FDP_WARM_WRITES device capacities.
    warm, step, seed = [], 100_000, 1
    while True:
        r = kvload(s, f"fdpwarm-{engine}-{handles}", *common, "--requests", step, "--seed", seed)
        warm.append(r)
        seed += 2
        lach = r["stats_after"].get("lachesis") or {}
        capacity = sum(
            float(v) * float(lach[k.replace(":regions", ":region_bytes")])
            for k, v in lach.items()
            if k.startswith("device:") and k.endswith(":regions")
        )
        written = device_bytes(r, "host_bytes")
        # Host bytes per request of this step (the later steps: a cache past its cold start).
        per_request = (written - (device_bytes(r, "host_bytes", "stats_before") or 0)) / (2 * step)
        if written >= FDP_WARM_WRITES * capacity or len(warm) >= 40:
            break
        step = max(50_000, int((FDP_WARM_WRITES * capacity - written) / per_request / 2) + 1)
    half = int(FDP_HALF_WRITES * 1.15 * capacity / per_request / 2) + 1
    a = kvload(s, f"fdphalf-{engine}-{handles}", *common, "--requests", half, "--seed", seed)
    b = kvload(s, f"fdp-{engine}-{handles}", *common, "--requests", half, "--seed", seed + 2)
    dl = []
    for x in (a, b):
        h, m = stat_sum(x, ":host_bytes", "device:"), stat_sum(x, ":media_bytes", "device:")
        dl.append((ratio(m, h), (h or 0) / capacity))
    host, media = window_sum(a, b, ":host_bytes", "device:"), window_sum(a, b, ":media_bytes", "device:")
    flash_w = window_sum(a, b, ":flash_bytes_written", "tenant:")
    app_w = window_sum(a, b, ":bytes_written", "tenant:")
    small_w = window_sum(a, b, f":{engine}:flash_bytes_written", "stage:")
    lach = b["stats_after"].get("lachesis") or {}
    small_dram = sum(
        float(v) for k, v in lach.items() if k.startswith("stage:") and k.endswith(f":{engine}:dram_bytes")
    )
    small_objects = sum(
        float(v) for k, v in lach.items() if k.startswith("stage:") and k.endswith(f":{engine}:objects")
    )
    (d1, w1), (d2, w2) = dl
    why = []
    if (device_bytes(warm[-1], "host_bytes") or 0) < FDP_WARM_WRITES * capacity:
        why.append(f"warm-up wrote under {FDP_WARM_WRITES:g} device capacities")
    if min(w1, w2) < FDP_HALF_WRITES:
        why.append(f"a half wrote {min(w1, w2):.1f} device capacities, under {FDP_HALF_WRITES:g}")
    if d1 is None or d2 is None or abs(d1 - d2) > FDP_HALVES_AGREE * min(d1, d2):
        why.append(f"halves' DLWA {fmt(d1, '.3f')} and {fmt(d2, '.3f')} differ by more than {FDP_HALVES_AGREE:.0%}")
    gets = a["hits"] + a["misses"] + b["hits"] + b["misses"]
    run = {
        "dlwa": ratio(media, host),
        "dlwa_halves": [d1, d2],
        "device_writes": (w1 + w2),
        "host": host,
        "media": media,
        "share": ratio(small_w, flash_w),
        "alwa": ratio(flash_w, app_w),
        "media_per_app": ratio(media, app_w),
        "bits": ratio(small_dram * 8, small_objects),
        "miss": (a["misses"] + b["misses"]) / gets if gets else None,
        "ops": statistics.mean([a["ops_per_s"], b["ops_per_s"]]),
        "streams": streams(a, b),
        "unsteady": "; ".join(why) or None,
        "load_average": load,
    }
    b["dlwa"] = run["dlwa"] if not why else None
    b["fdp_run"] = run
    return run


def stat_sum(r, suffix, prefix):
    lach = r["stats_after"].get("lachesis") or {}
    return sum_delta(r, lach, suffix, prefix)


def fdp(workdir):
    if "lachesis" not in SERVERS:
        print("### FDP: skipped (SERVERS has no lachesis)\n")
        return
    tenants = ["t0:", "t1:"]
    per_tenant_flash = max(64, int(256 * SCALE))
    device = per_tenant_flash * len(tenants)
    dram = max(4, int(16 * SCALE))
    small = float(os.environ.get("FDP_SMALL_FRACTION", "0.04"))
    engines = os.environ.get("FDP_SMALL_ENGINES", "kangaroo fairywren").split()
    handle_modes = os.environ.get("FDP_HANDLES", "separate shared").split()
    mean_object = 3100 + KEY_BYTES  # `wide`: log-normal, median 1 KiB, sigma 1.5
    keys = int(3 * per_tenant_flash * MIB / mean_object)
    print("### FDP on KV traffic: separate placement handles vs one\n")
    print(
        f"Two tenants (`t0:`, `t1:`), each {keys:,} keys (Zipf 0.9) with `wide` sizes (median 1 KiB, "
        f"most bytes in objects over 2 KiB: both the small-object engine and the log write), a working "
        f"set ~3x its cache; each tenant a {per_tenant_flash} MiB flash cache ({small:.0%} the small-object "
        f"engine, FairyWREN at least its 11 erase units of the device's 1 MiB reclaim unit; the rest "
        f"the log) behind {dram} MiB of DRAM, the two filling one {device} MiB measuring device (100% "
        f"utilisation, 7% OP). Look-aside, 2 threads, 8 in flight. Steady state: warm-up until the "
        f"host has written {FDP_WARM_WRITES:g}x the device's capacity, then a measured window of two "
        f"halves of at least {FDP_HALF_WRITES:g} device writes each (kvload invocations with other "
        f"seeds); a run whose halves' DLWA differ by more than {FDP_HALVES_AGREE:.0%} is refused. One "
        f"fresh device per run: `--small-engine kangaroo|fairywren` and `--handles separate` (each "
        f"tenant's engine parts on their own handles) vs `--handles shared` (every stream on handle 0). "
        f"Medians of the steady runs of {RUNS}.\n"
    )
    row(
        "small engine",
        "handles",
        "DLWA",
        "DLWA halves",
        "device writes measured",
        "host MiB written",
        "media MiB written",
        "small engine's share of flash writes",
        "ALWA",
        "media bytes per byte set",
        "DRAM bits / flash object",
        "small engine MiB",
        "miss ratio",
        "ops/s",
        "steady runs",
    )
    row(*["---"] * 15)
    breakdown = []
    for engine in engines:
        for handles in handle_modes:
            runs = []
            for _ in range(RUNS):
                with lachesis(
                    dram,
                    per_tenant_flash,
                    tenants,
                    device,
                    handles=handles,
                    small_fraction=small,
                    workdir=workdir,
                    small_engine=engine,
                ) as s:
                    runs.append(fdp_run(s, engine, handles, keys, tenants))
                    log(f"  {engine}, {handles}: load average at start {runs[-1]['load_average']}")
                try:
                    os.unlink(s.device_file)
                except OSError:
                    pass
            steady = [x for x in runs if not x["unsteady"]]
            for x in runs:
                if x["unsteady"]:
                    log(f"  refused ({engine}, {handles}): {x['unsteady']} (DLWA {fmt(x['dlwa'], '.3f')} not printed)")

            def med(k, rs=steady):
                vals = [x[k] for x in rs if x[k] is not None]
                return statistics.median(vals) if vals else None

            small_mib = small_engine_mib(per_tenant_flash, small, engine)
            if not steady:
                reasons = "; ".join(x["unsteady"] for x in runs)
                row(engine, handles, f"refused: {reasons}", *["–"] * 12)
                continue
            halves = ", ".join(f"{fmt(x['dlwa_halves'][0], '.3f')}/{fmt(x['dlwa_halves'][1], '.3f')}" for x in steady)
            row(
                engine,
                handles,
                fmt(med("dlwa"), ".3f"),
                halves,
                fmt(med("device_writes"), ".1f"),
                fmt(med("host") / MIB if med("host") is not None else None, ",.0f"),
                fmt(med("media") / MIB if med("media") is not None else None, ",.0f"),
                fmt(med("share"), ".0%"),
                fmt(med("alwa"), ".2f"),
                fmt(med("media_per_app"), ".2f"),
                fmt(med("bits"), ".1f"),
                f"{small_mib}",
                fmt(med("miss"), ".4f"),
                fmt(med("ops"), ",.0f"),
                f"{len(steady)} of {len(runs)}",
            )
            mid = sorted(steady, key=lambda x: x["dlwa"])[len(steady) // 2]
            breakdown.append((engine, handles, mid))
    print()
    print(
        "DLWA: the measuring device's media over host bytes over the whole window; DLWA halves: "
        "each steady run's first and second half. DRAM bits / flash object: the small-object "
        "engine's index DRAM (`stats lachesis` `stage:<s>:<engine>:dram_bytes`) over the objects "
        "it holds, at the end of the run. The FDP paper (CacheLib on a Samsung PM9D3 at 100% "
        "utilisation): DLWA ~1.03 with small and large objects on separate handles, up to 3.5 "
        "without FDP.\n"
    )
    if breakdown:
        print("Where the media writes come from (the median run, both tenants summed per engine part):\n")
        row("small engine", "handles", "stream", "host MiB", "media MiB", "GC MiB", "DLWA", "share of media")
        row(*["---"] * 8)
        for engine, handles, run in breakdown:
            total = sum(v["media"] for v in run["streams"].values()) or 1
            for part, v in sorted(run["streams"].items(), key=lambda kv: -kv[1]["media"]):
                row(
                    engine,
                    handles,
                    part,
                    f"{v['host'] / MIB:,.0f}",
                    f"{v['media'] / MIB:,.0f}",
                    f"{v['gc'] / MIB:,.1f}",
                    fmt(ratio(v["media"], v["host"]), ".3f"),
                    f"{v['media'] / total:.0%}",
                )
        print()


def small_engine_mib(flash_mib, fraction, engine):
    """MiB of a tenant's flash the small-object engine gets (lachesis-kv's rule: FairyWREN at
    least 11 erase units of 1 MiB, the rest whole units; Kangaroo whole 64 KiB blocks)."""
    if engine == "fairywren":
        return int(max(fraction, 11.5 / flash_mib) * flash_mib)
    return round(int(flash_mib * fraction * 16) / 16, 2)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sections", nargs="*", help="throughput, tiny, fdp (default: all three)")
    p.add_argument("--json", help="write every kvload report here")
    a = p.parse_args()
    for s in a.sections:
        if s not in ("throughput", "tiny", "fdp"):
            p.error(f"unknown section {s!r}: throughput, tiny, fdp")
    workdir = os.environ.get("WORKDIR") or tempfile.mkdtemp(prefix="kvbench-")
    try:
        for s in a.sections or ["throughput", "tiny", "fdp"]:
            {"throughput": throughput, "tiny": tiny, "fdp": fdp}[s](workdir)
    finally:
        if a.json:
            with open(a.json, "w") as f:
                json.dump(RESULTS, f)


if __name__ == "__main__":
    main()
