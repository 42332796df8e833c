"""Agent-to-agent forwarding (`tcp://` endpoints) between two network namespaces joined by a veth
pair: `lachesis-fs serve` runs in one, the FUSE mount in the other (entered with `nsenter --net`
only, so the mount stays visible here). One tenant's writes are routed to the remote agent;
reads of written ranges follow them (delegates), reads of other ranges stay local, and a
concurrent reader never sees stale data, also while the rules change under it.

Needs root, `ip`, `nsenter`, `/dev/fuse` and the binary (LACHESIS_FS_BIN); under CI=true a
missing one fails.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, require, wait_for
from test_fs import replace_rules_file

FS_BIN = Path(os.environ.get("LACHESIS_FS_BIN", ROOT / "agents" / "target" / "release" / "lachesis-fs"))
BLOCK = 4096
BLOCKS = 64
TENANT_UID = 1001
# Tenant processes run as another uid, which cannot run the venv interpreter under /work.
TENANT_PY = "/usr/bin/python3"
SERVER_IP, CLIENT_IP, PORT = "10.231.77.1", "10.231.77.2", 7070
# The mounts' remote timeout: long enough that no healthy request on a loaded machine runs
# into it; only the wedged remote's request waits for it out (tenant_pwrite waits longer).
REMOTE_TIMEOUT_MS = 30000


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


class NetnsPair:
    """Two network namespaces joined by a veth pair; `close` removes them (and the veth)."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.server, self.client = f"lfs-srv-{tag}", f"lfs-cli-{tag}"
        self.close()
        sh("ip", "netns", "add", self.server)
        sh("ip", "netns", "add", self.client)
        veth_s, veth_c = f"lfs{tag}s", f"lfs{tag}c"
        sh(
            "ip",
            "link",
            "add",
            veth_s,
            "netns",
            self.server,
            "type",
            "veth",
            "peer",
            "name",
            veth_c,
            "netns",
            self.client,
        )
        for ns, dev, ip in ((self.server, veth_s, SERVER_IP), (self.client, veth_c, CLIENT_IP)):
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def close(self) -> None:
        for ns in (self.server, self.client):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)

    def exists(self) -> bool:
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
        return any(line.split()[0] in (self.server, self.client) for line in out.splitlines() if line.strip())


def pattern(block: int, version: int) -> bytes:
    """A block's content at a version: its number and version, then a filler derived from both."""
    head = struct.pack("<QQ", block, version)
    fill = bytes([(block * 31 + version) % 251 + 1]) * (BLOCK - len(head))
    return head + fill


def parse(data: bytes) -> tuple[int, int]:
    block, version = struct.unpack("<QQ", data[:16])
    assert data == pattern(block, version), f"torn or foreign block (header {block}/{version})"
    return block, version


WRITER = r"""
import os, struct, sys, random
BLOCK, BLOCKS = %d, %d
path, rounds, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# Versions keep growing across writer runs: each run starts above the last one's.
def pattern(b, v):
    head = struct.pack("<QQ", b, v)
    return head + bytes([(b * 31 + v) %% 251 + 1]) * (BLOCK - len(head))
rng = random.Random(seed)
fd = os.open(path, os.O_RDWR)
version = seed * 1000
for i in range(rounds):
    b = rng.randrange(BLOCKS // 2)  # the tenant writes the first half only
    version += 1
    os.pwrite(fd, pattern(b, version), b * BLOCK)
    print(b, version, flush=True)
    if i %% 50 == 49:
        os.fsync(fd)
os.close(fd)
""" % (BLOCK, BLOCKS)


@pytest.fixture
def world() -> Iterator[dict]:
    require(sys.platform == "linux" and os.geteuid() == 0, "root (network namespaces, tenant uid)")
    require(shutil.which("ip") is not None, "iproute2 (`ip`)")
    require(shutil.which("nsenter") is not None, "nsenter (util-linux)")
    require(os.path.exists("/dev/fuse"), "/dev/fuse")
    require(FS_BIN.exists(), f"{FS_BIN} (cargo build --release -p lachesis-fs, or set LACHESIS_FS_BIN)")
    base = Path(tempfile.mkdtemp(prefix="lachesis-fs-remote-", dir="/tmp"))
    base.chmod(0o755)
    procs: list[subprocess.Popen] = []
    mnt = base / "mnt"
    ns = None
    try:
        ns = NetnsPair()
        yield {"base": base, "ns": ns, "procs": procs, "mnt": mnt}
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        # Unconditionally: a mount whose daemon died answers ENOTCONN and ismount() says False.
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, capture_output=True)
        if ns is not None:
            ns.close()
            assert not ns.exists(), "network namespaces left behind"
        shutil.rmtree(base, ignore_errors=True)


def rules(on: bool) -> list[dict]:
    if not on:
        return []
    return [
        {
            "name": "to-remote",
            "priority": 1,
            "match": {"tenant": "remote", "ops": ["write"]},
            "detours": [{"what": "io", "to": {"kind": "file", "target": f"tcp://{SERVER_IP}:{PORT}/ep"}}],
        }
    ]


def set_rules(path: Path, r: list[dict]) -> None:
    """Replaces the rules file next to the mount's log and waits until the mount loaded it."""
    log = path.parent / "mount.log"
    reloads = lambda: log.read_text(errors="replace").count("rules reloaded from")  # noqa: E731
    before = reloads()
    replace_rules_file(path, r)
    wait_for("the mount to reload its rules", lambda: reloads() > before)


def start(w: dict) -> tuple[Path, Path, Path]:
    base, ns, procs, mnt = w["base"], w["ns"], w["procs"], w["mnt"]
    backing, remote_root = base / "backing", base / "remote-root"
    for d in (backing, remote_root, mnt):
        d.mkdir()
        d.chmod(0o777)
    log = (base / "serve.log").open("ab")
    procs.append(
        subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns.server,
                str(FS_BIN),
                "serve",
                "--listen",
                f"{SERVER_IP}:{PORT}",
                "--root",
                str(remote_root),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    rules_file = base / "rules.json"
    rules_file.write_text(json.dumps(rules(True)))
    mlog = (base / "mount.log").open("ab")
    mount = subprocess.Popen(
        [
            "nsenter",
            f"--net=/run/netns/{ns.client}",
            str(FS_BIN),
            "mount",
            "--backing",
            str(backing),
            "--mountpoint",
            str(mnt),
            "--rules",
            str(rules_file),
            "--tenant",
            f"remote=uid:{TENANT_UID}",
            "--remote-timeout-ms",
            str(REMOTE_TIMEOUT_MS),
        ],
        stdout=mlog,
        stderr=subprocess.STDOUT,
    )
    procs.append(mount)
    wait_for("the FUSE mount", lambda: os.path.ismount(mnt) or mount.poll() is not None)
    assert mount.poll() is None, (base / "mount.log").read_text()
    # The switch really runs in the client namespace: its traffic can only cross the veth.
    assert os.stat(f"/proc/{mount.pid}/ns/net").st_ino == os.stat(f"/run/netns/{ns.client}").st_ino
    assert os.stat(f"/proc/{mount.pid}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
    return backing, remote_root, rules_file


def test_tenant_writes_go_to_the_remote_host_and_reads_follow_them(world: dict) -> None:
    backing, remote_root, rules_file = start(world)
    mnt: Path = world["mnt"]
    f = mnt / "data"
    f.write_bytes(b"".join(pattern(b, 1) for b in range(BLOCKS)))
    f.chmod(0o666)

    acked = [1] * BLOCKS  # the newest version whose write returned, per block
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []
    reads = [0]

    def reader() -> None:
        rng = random.Random(7)
        fd = os.open(f, os.O_RDONLY)
        try:
            while not stop.is_set():
                b = rng.randrange(BLOCKS)
                with lock:
                    floor = acked[b]
                data = os.pread(fd, BLOCK, b * BLOCK)
                try:
                    got_b, v = parse(data)
                except AssertionError as e:
                    errors.append(f"block {b}: {e}")
                    return
                if got_b != b or v < floor:
                    errors.append(f"block {b}: read version {v} of block {got_b}, but version {floor} was acknowledged")
                    return
                reads[0] += 1
        finally:
            os.close(fd)

    def run_writer(rounds: int, seed: int) -> None:
        p = subprocess.Popen(
            [TENANT_PY, "-c", WRITER, str(f), str(rounds), str(seed)],
            user=TENANT_UID,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for line in p.stdout:
            b, v = map(int, line.split())
            with lock:
                acked[b] = max(acked[b], v)
        assert p.wait(timeout=120) == 0, p.stderr.read()

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        run_writer(300, 1)
        # Rules change under the reader: the tenant's writes stay local for a while (taking
        # their ranges back), then go remote again.
        set_rules(rules_file, rules(False))
        run_writer(100, 2)
        set_rules(rules_file, rules(True))
        run_writer(200, 3)
    finally:
        stop.set()
        for t in readers:
            t.join(timeout=30)
    assert not errors, errors
    assert reads[0] > 100, f"the reader only managed {reads[0]} reads"

    # Every block reads back at its newest acknowledged version through the mount.
    content = f.read_bytes()
    for b in range(BLOCKS):
        assert parse(content[b * BLOCK : (b + 1) * BLOCK]) == (b, acked[b]), f"block {b}"

    # Where the bytes live: the tenant's last writes on the remote host, not in the backing file;
    # blocks it never wrote are served locally (the remote copy has a hole there).
    remote = (remote_root / "ep" / "data").read_bytes()
    local = (backing / "data").read_bytes()
    on_remote = 0
    for b in range(BLOCKS):
        want = pattern(b, acked[b])
        r = remote[b * BLOCK : (b + 1) * BLOCK]
        l_ = local[b * BLOCK : (b + 1) * BLOCK]
        if b >= BLOCKS // 2:
            assert l_ == want and r.strip(b"\0") == b"", f"untouched block {b} must stay local"
        elif r == want:
            on_remote += 1
            assert l_ != want, f"block {b}: remote write also landed locally"
        else:
            assert l_ == want, f"block {b}: newest version neither remote nor local"
    assert on_remote >= 8, f"only {on_remote} blocks ended on the remote host"


PWRITE = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    os.pwrite(fd, sys.argv[2].encode() * 4096, 0)
except OSError as e:
    print(e.errno)
    sys.exit(0)
print("ok")
"""


def tenant_pwrite(path: Path, byte: str) -> str:
    p = subprocess.run(
        [TENANT_PY, "-c", PWRITE, str(path), byte],
        user=TENANT_UID,
        capture_output=True,
        text=True,
        timeout=REMOTE_TIMEOUT_MS / 1000 + 90,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_a_wedged_or_dead_remote_fails_io_with_eio_not_a_hang(world: dict) -> None:
    start(world)
    mnt: Path = world["mnt"]
    f = mnt / "x"
    f.write_bytes(b"1" * BLOCK)
    f.chmod(0o666)
    assert tenant_pwrite(f, "2") == "ok"
    server: subprocess.Popen = world["procs"][0]
    # Wedged: the connection stays up but nothing answers; the mount's remote timeout gives
    # EIO (a hang would end at tenant_pwrite's own, longer timeout, as a failure).
    os.kill(server.pid, signal.SIGSTOP)
    try:
        assert tenant_pwrite(f, "3") == "5"  # EIO
    finally:
        os.kill(server.pid, signal.SIGCONT)
    # Back: the next request reconnects. The timed-out write may or may not have landed (EIO
    # leaves the outcome open, as on a disk), but the acknowledged bytes were never lost and
    # the block is never torn.
    assert f.read_bytes() in (b"2" * BLOCK, b"3" * BLOCK)
    assert tenant_pwrite(f, "4") == "ok"
    assert f.read_bytes() == b"4" * BLOCK
    # Dead: refused at once, EIO; the reads of the delegated range fail too rather than
    # returning the stale local bytes.
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=10)
    assert tenant_pwrite(f, "5") == "5"
    with pytest.raises(OSError) as e:
        f.read_bytes()
    assert e.value.errno == 5


SECOND_PORT = 7071


def start_scatter(w: dict, mount_key: str) -> tuple[Path, Path, Path, Path, list[subprocess.Popen]]:
    """Two `serve` agents (ports 7070, 7071) that demand the key in `base/key`, and a mount
    authenticating with `base/<mount_key>` whose tenant writes go to agent A (primary), a
    local directory and agent B."""
    base, ns, procs, mnt = w["base"], w["ns"], w["procs"], w["mnt"]
    backing, root_a, root_b, local_ep = base / "backing", base / "root-a", base / "root-b", base / "local-ep"
    for d in (backing, root_a, root_b, mnt):
        d.mkdir()
        d.chmod(0o777)
    (base / "key").write_text("the-forwarding-key-of-this-test\n")
    (base / "wrong-key").write_text("some-other-forwarding-key-entirely\n")
    servers = []
    for root, port in ((root_a, PORT), (root_b, SECOND_PORT)):
        log = (base / f"serve-{port}.log").open("ab")
        p = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns.server,
                str(FS_BIN),
                "serve",
                "--listen",
                f"{SERVER_IP}:{port}",
                "--root",
                str(root),
                "--forward-key-file",
                str(base / "key"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(p)
        servers.append(p)
    rules_file = base / "rules.json"
    targets = [f"tcp://{SERVER_IP}:{PORT}/ep", str(local_ep), f"tcp://{SERVER_IP}:{SECOND_PORT}/ep"]
    rules_file.write_text(
        json.dumps(
            [
                {
                    "name": "scatter",
                    "priority": 1,
                    "match": {"tenant": "remote", "ops": ["write"]},
                    "detours": [{"what": "io", "to": {"kind": "file", "target": t}} for t in targets],
                }
            ]
        )
    )
    mlog = (base / "mount.log").open("ab")
    mount = subprocess.Popen(
        [
            "nsenter",
            f"--net=/run/netns/{ns.client}",
            str(FS_BIN),
            "mount",
            "--backing",
            str(backing),
            "--mountpoint",
            str(mnt),
            "--rules",
            str(rules_file),
            "--tenant",
            f"remote=uid:{TENANT_UID}",
            "--remote-timeout-ms",
            str(REMOTE_TIMEOUT_MS),
            "--forward-key-file",
            str(base / mount_key),
        ],
        stdout=mlog,
        stderr=subprocess.STDOUT,
    )
    procs.append(mount)
    wait_for("the FUSE mount", lambda: os.path.ismount(mnt) or mount.poll() is not None)
    assert mount.poll() is None, (base / "mount.log").read_text()
    return backing, root_a, root_b, local_ep, servers


def test_scatter_over_two_remote_agents_and_a_local_replica(world: dict) -> None:
    backing, root_a, root_b, local_ep, servers = start_scatter(world, "key")
    f: Path = world["mnt"] / "data"
    f.write_bytes(b"".join(pattern(b, 1) for b in range(BLOCKS)))
    f.chmod(0o666)
    p = subprocess.run(
        [TENANT_PY, "-c", WRITER, str(f), "200", "1"], user=TENANT_UID, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    newest = {b: 1 for b in range(BLOCKS)}
    for line in p.stdout.split("\n"):
        if line:
            b, v = map(int, line.split())
            newest[b] = v
    content = f.read_bytes()
    written = [b for b in range(BLOCKS) if newest[b] > 1]
    assert len(written) > 20
    for b in range(BLOCKS):
        assert parse(content[b * BLOCK : (b + 1) * BLOCK]) == (b, newest[b]), f"block {b}"
    # Every replica of the write set holds every acknowledged block; the backing file none.
    copies = {
        "A": (root_a / "ep" / "data").read_bytes(),
        "local": (local_ep / "data").read_bytes(),
        "B": (root_b / "ep" / "data").read_bytes(),
    }
    local = (backing / "data").read_bytes()
    for b in written:
        want = pattern(b, newest[b])
        for who, c in copies.items():
            assert c[b * BLOCK : (b + 1) * BLOCK] == want, f"block {b} missing on {who}"
        assert local[b * BLOCK : (b + 1) * BLOCK] != want
    # One replica gone: a write is not acknowledged (EIO), as not every replica has it.
    servers[1].send_signal(signal.SIGTERM)
    servers[1].wait(timeout=10)
    assert tenant_pwrite(f, "9") == "5"


def test_a_mount_with_the_wrong_key_is_refused_and_writes_nothing(world: dict) -> None:
    base: Path = world["base"]
    _, root_a, root_b, local_ep, _ = start_scatter(world, "wrong-key")
    f: Path = world["mnt"] / "x"
    f.write_bytes(b"1" * BLOCK)
    f.chmod(0o666)
    assert tenant_pwrite(f, "2") == "5"  # EIO
    assert not (root_a / "ep" / "x").exists() and not (root_b / "ep" / "x").exists()
    wait_for(
        "the server's refusal in its log",
        lambda: "refused unauthenticated peer" in (base / f"serve-{PORT}.log").read_text(),
    )
    assert "the forwarding keys differ" in (base / f"serve-{PORT}.log").read_text()
    assert "does not hold our forwarding key" in (base / "mount.log").read_text()
