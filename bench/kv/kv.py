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
              utilisation: DLWA with separate placement handles vs all on one handle, for
              each small-object engine (FDP_SMALL_ENGINES, default "kangaroo fairywren").

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
                "--threads",
                2,
                "--pipeline",
                8,
                "--keys",
                keys,
                "--dist",
                "zipf:0.9",
                "--value-size",
                "50-300",
                "--mode",
                "lookaside",
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
    mean_object = 3100 + KEY_BYTES  # `wide`: log-normal, median 1 KiB, sigma 1.5
    keys = int(3 * per_tenant_flash * MIB / mean_object)
    # Per thread (2 threads), at about one miss in three: ~1 device write of warm-up, ~3 measured.
    warm = int(device * MIB / (mean_object / 3) / 2)
    measured = 3 * warm
    print("### FDP on KV traffic: separate placement handles vs one\n")
    print(
        f"Two tenants (`t0:`, `t1:`), each {keys:,} keys (Zipf 0.9) with `wide` sizes (median 1 KiB, "
        f"most bytes in objects over 2 KiB: both the small-object engine and the log write), a working "
        f"set ~3x its cache; each tenant a {per_tenant_flash} MiB flash cache ({small:.0%} the small-object "
        f"engine, as the paper's 4% small-object cache, FairyWREN at least its 11 erase units of the "
        f"device's 1 MiB reclaim unit; the rest the log) behind {dram} MiB of DRAM, the two "
        f"filling one {device} MiB measuring device (100% utilisation, 7% OP). Look-aside, 2 "
        f"threads, 8 in flight; {warm:,} warm-up then {measured:,} measured requests per thread. "
        f"The same run, one fresh device each: `--small-engine kangaroo|fairywren` and `--handles "
        f"separate` (each tenant's small-object engine parts and log on their own handles) vs "
        f"`--handles shared` (every stream on handle 0). Medians of {RUNS} runs.\n"
    )
    row(
        "small engine",
        "handles",
        "DLWA",
        "host MiB written",
        "media MiB written",
        "small engine's share of flash writes",
        "ALWA",
        "DRAM bits / flash object",
        "small engine MiB",
        "miss ratio",
        "ops/s",
    )
    row(*["---"] * 11)
    for engine in engines:
        for handles in ("separate", "shared"):
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
                    r = kvload(
                        s,
                        f"fdp-{engine}-{handles}",
                        "--threads",
                        2,
                        "--pipeline",
                        8,
                        "--keys",
                        keys,
                        "--dist",
                        "zipf:0.9",
                        "--value-size",
                        "wide",
                        "--mode",
                        "lookaside",
                        "--tenant",
                        tenants[0],
                        "--tenant",
                        tenants[1],
                        "--warmup-requests",
                        warm,
                        "--requests",
                        measured,
                    )
                lach = r["stats_after"].get("lachesis") or {}
                host = sum_delta(r, lach, ":host_bytes", prefix="device:")
                media = sum_delta(r, lach, ":media_bytes", prefix="device:")
                flash_w = sum_delta(r, lach, ":flash_bytes_written", prefix="tenant:")
                app_w = sum_delta(r, lach, ":bytes_written", prefix="tenant:")
                small_w = sum_delta(r, lach, f":{engine}:flash_bytes_written", prefix="stage:")
                small_dram = sum(
                    float(v) for k, v in lach.items() if k.startswith("stage:") and k.endswith(f":{engine}:dram_bytes")
                )
                small_objects = sum(
                    float(v) for k, v in lach.items() if k.startswith("stage:") and k.endswith(f":{engine}:objects")
                )
                r["dlwa"] = ratio(media, host)
                runs.append(
                    {
                        "dlwa": r["dlwa"],
                        "host": host,
                        "media": media,
                        "share": ratio(small_w, flash_w),
                        "alwa": ratio(flash_w, app_w),
                        "bits": ratio(small_dram * 8, small_objects),
                        "miss": r["miss_ratio"],
                        "ops": r["ops_per_s"],
                    }
                )
                try:
                    os.unlink(s.device_file)
                except OSError:
                    pass

            def med(k):
                vals = [x[k] for x in runs if x[k] is not None]
                return statistics.median(vals) if vals else None

            small_mib = small_engine_mib(per_tenant_flash, small, engine)
            row(
                engine,
                handles,
                fmt(med("dlwa"), ".3f"),
                fmt(med("host") / MIB if med("host") is not None else None, ",.0f"),
                fmt(med("media") / MIB if med("media") is not None else None, ",.0f"),
                fmt(med("share"), ".0%"),
                fmt(med("alwa"), ".2f"),
                fmt(med("bits"), ".1f"),
                f"{small_mib}",
                f"{med('miss'):.4f}",
                f"{med('ops'):,.0f}",
            )
    print()
    print(
        "DRAM bits / flash object: the small-object engine's index DRAM (`stats lachesis` "
        "`stage:<s>:<engine>:dram_bytes`) over the objects it holds, at the end of the run. "
        "The FDP paper (CacheLib on a Samsung PM9D3 at 100% utilisation): DLWA ~1.03 with "
        "small and large objects on separate handles, up to 3.5 without FDP.\n"
    )


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
