"""The FUSE sSwitch (`lachesis-fs mount`) on real mounts: unmodified programs, endpoint routing
with delegates, per-tenant cache stages.

Tenants are told apart by uid: helper processes run as uid 1001/1002 (the tests run as root).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, require, wait_for

FS_BIN = Path(os.environ.get("LACHESIS_FS_BIN", ROOT / "agents" / "target" / "release" / "lachesis-fs"))
MiB = 1 << 20


def cache(
    name: str,
    size: int,
    mode: str = "through",
    engine: str = "dram",
    owner: str | None = None,
    max_dirty: int = 16 * 1024 * 1024,
) -> dict:
    """A cache stage in the stage contract's shape (api-schemas: common.schema.json#/$defs/stage)."""
    return {
        "kind": "cache",
        "name": name,
        "owner": owner,
        "engine": engine,
        "size_bytes": size,
        "write_mode": mode,
        "eviction": "lru",
        "max_dirty_bytes": max_dirty,
        "device": None,
        "placement": [],
        "next": None,
    }


def stage_rule(
    name: str,
    prio: int,
    stage: dict,
    tenant: str | None = None,
    prefix: str | None = None,
    ops: list[str] | None = None,
) -> tuple[dict, dict]:
    """A rule sending its IO through `stage`, with the stage (the mount's rules file declares both)."""
    match: dict = {}
    if tenant:
        match["tenant"] = tenant
    if prefix:
        match["path_prefix"] = prefix
    if ops:
        match["ops"] = ops
    return {
        "name": name,
        "priority": prio,
        "match": match,
        "detours": [{"what": "io", "to": {"kind": "stage", "target": stage["name"]}}],
    }, stage


def rules_file(items: list) -> list | dict:
    """A rules file from rules and (rule, stage) pairs: `{"rules", "stages"}` when any stage."""
    rules = [i[0] if isinstance(i, tuple) else i for i in items]
    stages = {i[1]["name"]: i[1] for i in items if isinstance(i, tuple)}
    return {"rules": rules, "stages": list(stages.values())} if stages else rules


def replace_rules_file(path: Path, rules: list) -> None:
    """Writes the rules to `path` by rename, with an mtime after the old file's (the mount
    reloads on a changed mtime; two writes within one tick of the file system's clock would
    otherwise look unchanged)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rules_file(rules)))
    if path.exists():
        old = path.stat().st_mtime_ns
        if tmp.stat().st_mtime_ns <= old:
            os.utime(tmp, ns=(old + 1, old + 1))
    tmp.rename(path)


def file_rule(name: str, prio: int, dirs: list[str], **match) -> dict:
    return {
        "name": name,
        "priority": prio,
        "match": match,
        "detours": [{"what": "io", "to": {"kind": "file", "target": d}} for d in dirs],
    }


class Mount:
    """One `lachesis-fs mount` process over a backing directory, in a world-readable temp dir
    (tenant processes run as other uids)."""

    def __init__(self, base: Path, rules: list[dict], tenants: list[str] = (), extra: list[str] = ()) -> None:
        self.base = base
        self.extra = list(extra)
        self.backing = base / "backing"
        self.mnt = base / "mnt"
        self.rules_file = base / "rules.json"
        self.stats_file = base / "stats.json"
        self.log = base / "fs.log"
        self.tenants = list(tenants)
        for d in (self.backing, self.mnt):
            d.mkdir(exist_ok=True)
            d.chmod(0o777)
        self.set_rules(rules)
        self.proc: subprocess.Popen | None = None

    def set_rules(self, rules: list[dict]) -> None:
        """Replaces the rules file (the mount reloads it when its mtime changes)."""
        replace_rules_file(self.rules_file, rules)

    def reloads(self) -> int:
        """How many times the mount has reloaded its rules file so far."""
        return self.log.read_text(errors="replace").count("rules reloaded from") if self.log.exists() else 0

    def set_rules_and_wait(self, rules: list[dict]) -> None:
        """Replaces the rules and waits until the mount has loaded them."""
        before = self.reloads()
        self.set_rules(rules)
        wait_for("the mount to reload its rules", lambda: self.reloads() > before)

    def start(self) -> None:
        argv = [
            str(FS_BIN),
            "mount",
            "--backing",
            str(self.backing),
            "--mountpoint",
            str(self.mnt),
            "--rules",
            str(self.rules_file),
            "--stats",
            str(self.stats_file),
        ]
        for t in self.tenants:
            argv += ["--tenant", t]
        argv += self.extra
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        wait_for("the FUSE mount", lambda: os.path.ismount(self.mnt) or self.proc.poll() is not None)
        assert self.proc.poll() is None, f"lachesis-fs exited: {self.log.read_text()}"
        (self.mnt).chmod(0o777)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Unconditionally: once the daemon is gone the mount answers ENOTCONN, and
        # os.path.ismount() then says False although the mount is still there.
        subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], check=False, capture_output=True)

    def read_stats(self) -> dict | None:
        return json.loads(self.stats_file.read_text()) if self.stats_file.exists() else None

    def stats(self) -> dict:
        """Stats counting everything done before the call: the file is rewritten (atomically)
        with numbered snapshots, and while snapshot n is there, n + 1 may have been taken
        already but n + 2 is taken after this call."""
        now = self.read_stats()
        after = now["snapshot"] + 2 if now else 1
        return wait_for(
            "a stats snapshot taken after the call", lambda: (s := self.read_stats()) and s["snapshot"] >= after and s
        )

    def stage(self, tenant: str | None) -> dict:
        (s,) = [s["stats"] for s in self.stats()["stages"] if s["tenant"] == tenant and s["stats"]["kind"] == "cache"]
        return s


@pytest.fixture
def base() -> Iterator[Path]:
    require(FS_BIN.exists(), f"{FS_BIN} (cargo build --release -p lachesis-fs, or set LACHESIS_FS_BIN)")
    require(os.path.exists("/dev/fuse"), "/dev/fuse")
    require(os.geteuid() == 0, "root (tenant processes run as other uids)")
    d = Path(tempfile.mkdtemp(prefix="lachesis-fs-e2e-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def mounts(base: Path) -> Iterator[list[Mount]]:
    started: list[Mount] = []
    yield started
    for m in started:
        m.stop()


def mount(mounts: list[Mount], base: Path, rules: list[dict], tenants: list[str] = (), extra: list[str] = ()) -> Mount:
    m = Mount(base, rules, tenants, extra)
    m.start()
    mounts.append(m)
    return m


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{argv}: {p.stderr}"
    return p


def test_large_files_cp_cat_sha256(base: Path, mounts: list[Mount]) -> None:
    # /wb goes through a write-back cache stage in user space; everything else is passthrough.
    m = mount(mounts, base, [stage_rule("wb", 10, cache("cache/wb", 16 * MiB, "back"), prefix="/wb")])
    src = base / "src.bin"
    with src.open("wb") as f:
        f.write(os.urandom(96 * MiB))
    want = sha256(src)
    (m.mnt / "wb").mkdir()
    before = m.stats()
    run("cp", str(src), str(m.mnt / "pt.bin"))
    after_pt = m.stats()
    run("cp", str(src), str(m.mnt / "wb" / "u.bin"))
    for p in (m.mnt / "pt.bin", m.mnt / "wb" / "u.bin"):
        assert run("sha256sum", str(p)).stdout.split()[0] == want
        assert (
            hashlib.sha256(subprocess.run(["cat", str(p)], capture_output=True, check=True).stdout).hexdigest() == want
        )
    # The passthrough copy never went through user space; the stage copy did.
    assert after_pt["user_bytes_written"] == before["user_bytes_written"]
    assert m.stats()["user_bytes_written"] - after_pt["user_bytes_written"] == 96 * MiB
    # Written back on close: the backing file has the bytes.
    assert sha256(m.backing / "wb" / "u.bin") == want
    run("cp", str(m.mnt / "wb" / "u.bin"), str(base / "back.bin"))
    assert sha256(base / "back.bin") == want


def test_sqlite_write_heavy_integrity(base: Path, mounts: list[Mount]) -> None:
    m = mount(mounts, base, [stage_rule("wb", 10, cache("cache/wb", 4 * MiB, "back", max_dirty=MiB), prefix="/db")])
    (m.mnt / "db").mkdir()
    for path in (m.mnt / "db" / "cached.sqlite", m.mnt / "plain.sqlite"):
        con = sqlite3.connect(path)
        con.execute("PRAGMA journal_mode=WAL" if "plain" in path.name else "PRAGMA journal_mode=DELETE")
        con.execute("CREATE TABLE kv (k INTEGER PRIMARY KEY, v BLOB, n INTEGER)")
        rng = random.Random(7)
        expect: dict[int, int] = {}
        for txn in range(150):
            with con:
                for _ in range(60):
                    k = rng.randrange(3000)
                    if rng.random() < 0.15 and k in expect:
                        con.execute("DELETE FROM kv WHERE k = ?", (k,))
                        del expect[k]
                    else:
                        n = rng.randrange(1 << 30)
                        con.execute(
                            "INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", (k, rng.randbytes(rng.randrange(50, 900)), n)
                        )
                        expect[k] = n
        con.close()
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert dict(con.execute("SELECT k, n FROM kv")) == expect
        con.close()
    # The database reached the backing file system whole.
    con = sqlite3.connect(m.backing / "db" / "cached.sqlite")
    assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    con.close()


def test_fio_verify_crc32c(base: Path, mounts: list[Mount]) -> None:
    require(shutil.which("fio") is not None, "fio")
    m = mount(
        mounts,
        base,
        [
            stage_rule("wt", 10, cache("cache/wt", 8 * MiB), prefix="/cache"),
            file_rule("ep", 20, [str(base / "ep")], path_prefix="/ep"),
        ],
    )
    for d in ("cache", "ep", "pt"):
        (m.mnt / d).mkdir()
        p = run(
            "fio",
            "--name=v",
            f"--filename={m.mnt / d / 'f'}",
            "--size=24M",
            "--rw=randwrite",
            "--bs=4k",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--ioengine=psync",
            "--direct=1",
            "--output-format=json",
        )
        job = json.loads(p.stdout[p.stdout.index("{") :])["jobs"][0]
        assert job["error"] == 0, d
        assert job["read"]["io_bytes"] == 24 * MiB, d


def test_endpoint_routing_with_delegates_never_stale(base: Path, mounts: list[Mount]) -> None:
    ep = base / "ep"
    route = file_rule("w-to-ep", 10, [str(ep)], tenant="writer", ops=["write"])
    m = mount(mounts, base, [route], tenants=["writer=uid:1001"])
    blocks, bs = 256, 4096
    orig = bytes(range(256)) * (blocks * bs // 256)
    (m.mnt / "f").write_bytes(orig)
    (m.mnt / "f").chmod(0o666)
    # The writer (tenant "writer") stamps blocks with increasing versions and publishes each
    # version after its write returned; the reader (root, no tenant) must never read an older one.
    acked = base / "acked"
    acked.write_bytes(b"\0" * 8 * blocks)
    acked.chmod(0o666)
    stop = base / "stop-writer"
    writer = subprocess.Popen(
        ["python3", "-c", WRITER, str(m.mnt / "f"), str(acked), str(blocks), str(stop)],
        user=1001,
        stderr=subprocess.PIPE,
    )
    seen_versions = 0
    reads = 0
    # Rules change while IO runs: the route goes away and comes back, each change made once
    # the mount loaded the one before; the writer is stopped after four loaded changes.
    flips = loaded = 0
    applied = m.reloads()
    # A hang guard by count: two million reads without the mount loading a change.
    progress_at = 0
    try:
        with (m.mnt / "f").open("rb", buffering=0) as f, acked.open("rb", buffering=0) as a:
            while writer.poll() is None or reads == 0:
                assert reads - progress_at < 2_000_000, f"stuck: {flips} changes, {loaded} loaded, {reads} reads"
                b = random.randrange(blocks)
                floor = struct.unpack_from("<Q", os.pread(a.fileno(), 8, 8 * b))[0]
                data = os.pread(f.fileno(), bs, b * bs)
                reads += 1
                if floor == 0 and data == orig[b * bs : (b + 1) * bs]:
                    continue
                # Every 16-byte record must belong to this block and be no older than the acked
                # version, and the block must be one version throughout: the switch's block locks
                # keep a read racing a write of the block from seeing part of each.
                versions = set()
                for off in range(0, bs, 16):
                    ver, blk = struct.unpack_from("<QQ", data, off)
                    assert blk == b, f"block {b} holds a record of block {blk} at offset {off}"
                    assert ver >= floor, f"stale read of block {b}: version {ver} < acked {floor}"
                    versions.add(ver)
                assert len(versions) == 1, f"torn read of block {b}: versions {sorted(versions)}"
                seen_versions += 1
                if seen_versions % 32:
                    continue
                if flips > loaded and (now := m.reloads()) > applied:
                    applied, loaded, progress_at = now, loaded + 1, reads
                if flips == loaded:
                    if loaded >= 4 and seen_versions > 100:
                        stop.touch()
                    else:
                        flips += 1
                        m.set_rules([] if flips % 2 else [route])
    finally:
        if writer.poll() is None and not stop.exists():
            writer.kill()
    assert writer.wait() == 0, writer.stderr.read()
    assert seen_versions > 100 and loaded >= 4
    m.set_rules_and_wait([route])
    # Every block reads back its last version; written ranges live on the endpoint.
    final = [struct.unpack_from("<Q", acked.read_bytes(), 8 * b)[0] for b in range(blocks)]
    data = (m.mnt / "f").read_bytes()
    for b in range(blocks):
        if final[b]:
            assert struct.unpack_from("<QQ", data, b * bs) == (final[b], b)
        else:
            assert data[b * bs : (b + 1) * bs] == orig[b * bs : (b + 1) * bs]
    assert (ep / "f").exists() and (ep / ".lachesis-delegates.jsonl").exists()
    # A restarted switch recovers the delegates from the journal kept with the data.
    m.stop()
    m.start()
    assert (m.mnt / "f").read_bytes() == data


WRITER = r"""
import os, random, struct, sys
path, acked, blocks, stop = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
fd = os.open(path, os.O_RDWR)
a = os.open(acked, os.O_RDWR)
v = 0
while not os.path.exists(stop):
    v += 1
    b = random.randrange(blocks)
    os.pwrite(fd, struct.pack("<QQ", v, b) * 256, b * 4096)
    os.pwrite(a, struct.pack("<Q", v), 8 * b)
"""


def _hit_ratio_of_a(m: Mount, tenant_of_a: str | None) -> float:
    """Tenant a re-reads a 2 MiB working set between tenant b's scans; a's hit ratio over the
    last rounds."""
    reader = "import sys\nf=open(sys.argv[1],'rb',buffering=0)\nwhile f.read(1<<17): pass\n"
    hits = misses = 0
    for rnd in range(4):
        s0 = m.stage(tenant_of_a)
        run("python3", "-c", reader, str(m.mnt / "ws"), user=1001)
        s1 = m.stage(tenant_of_a)
        if rnd > 0:
            hits += s1["hits"] - s0["hits"]
            misses += s1["misses"] - s0["misses"]
        run(
            "python3",
            "-c",
            f"import sys\nf=open(sys.argv[1],'rb',buffering=0)\nf.seek({rnd * 12 * MiB})\nfor _ in range(96): f.read(1<<17)\n",
            str(m.mnt / "scan"),
            user=1002,
        )
    return hits / (hits + misses)


@pytest.mark.parametrize("engine", ["dram", "flash"])
def test_two_tenants_isolated_in_their_own_cache_stages(base: Path, mounts: list[Mount], engine: str) -> None:
    def target(who: str | None) -> dict:
        # The flash engine (lachesis-cache's log) lives on the mount's device, each stage in
        # regions of its own.
        return cache(f"cache/{who or 'shared'}", 8 * MiB, engine="loc" if engine == "flash" else "dram", owner=who)

    device = ["--device", f"flash0={base / 'flash0.img'}:64MiB"] if engine == "flash" else []
    tenants = ["a=uid:1001", "b=uid:1002"]
    m = mount(
        mounts,
        base,
        [stage_rule("a", 10, target("a"), tenant="a"), stage_rule("b", 10, target("b"), tenant="b")],
        tenants,
        extra=device,
    )
    (m.mnt / "ws").write_bytes(os.urandom(2 * MiB))
    (m.mnt / "scan").write_bytes(os.urandom(48 * MiB))
    isolated = _hit_ratio_of_a(m, "a")
    assert m.stage("b")["misses"] > 3000, "the scan went through b's own stage"
    m.stop()
    # Control: the same workload with one stage shared by both tenants loses a's working set.
    m2 = Mount(base, [stage_rule("shared", 10, target(None))], tenants, extra=device)
    m2.start()
    mounts.append(m2)
    shared = _hit_ratio_of_a(m2, None)
    assert isolated > 0.95, f"isolated hit ratio {isolated}"
    assert shared < 0.2, f"shared hit ratio {shared}"


def test_path_tenants_from_flag_and_file_most_specific_prefix_wins(base: Path, mounts: list[Mount]) -> None:
    """`--tenant web=path:/web` and, in the tenants file, `deep=path:/web/deep`: a file is its
    most specific path tenant's whoever opens it, component-wise (/webx is nobody's)."""
    tenants = base / "tenants"
    tenants.write_text("deep=path:/web/deep\n")
    rules = [
        stage_rule("web", 10, cache("cache/web", 8 * MiB, owner="web"), tenant="web", ops=["read"]),
        stage_rule("deep", 10, cache("cache/deep", 8 * MiB, owner="deep"), tenant="deep", ops=["read"]),
    ]
    m = mount(mounts, base, rules, ["web=path:/web"], extra=["--tenants-file", str(tenants)])
    for d in ("web/deep", "webx"):
        (m.backing / d).mkdir(parents=True)
    for name, blocks in (("web/a", 16), ("web/deep/b", 32), ("webx/c", 64)):
        (m.backing / name).write_bytes(os.urandom(blocks * 4096))
        run(
            "python3",
            "-c",
            "import sys\nf=open(sys.argv[1],'rb',buffering=0)\nwhile f.read(1<<16): pass\n",
            str(m.mnt / name),
            user=1001,
        )
    web, deep = m.stage("web"), m.stage("deep")
    assert (web["misses"], web["bytes_read_miss"] + web["bytes_read_hit"]) == (16, 16 * 4096), web
    assert (deep["misses"], deep["bytes_read_miss"] + deep["bytes_read_hit"]) == (32, 32 * 4096), deep


def test_tenant_added_while_mounted_routes_new_opens(base: Path, mounts: list[Mount]) -> None:
    ep = base / "ep"
    tenants = base / "tenants"
    tenants.write_text("# nobody yet\n")
    m = mount(mounts, base, [file_rule("t", 10, [str(ep)], tenant="t")], extra=["--tenants-file", str(tenants)])
    writer = "import sys\nwith open(sys.argv[1], 'wb') as f: f.write(bytes(range(256)) * 64)\n"
    data = bytes(range(256)) * 64
    run("python3", "-c", writer, str(m.mnt / "before"), user=1001)
    assert (m.backing / "before").read_bytes() == data, "uid 1001 is no tenant yet: plain IO"
    assert not (ep / "before").exists()
    tmp = base / "tenants.tmp"
    tmp.write_text("t=uid:1001\n")
    tmp.rename(tenants)
    wait_for("the tenants reload", lambda: "tenants reloaded" in m.log.read_text())
    run("python3", "-c", writer, str(m.mnt / "after"), user=1001)
    # Same mount, same process: the new tenant's rule routed the write to its endpoint.
    assert (ep / "after").read_bytes() == data
    assert (m.mnt / "after").read_bytes() == data
    assert m.proc.poll() is None
    # A bad tenants file is refused and the tenants stay.
    tmp.write_text("t=uid:nope\n")
    tmp.rename(tenants)
    wait_for("the refusal", lambda: "keeping the old tenants" in m.log.read_text())
    run("python3", "-c", writer, str(m.mnt / "later"), user=1001)
    assert (ep / "later").read_bytes() == data


def test_bad_rules_exit_2_with_a_message(base: Path) -> None:
    (base / "b").mkdir()
    (base / "m").mkdir()
    bad = base / "rules.json"
    bad.write_text(
        json.dumps(
            [
                {
                    "name": "x",
                    "priority": 1,
                    "match": {},
                    "detours": [{"what": "io", "to": {"kind": "stage", "target": "cache/undeclared"}}],
                }
            ]
        )
    )
    p = subprocess.run(
        [str(FS_BIN), "mount", "--backing", str(base / "b"), "--mountpoint", str(base / "m"), "--rules", str(bad)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.returncode == 2
    assert 'rule "x"' in p.stderr and "cache/undeclared" in p.stderr
    p = subprocess.run(
        [
            str(FS_BIN),
            "mount",
            "--backing",
            str(base / "b"),
            "--mountpoint",
            str(base / "m"),
            "--rules",
            str(bad),
            "--tenant",
            "a=gid:3",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.returncode == 2 and "uid:N or cgroup:PATH" in p.stderr
    assert not os.path.ismount(base / "m")


def cgroup2_root() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        dev, mnt, kind, *_ = line.split()
        if kind == "cgroup2":
            return Path(mnt)
    return None


def test_tenant_by_cgroup_routes_its_writes(base: Path, mounts: list[Mount]) -> None:
    root = cgroup2_root()
    require(root is not None and os.access(root, os.W_OK), "a writable cgroup v2 hierarchy")
    cg = root / f"lachesis-fs-e2e-{os.getpid()}"
    cg.mkdir()
    try:
        ep = base / "ep"
        m = mount(
            mounts,
            base,
            [file_rule("cg", 10, [str(ep)], tenant="jobs", ops=["write"])],
            tenants=[f"jobs=cgroup:/{cg.name}"],
        )
        writer = "import sys\nopen(sys.argv[1], 'wb').write(b'from the cgroup' * 1000)\n"
        # The same program, inside and outside the tenant's cgroup.
        run(
            "python3",
            "-c",
            writer,
            str(m.mnt / "in.bin"),
            preexec_fn=lambda: (cg / "cgroup.procs").write_text(str(os.getpid())),
        )
        run("python3", "-c", writer, str(m.mnt / "out.bin"))
        want = b"from the cgroup" * 1000
        assert (m.mnt / "in.bin").read_bytes() == want and (m.mnt / "out.bin").read_bytes() == want
        assert (ep / "in.bin").read_bytes() == want
        assert (m.backing / "in.bin").read_bytes() == bytes(len(want)), "the tenant's bytes went to the backing file"
        assert (m.backing / "out.bin").read_bytes() == want and not (ep / "out.bin").exists()
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache (util-linux fincore)."""
    out = run("fincore", "--bytes", "--noheadings", "--output", "RES", str(path)).stdout
    return int(out.split()[0])


def test_o_direct_reaches_the_backing_file_without_the_page_cache(base: Path, mounts: list[Mount]) -> None:
    require(shutil.which("fincore") is not None, "fincore (util-linux)")
    # /u goes through user space (a write-through cache stage); fio with O_DIRECT writes and
    # verifies one file, plain buffered IO another.
    m = mount(mounts, base, [stage_rule("wt", 10, cache("cache/wt", 4 * MiB), prefix="/u")])
    (m.mnt / "u").mkdir()
    for name, direct in (("direct", 1), ("buffered", 0)):
        run(
            "fio",
            "--name=d",
            f"--filename={m.mnt / 'u' / name}",
            "--size=8M",
            "--rw=write",
            "--bs=64k",
            f"--direct={direct}",
            "--ioengine=psync",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
        )
    direct, buffered = resident_bytes(m.backing / "u" / "direct"), resident_bytes(m.backing / "u" / "buffered")
    assert buffered >= 4 * MiB, f"control: buffered IO leaves the file cached ({buffered})"
    assert direct == 0, f"O_DIRECT IO went through the page cache below the switch ({direct} bytes cached)"
    # Unaligned O_DIRECT IO still works (FUSE accepts it; the switch writes it buffered).
    fd = os.open(m.mnt / "u" / "direct", os.O_RDWR | os.O_DIRECT)
    try:
        os.pwrite(fd, b"unaligned", 4097)
        assert os.pread(fd, 20, 4090)[7:16] == b"unaligned"
    finally:
        os.close(fd)


def test_write_back_reaches_the_backing_file_without_a_sync(base: Path, mounts: list[Mount]) -> None:
    m = mount(
        mounts,
        base,
        [stage_rule("wb", 10, cache("cache/wb", 16 * MiB, "back"), prefix="/wb")],
        extra=["--dirty-expire-ms", "300"],
    )
    (m.mnt / "wb").mkdir()
    data = os.urandom(MiB)
    # The writer keeps the file open (no close, no fsync) until told to exit.
    writer = subprocess.Popen(
        [
            "python3",
            "-c",
            "import sys\nf=open(sys.argv[1],'wb',buffering=0)\nf.write(sys.stdin.buffer.read(%d))\nprint('written', flush=True)\nsys.stdin.read()\n"
            % MiB,
            str(m.mnt / "wb" / "f"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=False,
    )
    try:
        writer.stdin.write(data)
        writer.stdin.flush()
        assert writer.stdout.readline() == b"written\n"
        # No close, no fsync: only the flusher (dirty data older than 300 ms) can bring it.
        wait_for("the flusher", lambda: (m.backing / "wb" / "f").read_bytes() == data)
        # Whole blocks went through the flusher (pieces of blocks a split request cut are
        # written through at once).
        assert m.stage(None)["writebacks"] >= 200
    finally:
        writer.stdin.close()
        writer.wait(timeout=10)
