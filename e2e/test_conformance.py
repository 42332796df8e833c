"""The external file-system checks through `lachesis-fs mount` (../shared/conformance: xfstests'
fsx and pjdfstest, built once per session with its build.sh), and fio's verify:

- fsx, every operation class on (but those the kernel's FUSE module refuses for every FUSE
  file system: conformance.FUSE_KERNEL_REFUSES), 20,000 operations on a file up to five times
  its stage's size, through each cache engine in each write mode, and with O_DIRECT (-Z)
  through the dram and loc engines; once while the stage is grown, shrunk, rebuilt with
  another engine and its rule removed and re-added (changes made at fsx's operation counts);
  once across a kill -9 and restart of the mount after fsync;
- fio verify=crc32c, 4 jobs, through a write-back stage resized every few MiB it takes;
- pjdfstest through the mount in a directory no rule touches, one through a write-through
  stage and one through a write-back stage.

The fsx runs of the matrix and the three pjdfstest runs go on in the background from the
module's first test (a bounded pool, LACHESIS_CONFORMANCE_JOBS fsx at a time, default 4; the
slowest engines first), each test waiting for its own; the live-change, kill and fio tests run
meanwhile. On 2 cores the IO waits and pjdfstest's sleeps overlap (the timing of each part is
printed at the end with -s; nothing is asserted on it). Flash devices are files in /dev/shm.
Seeds: LACHESIS_FSX_SEED=N for every run, =random for fresh ones; by default each run has its
own fixed seed (a hash of its name), printed in every failure with the command to repeat it.
LACHESIS_CONFORMANCE_KEEP=1 keeps the mounts' directories (logs, fsx's .fsxlog/.fsxops/.fsxgood).
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from conformance import (
    BUILD_TOOLS,
    CONFORMANCE,
    FALLOC_FL_KEEP_SIZE,
    FALLOC_FL_PUNCH_HOLE,
    FALLOC_FL_ZERO_RANGE,
    FUSE_KERNEL_REFUSES_FLAGS,
    FsxRun,
    ProveFile,
    ProveResult,
    build,
    fallocate,
    fsx_argv,
    run_fsx,
    run_prove,
    sha256,
    small_pipe,
)
from conftest import AGENT_BIN, Cluster, free_port, mounted, require, start_with_datapath, wait_for
from test_fs import FS_BIN, Mount, stage_rule

MiB = 1 << 20
# The smallest sizes the engines install something at with 1 MiB regions (agents/fs/README.md:
# a log needs 2 regions, a hybrid 3, FairyWREN 11 erase units, its hybrid 2 more), DRAM small.
ENGINES = {
    "dram": 2 * MiB,
    "loc": 2 * MiB,
    "kangaroo": 2 * MiB,
    "hybrid": 3 * MiB,
    "fairywren": 11 * MiB,
    "hybrid-fairywren": 13 * MiB,
}
MODES = ("through", "back", "around")
FSX_OPS = int(os.environ.get("LACHESIS_FSX_OPS", "20000"))
# The file fsx works on may grow to this many times its stage's size.
FILE_TIMES_STAGE = 5
JOBS = int(os.environ.get("LACHESIS_CONFORMANCE_JOBS", "4"))
PROVE_JOBS = int(os.environ.get("LACHESIS_PJDFSTEST_JOBS", "8"))
DEVICE_BYTES = 64 * MiB
SHM = Path("/dev/shm")
# Generous guards that only turn a hang into a failure.
FSX_TIMEOUT = 900.0
PROVE_TIMEOUT = 1800.0
PJD_DIRS = {
    "plain": "a directory no rule touches",
    "wt": "a write-through DRAM cache stage",
    "wb": "a write-back flash cache stage (loc)",
    "wb-uring": "a write-back flash cache stage (loc), its requests over FUSE over io_uring",
}
# The module switches FUSE over io_uring on for its run (and back after): the `-uring` runs
# mount with `--fuse-transport uring`, the others with `dev` (the fallback every kernel has),
# and the agent's mount (`auto`) takes io_uring.
ENABLE_URING = Path("/sys/module/fuse/parameters/enable_uring")


def transport_of(name: str) -> str:
    return "uring" if name.endswith("-uring") else "dev"


def seed_for(name: str) -> int:
    env = os.environ.get("LACHESIS_FSX_SEED", "")
    if env == "random":
        return random.randrange(1, 1 << 30)
    if env:
        return int(env)
    return zlib.crc32(name.encode()) % 1_000_000 + 1


def stage(name: str, engine: str, size: int, mode: str, max_dirty: int | None = None) -> dict:
    """A cache stage in the stage contract's shape (api-schemas: common.schema.json#/$defs/stage)."""
    return {
        "kind": "cache",
        "name": name,
        "owner": None,
        "engine": engine,
        "size_bytes": size,
        "write_mode": mode,
        "eviction": "lru",
        "max_dirty_bytes": max_dirty or max(size // 2, 4096),
        "device": None,
        "placement": [],
        "next": None,
    }


def stage_stats(m: Mount, name: str, fresh: bool = True) -> dict | None:
    """The counters of stage `name` (a snapshot taken after the call when `fresh`)."""
    s = m.stats() if fresh else m.read_stats()
    found = [x["stats"] for x in (s or {}).get("stages", []) if x["name"] == name]
    return found[0] if found else None


def brief(st: dict | None) -> str:
    if not st:
        return "no such stage in the stats file"
    keys = ("engine", "mode", "installed_bytes", "hits", "misses", "evictions", "writebacks", "dirty_bytes")
    return ", ".join(f"{k} {st.get(k)}" for k in keys)


def mount_state(m: Mount) -> str:
    """Whether the mount process is alive, and its log's tail when not."""
    if m.proc is not None and m.proc.poll() is not None:
        return f"the mount process died (exit {m.proc.returncode}); its log ends:\n{m.log.read_text(errors='replace')[-3000:]}"
    return "the mount process is alive"


def reproduce(test: str, seed: int) -> str:
    return f"LACHESIS_FSX_SEED={seed} .lachesis/venv/bin/pytest -q e2e/test_conformance.py -k '{test}'"


# ---------------------------------------------------------------- session: the tools, the lab


@pytest.fixture(scope="session")
def tools() -> Iterator[Path]:
    require(FS_BIN.exists(), f"{FS_BIN} (cd agents && cargo build --release -p lachesis-fs, or set LACHESIS_FS_BIN)")
    require(os.path.exists("/dev/fuse"), "/dev/fuse")
    require(os.geteuid() == 0, "root (pjdfstest changes owners; FUSE mounts)")
    require(
        (CONFORMANCE / "build.sh").exists(),
        f"{CONFORMANCE / 'build.sh'} (the shared conformance sources next to the checkout)",
    )
    for tool in (*BUILD_TOOLS, "fio", "fusermount3"):
        require(
            shutil.which(tool) is not None,
            f"{tool} (./lachesis install: gcc make libc6-dev autoconf automake perl fio fuse3)",
        )
    d = Path(tempfile.mkdtemp(prefix="lachesis-conformance-build-"))
    try:
        yield build(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Lab:
    """The module's folder (mounts, fsx logs, ext4 references), its mounts, and the runs going
    on in the background."""

    def __init__(self, base: Path, tools: Path) -> None:
        self.base = base
        self.tools = tools
        self.fsx = tools / "fsx"
        self.mounts: list[Mount] = []
        self.devices: list[Path] = []
        self.fsx_pool = ThreadPoolExecutor(max(JOBS, 1), thread_name_prefix="fsx")
        self.prove_pool = ThreadPoolExecutor(len(PJD_DIRS), thread_name_prefix="prove")
        # The foreground tests' runs on the backing file system, not queued behind the matrix.
        self.ref_pool = ThreadPoolExecutor(2, thread_name_prefix="reference")
        self.fsx_runs: dict[tuple[str, str, bool, str], tuple[Mount, Future]] = {}
        self.pjd_runs: dict[str, tuple[Mount, Future]] = {}
        self.launched = False
        self.t0 = time.monotonic()
        self.timings: list[tuple[str, float, float]] = []  # (what, started at, seconds)
        self._baseline: dict[bool, set[str]] = {}
        self._ref_lock = threading.Lock()
        self._ref: dict[str, ProveFile | None] = {}

    def submit(self, pool: ThreadPoolExecutor, label: str, fn, *args) -> Future:
        """fn(*args) on `pool`, its start and end noted for the module's timing summary."""

        def timed():
            t0 = time.monotonic()
            try:
                return fn(*args)
            finally:
                self.timings.append((label, t0 - self.t0, time.monotonic() - t0))

        return pool.submit(timed)

    def dir(self, name: str) -> Path:
        d = self.base / name
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
        return d

    def mount(self, name: str, items: list, flash: bool, extra: list[str] = (), transport: str = "dev") -> Mount:
        base = self.dir(name)
        device = []
        if flash:
            # In memory when it can be (/dev/shm): the tiny-object engines write tens of times
            # what they cache, and the machine's one disk is shared.
            img = (SHM / f"{self.base.name}-{name.replace('/', '-')}.img") if SHM.is_dir() else base / "flash0.img"
            self.devices.append(img)
            device = ["--device", f"flash0={img}:{DEVICE_BYTES // MiB}MiB"]
        m = Mount(base, items, extra=[*device, "--fuse-transport", transport, *extra])
        self.mounts.append(m)
        m.start()
        return m

    def fsx_baseline(self, direct: bool) -> set[str]:
        """The operation classes fsx switches off on the backing file system itself."""
        if direct not in self._baseline:
            d = self.dir(f"ext4-baseline{'-direct' if direct else ''}")
            run = run_fsx(
                "baseline", fsx_argv(self.fsx, d / "f", seed=1, ops=1, maxlen=MiB, logdir=d, direct=direct), 1, 60
            )
            assert run.ok, f"fsx on the backing file system: {run.describe()}"
            self._baseline[direct] = run.disabled()
        return self._baseline[direct]

    def backing_failures(self, names: list[str]) -> dict[str, ProveFile | None]:
        """pjdfstest's `names` re-run on the backing file system (a directory beside the
        mounts' backing directories): what fails there too is the file system's, not the
        mount's. Cached across directories."""
        with self._ref_lock:
            todo = [n for n in names if n not in self._ref]
            if todo:
                d = self.dir(f"pjdfstest-backing-{len(self._ref)}")
                tests = self.tools / "pjdfstest" / "tests"
                t0 = time.monotonic()
                res = run_prove(d, [tests / n for n in todo], PROVE_JOBS, PROVE_TIMEOUT, tests)
                self.timings.append(
                    (f"pjdfstest: {len(todo)} files again on the backing fs", t0 - self.t0, time.monotonic() - t0)
                )
                for n in todo:
                    self._ref[n] = res.failing.get(n)
            return {n: self._ref[n] for n in names}

    def close(self) -> None:
        self.fsx_pool.shutdown(wait=True, cancel_futures=True)
        self.prove_pool.shutdown(wait=True, cancel_futures=True)
        self.ref_pool.shutdown(wait=True, cancel_futures=True)
        # Where the module's time went (printed with -s; nothing is asserted on it).
        lines = [
            f"{start:7.1f} s +{secs:6.1f} s  {what}" for what, start, secs in sorted(self.timings, key=lambda t: t[1])
        ]
        lines.append(f"module: {time.monotonic() - self.t0:.1f} s")
        (self.base / "timings.txt").write_text("\n".join(lines) + "\n")
        print("\nconformance timings (start, duration):\n" + "\n".join(lines))
        for m in self.mounts:
            m.stop()
        for d in self.devices:
            d.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def lab(tools: Path) -> Iterator[Lab]:
    require(ENABLE_URING.exists(), f"{ENABLE_URING} (a kernel with FUSE over io_uring, 6.14+)")
    uring_was = ENABLE_URING.read_text().strip()
    ENABLE_URING.write_text("Y")
    base = Path(tempfile.mkdtemp(prefix="lachesis-conformance-", dir="/tmp"))
    base.chmod(0o755)
    lab = Lab(base, tools)
    try:
        yield lab
    finally:
        lab.close()
        ENABLE_URING.write_text(uring_was)
        if os.environ.get("LACHESIS_CONFORMANCE_KEEP"):
            print(f"\nconformance: kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------- background: the matrix, pjdfstest

# O_DIRECT (-Z) through the DRAM and the log engines, the two that resize in place.
DIRECT_ENGINES = ("dram", "loc")
SLOWEST_FIRST = ("fairywren", "kangaroo", "hybrid-fairywren", "hybrid", "loc", "dram")
FSX_MATRIX = [(e, m, False, "dev") for e in ENGINES for m in MODES] + [
    (e, m, True, "dev") for e in DIRECT_ENGINES for m in MODES
]
# Over FUSE over io_uring: the write-back log stage, buffered and O_DIRECT.
FSX_MATRIX += [("loc", "back", False, "uring"), ("loc", "back", True, "uring")]


def fsx_id(engine: str, mode: str, direct: bool, transport: str = "dev") -> str:
    return f"{engine}-{mode}{'-direct' if direct else ''}{'-uring' if transport == 'uring' else ''}"


def assert_took_io_uring(m: Mount, what: str) -> None:
    """The mount's stats say its requests came over io_uring (not the /dev/fuse fallback)."""
    fuse = (m.stats() or {}).get("fuse", {})
    assert fuse.get("transport") == "uring" and fuse.get("ring_requests", 0) > 0, (
        f"{what}: the mount was to take FUSE over io_uring, its stats say {fuse}"
    )


def launch(lab: Lab, items: list[pytest.Item]) -> None:
    """Starts, in the background, the fsx runs and pjdfstest runs of the selected tests."""
    if lab.launched:
        return
    lab.launched = True
    mine = [i for i in items if i.module is not None and i.module.__name__ == __name__ and hasattr(i, "callspec")]
    fsx = [
        (
            i.callspec.params["engine"],
            i.callspec.params["mode"],
            i.callspec.params["direct"],
            i.callspec.params["transport"],
        )
        for i in mine
        if i.originalname == "test_fsx"
    ]
    pjd = [i.callspec.params["where"] for i in mine if i.originalname == "test_pjdfstest"]
    pjd_mounts: dict[str, Mount] = {}
    for where in pjd:
        transport = transport_of(where)
        if transport not in pjd_mounts:
            pjd_mounts[transport] = lab.mount(
                "pjdfstest" + ("-uring" if transport == "uring" else ""),
                [
                    stage_rule("wt", 10, stage("cache/wt", "dram", 4 * MiB, "through"), prefix="/wt"),
                    stage_rule("wb", 10, stage("cache/wb", "loc", 4 * MiB, "back"), prefix="/wb"),
                ],
                flash=True,
                transport=transport,
            )
        m = pjd_mounts[transport]
        d = m.mnt / where.removesuffix("-uring")
        d.mkdir(exist_ok=True)
        lab.pjd_runs[where] = (m, lab.submit(lab.prove_pool, f"pjdfstest /{where}", pjdfstest, lab, d))
    # One mount per engine (and O_DIRECT or not, and transport), a directory per write mode,
    # each its stage.
    groups: dict[tuple[str, bool, str], list[str]] = {}
    for engine, mode, direct, transport in fsx:
        groups.setdefault((engine, direct, transport), []).append(mode)
    mounts = {}
    for (engine, direct, transport), modes in groups.items():
        mounts[(engine, direct, transport)] = m = lab.mount(
            f"fsx-{engine}{'-direct' if direct else ''}{'-uring' if transport == 'uring' else ''}",
            [
                stage_rule(mode, 10, stage(f"cache/{mode}", engine, ENGINES[engine], mode), prefix=f"/{mode}")
                for mode in modes
            ],
            flash=engine != "dram",
            extra=["--dirty-expire-ms", "500"],
            transport=transport,
        )
        for mode in modes:
            (m.mnt / mode).mkdir()
    # The slowest first (the tiny-object engines store a block as four objects), so the pool
    # ends together.
    for engine, mode, direct, transport in sorted(fsx, key=lambda p: (p[2], SLOWEST_FIRST.index(p[0]))):
        m, name = mounts[(engine, direct, transport)], fsx_id(engine, mode, direct, transport)
        seed = seed_for(name)
        argv = fsx_argv(
            lab.fsx,
            m.mnt / mode / "f",
            seed=seed,
            ops=FSX_OPS,
            maxlen=FILE_TIMES_STAGE * ENGINES[engine],
            logdir=lab.dir(f"fsx-logs/{name}"),
            direct=direct,
        )
        lab.fsx_runs[(engine, mode, direct, transport)] = (
            m,
            lab.submit(lab.fsx_pool, f"fsx {name}", run_fsx, name, argv, seed, FSX_TIMEOUT),
        )


def pjdfstest(lab: Lab, where: Path) -> ProveResult:
    """pjdfstest from `where` on the mount; the test files that failed are run again on the
    backing file system at once (cached), still in the background."""
    tests = lab.tools / "pjdfstest" / "tests"
    res = run_prove(where, [tests], PROVE_JOBS, PROVE_TIMEOUT, tests)
    if not res.ok:
        lab.backing_failures(sorted(n for n in res.failing if n != "(prove)"))
    return res


@pytest.fixture(autouse=True)
def timed(lab: Lab, request: pytest.FixtureRequest) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    lab.timings.append((f"test {request.node.name} (waiting included)", t0 - lab.t0, time.monotonic() - t0))


@pytest.fixture
def background(lab: Lab, request: pytest.FixtureRequest) -> Lab:
    launch(lab, request.session.items)
    return lab


# ---------------------------------------------------------------- fsx while the stage changes


def fsx_with_changes(
    label: str,
    argv: list[str],
    seed: int,
    changes: list[tuple[int, str, Callable[[], Callable[[], bool]]]],
    window: int,
) -> tuple[FsxRun, list[str], str | None]:
    """Runs fsx (`argv` with -p 1) and makes each change when fsx reports its operation count:
    `make()` makes it and returns whether it is in force yet, which must hold before fsx is
    `window` operations further. fsx's output is not read meanwhile, so it blocks on its
    one-page pipe (no clock involved). Returns the run, what was made when, and what was made
    but never seen in force."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    small_pipe(proc.stdout.fileno())
    out: list[str] = []
    done: list[str] = []
    pending: tuple[int, str, Callable[[], bool]] | None = None  # (op made at, what, in force?)
    todo = list(changes)
    timer = threading.Timer(FSX_TIMEOUT, proc.kill)
    timer.start()
    try:
        for line in io.TextIOWrapper(proc.stdout, errors="replace"):
            out.append(line)
            if not (n := re.match(r"^(\d+) ", line)):
                continue
            op = int(n.group(1))
            if pending:
                at, what, loaded = pending
                if op >= at + window:
                    # fsx blocks on its output until the change is in force.
                    wait_for(f"'{what}' (made at operation {at}) to be in force", loaded, timeout=120)
                if loaded():
                    done.append(f"{what}: made at op {at}, in force by op {op}")
                    pending = None
            if pending is None and todo and op >= todo[0][0]:
                _, what, make = todo.pop(0)
                pending = (op, what, make())
        rc = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    missed = f"{pending[1]}: made at op {pending[0]}, not yet seen in force" if pending else None
    return FsxRun(label, argv, seed, "".join(out), rc), done + ([missed] if missed else []), missed


def test_fsx_while_the_stage_is_resized_rebuilt_and_its_rule_removed_and_readded(background: Lab) -> None:
    """One fsx run, its file behind a write-back stage changed under it: grown, shrunk (dirty
    blocks written back first), rebuilt with another engine, its rule and stage removed, added
    again, rebuilt as DRAM. Each change is made when fsx reports an operation count (-p 1, read
    from a one-page pipe) and must be in force before fsx is 500 operations further: until
    then fsx's output is not read, so fsx blocks writing it (no clock involved)."""
    lab = background
    name = "cache/live"
    changes = [
        (2000, "grown to 6 MiB", stage(name, "loc", 6 * MiB, "back")),
        (5000, "shrunk to 2 MiB", stage(name, "loc", 2 * MiB, "back")),
        (8000, "rebuilt as kangaroo (engine change)", stage(name, "kangaroo", 4 * MiB, "back")),
        (11000, "rule and stage removed", None),
        (14000, "rule and stage added again (loc)", stage(name, "loc", 4 * MiB, "back")),
        (17000, "rebuilt as dram write-through", stage(name, "dram", 4 * MiB, "through")),
    ]
    window = 500
    rules = lambda st: [] if st is None else [stage_rule("live", 10, st, prefix="/live")]  # noqa: E731
    m = lab.mount("live", rules(stage(name, "loc", 4 * MiB, "back")), flash=True, extra=["--dirty-expire-ms", "500"])
    (m.mnt / "live").mkdir()
    seed = seed_for("live")
    maxlen = FILE_TIMES_STAGE * 6 * MiB
    logs = lab.dir("fsx-logs/live")
    # The same run on the backing file system: the file fsx leaves there is what the mount's must hold.
    ref_dir = lab.dir("live-ref")
    ref_argv = fsx_argv(
        lab.fsx, ref_dir / "f", seed=seed, ops=FSX_OPS, maxlen=maxlen, logdir=ref_dir, extra=FUSE_KERNEL_REFUSES_FLAGS
    )
    ref = lab.submit(
        lab.ref_pool, "fsx live (reference on the backing fs)", run_fsx, "live-ref", ref_argv, seed, FSX_TIMEOUT
    )
    argv = fsx_argv(
        lab.fsx, m.mnt / "live" / "f", seed=seed, ops=FSX_OPS, maxlen=maxlen, logdir=logs, extra=["-p", "1"]
    )
    how = f"reproduce: {reproduce('while_the_stage', seed)}\n  fsx: {' '.join(argv)}"

    def in_force(st: dict | None) -> bool:
        now = stage_stats(m, name, fresh=False)
        if st is None:
            return now is None
        return now is not None and now["engine"] == st["engine"] and now["installed_bytes"] == st["size_bytes"]

    def change(st: dict | None) -> Callable[[], Callable[[], bool]]:
        def make() -> Callable[[], bool]:
            before = m.reloads()
            m.set_rules(rules(st))
            return lambda: m.reloads() > before and in_force(st)

        return make

    run, done, pending = fsx_with_changes(
        "live", argv, seed, [(at, what, change(st)) for at, what, st in changes], window
    )
    report = "\n    ".join(done) or "(none)"
    ok = run.ok
    assert ok, (
        f"fsx (seed {seed}) through a stage changed under it:\n  {run.describe()}\n  changes made before it:\n    {report}\n"
        f"  stage: {brief(stage_stats(m, name) if m.proc.poll() is None else None)}\n  {mount_state(m)}\n  {how}"
    )
    assert len(done) == len(changes) and not pending, (
        f"only {len(done)} of {len(changes)} changes were made while fsx ran:\n    {report}"
    )
    r = ref.result()
    assert r.ok, f"fsx on the backing file system (the reference): {r.describe()}"
    want = sha256(ref_dir / "f")
    assert sha256(m.mnt / "live" / "f") == want, (
        f"the file through the mount differs from the same fsx run's on the backing file system\n  {how}"
    )
    assert sha256(m.backing / "live" / "f") == want, (
        f"the backing file differs from the same fsx run's on the backing file system\n  {how}"
    )


# ---------------------------------------------------------------- fsx across two-phase rollouts

ROLLOUT_STAGES = {"cache/a": ("loc", "back"), "cache/b": ("kangaroo", "back"), "cache/c": ("dram", "through")}


def rollout_policy(target: str | None, priority: int = 10, resized: int = 0) -> str:
    """The policy of the rollout test: a path tenant, three cache stages and, unless `target`
    is None, the rule sending the tenant's IO to `target`."""
    stages = "".join(
        f"    - {{name: {n}, kind: cache, owner: live, engine: {e}, write_mode: {w}, "
        f"size_bytes: {(4 << 20) + (resized if n == 'cache/b' else 0)}, max_dirty_bytes: {2 << 20}}}\n"
        for n, (e, w) in ROLLOUT_STAGES.items()
    )
    rule = (
        (
            f"    - {{name: live-io, priority: {priority}, match: {{tenant: live}},"
            f" detours: [{{what: io, to: {{kind: stage, target: {target}}}}}]}}\n"
        )
        if target
        else ""
    )
    return (
        "apiVersion: lachesis.dev/v1\nkind: Policy\nmetadata: {name: live}\nspec:\n"
        "  tenants:\n    - {name: live, classifiers: [{kind: path_prefix, value: /live}]}\n"
        f"  stages:\n{stages}  rules:\n{rule or '    []'}"
    )


def test_fsx_across_two_phase_rollouts_of_the_agents_mount(
    background: Lab, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsx through a real agent's mount while the controller moves the file's flow between
    write-back and write-through stages of three engines (two-phase rollouts: quiesce, drain,
    install, resume), resizes a stage under it, removes the rule and adds it again. Each
    change is applied through the REST API when fsx reports an operation count and its rollout
    must have succeeded before fsx is 500 operations further; the file equals the same fsx run's
    on the backing file system, through the mount and in the backing directory after every
    stage wrote back."""
    lab = background
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "200")
    home = start_with_datapath(cluster, "64MiB")
    mnt, data = home / "mnt", home / "data"
    (data / "live").mkdir()
    ops = max(FSX_OPS // 2, 6000)
    seed = seed_for("two-phase")
    maxlen = FILE_TIMES_STAGE * 4 * MiB
    ref_dir = lab.dir("two-phase-ref")
    ref_argv = fsx_argv(
        lab.fsx, ref_dir / "f", seed=seed, ops=ops, maxlen=maxlen, logdir=ref_dir, extra=FUSE_KERNEL_REFUSES_FLAGS
    )
    ref = lab.submit(
        lab.ref_pool,
        "fsx two-phase (reference on the backing fs)",
        run_fsx,
        "two-phase-ref",
        ref_argv,
        seed,
        FSX_TIMEOUT,
    )
    argv = fsx_argv(
        lab.fsx,
        mnt / "live" / "f",
        seed=seed,
        ops=ops,
        maxlen=maxlen,
        logdir=lab.dir("fsx-logs/two-phase"),
        extra=["-p", "1"],
    )
    how = f"reproduce: {reproduce('two_phase', seed)}\n  fsx: {' '.join(argv)}"
    rollouts: list[dict] = []

    def apply(policy: str) -> Callable[[], bool]:
        with cluster.api() as api:
            r = api.post("/api/v1/policies", content=policy.encode(), headers={"content-type": "application/yaml"})
            assert r.status_code == 201, r.text
            rid = r.json()["rollout_id"]

        def done() -> bool:
            got = cluster.rollout(rid)
            if got["state"] == "pending":
                return False
            assert got["state"] == "succeeded", got
            rollouts.append(got)
            return True

        return done

    first = apply(rollout_policy("cache/a"))
    wait_for("the first rollout", first, timeout=60)
    step = ops // 7
    changes = [
        (1 * step, "flow moved a (loc, back) -> b (kangaroo, back)", lambda: apply(rollout_policy("cache/b"))),
        (2 * step, "b grown by 2 MiB", lambda: apply(rollout_policy("cache/b", resized=2 << 20))),
        (3 * step, "flow moved b -> c (dram, through)", lambda: apply(rollout_policy("cache/c", resized=2 << 20))),
        (4 * step, "flow moved c -> a, priority changed", lambda: apply(rollout_policy("cache/a", 20, 2 << 20))),
        (5 * step, "rule removed", lambda: apply(rollout_policy(None, resized=2 << 20))),
        (6 * step, "rule added again -> b", lambda: apply(rollout_policy("cache/b", resized=2 << 20))),
    ]
    run, done, pending = fsx_with_changes("two-phase", argv, seed, changes, 500)
    report = "\n    ".join(done) or "(none)"
    assert run.ok, (
        f"fsx (seed {seed}) across rollouts:\n  {run.describe()}\n  changes made before it:\n    {report}\n  {how}"
    )
    assert len(done) == len(changes) and not pending, f"only {len(done)} of {len(changes)} changes made:\n    {report}"
    # The moves were two-phase: their rollouts quiesced the flow first.
    phases = [r["phase"] for r in rollouts]
    assert sum(p is not None for p in phases) >= 3, phases
    r = ref.result()
    assert r.ok, f"fsx on the backing file system (the reference): {r.describe()}"
    want = sha256(ref_dir / "f")
    assert sha256(mnt / "live" / "f") == want, f"the file through the mount differs from the reference\n  {how}"
    # fsx closed the file: every write-back stage wrote it back.
    assert sha256(data / "live" / "f") == want, f"the backing file differs from the reference\n  {how}"


# ---------------------------------------------------------------- fsx through both levels of a two-level cache

# fallocate's classes (allocate, punch, zero; collapse and insert the kernel refuses anyway):
# a file whose newest bytes live at an endpoint gets EOPNOTSUPP (docs/reliability.md).
ENDPOINT_REFUSES_FLAGS = ["-F", "-H", "-z", *FUSE_KERNEL_REFUSES_FLAGS]


def switched_off_by_the_mount(lab: Lab, run: FsxRun, flags: list[str]) -> set[str]:
    """What `run` switched off that fsx with the same `flags` does not switch off on the
    backing file system (atomic writes without -Z, ...), nor the kernel's FUSE module refuses."""
    ref_dir = lab.dir(f"{run.label}-baseline")
    baseline = run_fsx(
        f"{run.label}-baseline",
        fsx_argv(lab.fsx, ref_dir / "f", seed=run.seed, ops=1, maxlen=MiB, logdir=ref_dir, extra=flags),
        run.seed,
        FSX_TIMEOUT,
    )
    return run.disabled_by_the_mount(baseline.disabled())


def two_level_policy() -> str:
    """A DRAM level-1 stage on node-1 that demotes to an exclusive DRAM server level on
    storage-1, in front of the store storage-1 serves (the rule is two_level_rule)."""
    return f"""apiVersion: lachesis.dev/v1
kind: Policy
metadata: {{name: two-level}}
spec:
  tenants:
    - {{name: media, classifiers: [{{kind: uid, value: "0"}}]}}
  stages:
    - {{name: cache/l1, kind: cache, owner: media, engine: dram, size_bytes: {1 << 20}, hosts: [node-1], parent: cache/l2}}
    - {{name: cache/l2, kind: cache, owner: media, level: 2, engine: dram, size_bytes: {2 << 20}, serves: [store],
       hosts: [storage-1], exclusive: true}}
"""


def two_level_rule(port: int) -> dict:
    """Every IO of /media (root's) through level 1 to the remote endpoint (REST: a policy's rule
    may only send writes to endpoints a stage declares)."""
    return {
        "name": "media-remote",
        "priority": 10,
        "match": {"tenant": "media", "path_prefix": "/media"},
        "detours": [
            {"what": "io", "to": {"kind": "stage", "target": "cache/l1"}},
            {"what": "io", "to": {"kind": "file", "target": f"tcp://127.0.0.1:{port}/store"}},
        ],
    }


def test_fsx_through_both_levels_of_a_two_level_cache(
    background: Lab, cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsx on a file whose IO goes through a level-1 DRAM stage, over the network to another
    agent's forwarding server, through its exclusive server level (holding what level 1
    demotes) to the server's store: every read fsx checks is the last write, through both
    levels and their demotions, copy_file_range included, on a file five times their size.
    fallocate's classes are off: the mount refuses them (EOPNOTSUPP) for a file whose newest
    bytes live at an endpoint (docs/reliability.md); fsx switches off nothing else that it
    does not switch off on the backing file system."""
    lab = background
    require(AGENT_BIN.exists(), f"{AGENT_BIN} (cd agents && cargo build --release -p lachesis-agent)")
    monkeypatch.setenv("LACHESIS_TELEMETRY_INTERVAL_MS", "300")
    backing, mnt, serve_root = cluster.tmp / "backing", cluster.tmp / "mnt", cluster.tmp / "serve"
    for d in (backing / "media", mnt, serve_root / "store"):
        d.mkdir(parents=True)
    port = free_port()
    cluster.start_redis()
    cluster.start_controller()
    agents = {
        "node-1": ["--mount", f"{backing}:{mnt}", "--endpoint-root", str(cluster.tmp)],
        "storage-1": ["--serve-listen", f"127.0.0.1:{port}", "--serve-root", str(serve_root)],
    }
    for host, extra in agents.items():
        cluster._add(
            f"agent-{host}",
            [
                str(AGENT_BIN),
                "run",
                "--host-id",
                host,
                "--redis-url",
                cluster.enroll(host),
                "--no-ebpf",
                *extra,
                "--heartbeat-interval-ms",
                "500",
                "--heartbeat-ttl-s",
                "30",
            ],
            {"RUST_LOG": "info"},
        ).start()
    try:
        for host in agents:
            wait_for(f"{host} to ack", lambda h=host: (x := cluster.host(h)) and x["acked_generation"] >= 1, timeout=60)
        with cluster.api() as api:
            r = api.post(
                "/api/v1/policies", content=two_level_policy().encode(), headers={"content-type": "application/yaml"}
            )
            assert r.status_code == 201, r.text
            assert cluster.wait_rollout_done(r.json()["rollout_id"], timeout=60)["state"] == "succeeded"
            r = api.post("/api/v1/rules", json=two_level_rule(port))
            assert r.status_code == 201, r.text
            assert cluster.wait_rollout_done(r.json()["rollout_id"], timeout=60)["state"] == "succeeded"
        seed = seed_for("two-level")
        argv = fsx_argv(
            lab.fsx,
            mnt / "media" / "f",
            seed=seed,
            ops=max(FSX_OPS // 2, 6000),
            maxlen=FILE_TIMES_STAGE * (3 << 20),
            logdir=lab.dir("fsx-logs/two-level"),
            extra=ENDPOINT_REFUSES_FLAGS,
        )
        run = run_fsx("two-level", argv, seed, FSX_TIMEOUT)
        how = f"reproduce: {reproduce('two_level', seed)}\n  fsx: {' '.join(argv)}"
        assert run.ok, f"fsx (seed {seed}) through both levels:\n  {run.describe()}\n  {how}"
        refused = switched_off_by_the_mount(lab, run, ENDPOINT_REFUSES_FLAGS)
        assert refused == set(), f"fsx switched off {sorted(refused)}\n  {how}"

        # Both levels took part: level 1 demoted blocks it evicted, the server level served reads.
        def levels() -> dict | None:
            with cluster.api() as api:
                got = {
                    n: next((x for x in api.get(f"/api/v1/stages/{n}/stats").json() if x.get("reported_at")), {})
                    for n in ("cache/l1", "cache/l2")
                }
            l1, l2 = got["cache/l1"], got["cache/l2"]
            return got if l1.get("demoted_blocks") and (l2.get("hits", 0) + l2.get("misses", 0)) else None

        wait_for("both levels to report their part", levels, timeout=120)
    finally:
        cluster.stop_all()
        if mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_fsx_through_a_log_stage(background: Lab) -> None:
    """fsx on a file whose writes go to a log stage (the newest bytes in a local log, read back
    from it): every read is the last write, truncates and copy_file_range included; fallocate's
    classes are off, the mount refuses them for such a file (EOPNOTSUPP, docs/reliability.md)."""
    lab = background
    log_dir = lab.dir("log-stage")
    rule = stage_rule(
        "logged", 10, {"kind": "log", "name": "log/l", "owner": None, "dir": str(log_dir)}, prefix="/logged"
    )
    m = lab.mount("log", [rule], flash=False)
    (m.mnt / "logged").mkdir()
    seed = seed_for("log-stage")
    argv = fsx_argv(
        lab.fsx,
        m.mnt / "logged" / "f",
        seed=seed,
        ops=max(FSX_OPS // 2, 6000),
        maxlen=8 * MiB,
        logdir=lab.dir("fsx-logs/log-stage"),
        extra=ENDPOINT_REFUSES_FLAGS,
    )
    run = run_fsx("log-stage", argv, seed, FSX_TIMEOUT)
    how = f"reproduce: {reproduce('log_stage', seed)}\n  fsx: {' '.join(argv)}"
    assert run.ok, f"fsx (seed {seed}) through a log stage:\n  {run.describe()}\n  {mount_state(m)}\n  {how}"
    refused = switched_off_by_the_mount(lab, run, ENDPOINT_REFUSES_FLAGS)
    assert refused == set(), f"fsx switched off {sorted(refused)}\n  {how}"
    assert any(p.is_file() and p.stat().st_size for p in log_dir.rglob("*")), "nothing was written to the log"


# ---------------------------------------------------------------- fsx, fsync, kill -9, restart


def mutate(fds: list[int], rng: random.Random, count: int, size: int, writes_only: bool = False) -> int:
    """Applies `count` random operations to each of `fds` (the same file through the mount and
    its reference): writes, punch hole, zero range, keep-size fallocate, copy_file_range,
    truncate (not collapse or insert range: the kernel's FUSE module refuses them). Returns
    the file's size."""
    for _ in range(count):
        kind = (
            "write"
            if writes_only
            else rng.choice(["write", "write", "write", "punch", "zero", "keep", "copy", "truncate"])
        )
        off, length = rng.randrange(0, max(size, 1) + 65536), rng.randrange(1, 65536)
        if kind == "write":
            data = rng.randbytes(length)
            for fd in fds:
                assert os.pwrite(fd, data, off) == length
            size = max(size, off + length)
        elif kind in ("punch", "zero", "keep"):
            mode = {
                "punch": FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                "zero": FALLOC_FL_ZERO_RANGE,
                "keep": FALLOC_FL_KEEP_SIZE,
            }[kind]
            for fd in fds:
                fallocate(fd, mode, off, length)
            if kind == "zero":
                size = max(size, off + length)
        elif kind == "copy":
            src = rng.randrange(0, max(size, 1))
            length = min(length, size - src)
            if length <= 0 or abs(src - off) < length:
                continue
            for fd in fds:
                done = 0
                while done < length:
                    n = os.copy_file_range(fd, fd, length - done, src + done, off + done)
                    assert n > 0, "copy_file_range copied nothing"
                    done += n
            size = max(size, off + length)
        elif kind == "truncate":
            size = rng.randrange(0, max(size, 1) + 65536)
            for fd in fds:
                os.ftruncate(fd, size)
    return size


def test_fsx_and_fsynced_writes_survive_kill_9_of_the_mount(background: Lab) -> None:
    """fsx through a write-back flash stage (and the same run on the backing file system);
    then, from the reference's content, writes, hole punches, zeroed ranges and copies held
    dirty in the stage, one fsync, and a kill -9 of the mount: restarted, it serves what the
    reference file holds, so does the backing file, and fsx goes on from there (-k: the file
    as it is is its model). Each part is checked even when one before it failed; the test
    fails with all that went wrong."""
    lab = background
    name = "cache/wb"
    m = lab.mount(
        "kill",
        [stage_rule("wb", 10, stage(name, "loc", 4 * MiB, "back", max_dirty=4 * MiB), prefix="/wb")],
        flash=True,
        extra=["--dirty-expire-ms", "3600000"],
    )
    (m.mnt / "wb").mkdir()
    seed = seed_for("kill")
    path, ref_dir, logs = m.mnt / "wb" / "f", lab.dir("kill-ref"), lab.dir("fsx-logs/kill")
    maxlen = FILE_TIMES_STAGE * 4 * MiB
    ops = FSX_OPS // 2
    problems: list[str] = []
    ref_argv = fsx_argv(
        lab.fsx, ref_dir / "f", seed=seed, ops=ops, maxlen=maxlen, logdir=ref_dir, extra=FUSE_KERNEL_REFUSES_FLAGS
    )
    ref = lab.submit(
        lab.ref_pool, "fsx kill (reference on the backing fs)", run_fsx, "kill-ref", ref_argv, seed, FSX_TIMEOUT
    )
    run = run_fsx("kill", fsx_argv(lab.fsx, path, seed=seed, ops=ops, maxlen=maxlen, logdir=logs), seed, FSX_TIMEOUT)
    if not run.ok:
        problems.append(
            f"fsx (seed {seed}) through the write-back loc stage, before the kill:\n  {run.describe()}\n  fsx: {run.command()}"
        )
    r = ref.result()
    assert r.ok, f"fsx on the backing file system (the reference): {r.describe()}"
    if run.ok and sha256(path) != sha256(ref_dir / "f"):
        problems.append(f"after fsx (seed {seed}) the file differs from the same run's on the backing file system")
    # From here on both files start from the reference's bytes.
    shutil.copyfile(ref_dir / "f", path)
    if sha256(path) != sha256(ref_dir / "f"):
        problems.append("a copy of the reference written through the mount reads back other bytes")

    rng = random.Random(seed)
    fd, fd_ref = os.open(path, os.O_RDWR), os.open(ref_dir / "f", os.O_RDWR)
    try:
        size = mutate([fd, fd_ref], rng, 300, os.fstat(fd_ref).st_size)
        mutate([fd, fd_ref], rng, 40, size, writes_only=True)
        dirty = stage_stats(m, name)
        assert dirty and dirty["dirty_bytes"] > 0, (
            f"the stage held nothing dirty before the fsync ({brief(dirty)}): nothing to show"
        )
        os.fsync(fd)
        want = sha256(ref_dir / "f")
        m.proc.kill()
        m.proc.wait()
    finally:
        for f in (fd, fd_ref):
            try:
                os.close(f)
            except OSError:
                pass  # the mount is gone: ENOTCONN
    m.stop()
    m.start()
    if sha256(m.backing / "wb" / "f") != want:
        problems.append("after fsync and kill -9 the backing file lacks acknowledged, fsync'ed bytes")
    if sha256(path) != want:
        problems.append("after fsync, kill -9 and restart the mount serves other bytes than were fsync'ed")
    after_argv = fsx_argv(lab.fsx, path, seed=seed + 1, ops=ops // 2, maxlen=maxlen, logdir=logs, extra=["-k"])
    after = run_fsx("kill-after", after_argv, seed + 1, FSX_TIMEOUT)
    if not after.ok:
        problems.append(f"fsx (seed {seed + 1}, -k) after the restart:\n  {after.describe()}\n  fsx: {after.command()}")
    clean = not problems
    assert clean, (
        "\n".join(f"- {p}" for p in problems) + f"\n{mount_state(m)}\nreproduce: {reproduce('survive_kill_9', seed)}"
    )


def test_a_write_back_stage_holding_more_dirty_bytes_than_its_size(background: Lab) -> None:
    """A write-back stage may hold more dirty bytes than its engine's size (the stage contract
    does not bound max_dirty_bytes by size_bytes; dirty blocks live in the stage's own map
    until written back): a 2 MiB loc stage with max_dirty_bytes 64 MiB, a file of 10 MiB
    written and read back, then rewritten shorter through O_TRUNC and read back."""
    lab = background
    name = "cache/dirty"
    m = lab.mount(
        "dirty",
        [stage_rule("dirty", 10, stage(name, "loc", 2 * MiB, "back", max_dirty=64 * MiB), prefix="/dirty")],
        flash=True,
    )
    (m.mnt / "dirty").mkdir()
    rng = random.Random(seed_for("dirty"))
    path = m.mnt / "dirty" / "f"
    problems = []
    for step, data in (
        ("10 MiB written", rng.randbytes(10 * MiB)),
        ("rewritten with 6.5 MiB through O_TRUNC", rng.randbytes(6 * MiB + 12345)),
    ):
        with open(path, "wb") as f:
            f.write(data)
        got = path.read_bytes()
        if got != data:
            at = next((i for i in range(min(len(got), len(data))) if got[i] != data[i]), min(len(got), len(data)))
            problems.append(f"{step}: read back {len(got)} bytes, {len(data)} written, first difference at {at:#x}")
    clean = not problems
    assert clean, (
        "a 2 MiB write-back loc stage with max_dirty_bytes 64 MiB:\n  "
        + "\n  ".join(problems)
        + f"\n  stage: {brief(stage_stats(m, name) if m.proc.poll() is None else None)}\n  {mount_state(m)}"
    )


# ---------------------------------------------------------------- fio verify, stage resized


def test_fio_verify_4_jobs_while_the_write_back_stage_is_resized(background: Lab) -> None:
    """fio, 4 jobs of random writes verified with crc32c (while writing and after), through a
    write-back loc stage that is resized each time another 4 MiB went into it (the stage's own
    byte counter, read from the stats file), six times; fio rounds repeat until all six are
    in force."""
    lab = background
    name = "cache/fio"
    sizes = [6 * MiB, 2 * MiB, 8 * MiB, 3 * MiB, 6 * MiB, 2 * MiB]
    step = 4 * MiB
    rules = lambda size: [stage_rule("fio", 10, stage(name, "loc", size, "back", max_dirty=MiB), prefix="/fio")]  # noqa: E731
    m = lab.mount("fio", rules(4 * MiB), flash=True, extra=["--dirty-expire-ms", "500"])
    (m.mnt / "fio").mkdir()
    stop, finished = threading.Event(), threading.Event()
    done: list[str] = []
    errors: list[str] = []

    def written() -> int:
        st = stage_stats(m, name, fresh=False)
        return st["bytes_written"] if st else 0

    def resizer() -> None:
        try:
            mark = written()
            for size in sizes:
                while written() < mark + step:
                    if stop.wait(0.02):
                        return
                before = m.reloads()
                m.set_rules(rules(size))
                wait_for(
                    f"the resize to {size // MiB} MiB",
                    lambda: m.reloads() > before
                    and (st := stage_stats(m, name, fresh=False))
                    and st["installed_bytes"] == size,
                    timeout=120,
                )
                mark = written()
                done.append(f"{size // MiB} MiB in force after {mark // MiB} MiB written")
            finished.set()
        except Exception as e:  # reported by the test
            errors.append(repr(e))
            finished.set()

    t = threading.Thread(target=resizer, daemon=True)
    t.start()
    rounds = []
    try:
        for rnd in range(12):
            if finished.is_set():
                break
            argv = [
                "fio",
                "--name=wb",
                f"--directory={m.mnt / 'fio'}",
                "--numjobs=4",
                "--size=8M",
                "--rw=randwrite",
                "--bsrange=4k-32k",
                "--ioengine=psync",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--verify_backlog=64",
                "--verify_state_save=0",
                f"--randseed={seed_for('fio') + rnd}",
                "--output-format=json",
            ]
            p = subprocess.run(argv, capture_output=True, text=True, timeout=FSX_TIMEOUT)
            jobs = json.loads(p.stdout[p.stdout.index("{") :])["jobs"] if "{" in p.stdout else []
            bad = [j for j in jobs if j["error"]] if jobs else ["no output"]
            ok = p.returncode == 0 and not bad and len(jobs) == 4
            assert ok, (
                f"fio round {rnd} (randseed {seed_for('fio') + rnd}) through a write-back loc stage being resized: exit {p.returncode}\n"
                f"  {p.stderr[-2000:]}\n  resizes in force: {done}\n  {mount_state(m)}\n  fio: {' '.join(argv)}"
            )
            rounds.append(sum(j["read"]["io_bytes"] for j in jobs))
    finally:
        stop.set()
        t.join()
    assert not errors, f"resizing: {errors}; in force: {done}"
    assert len(done) == len(sizes), (
        f"{len(done)} of {len(sizes)} resizes in force after {len(rounds)} fio rounds: {done}"
    )
    assert all(r == 4 * 8 * MiB for r in rounds), f"fio verified {rounds} bytes per round, not all 32 MiB"


# ---------------------------------------------------------------- fsx through every engine and mode


@pytest.mark.parametrize(("engine", "mode", "direct", "transport"), FSX_MATRIX, ids=[fsx_id(*p) for p in FSX_MATRIX])
def test_fsx(background: Lab, engine: str, mode: str, direct: bool, transport: str) -> None:
    m, future = background.fsx_runs[(engine, mode, direct, transport)]
    run: FsxRun = future.result()
    st = stage_stats(m, f"cache/{mode}") if m.proc.poll() is None else None
    what = (
        f"fsx through a {engine} stage of {ENGINES[engine] // MiB} MiB, write mode {mode}"
        f"{', O_DIRECT (-Z)' if direct else ''}, requests over {transport}, seed {run.seed}, "
        f"file up to {FILE_TIMES_STAGE * ENGINES[engine] // MiB} MiB"
    )
    how = f"reproduce: {reproduce(f'test_fsx and {fsx_id(engine, mode, direct, transport)}', run.seed)}\n  fsx: {run.command()}"
    ok = run.ok  # (a plain bool: pytest would print the whole run's repr)
    assert ok, f"{what}:\n  {run.describe()}\n  stage: {brief(st)}\n  {mount_state(m)}\n  {how}"
    off = run.disabled_by_the_mount(background.fsx_baseline(direct))
    assert not off, (
        f"{what}: fsx switched off {sorted(off)} through the mount, which the backing file system does\n  {how}"
    )
    f = Path(run.argv[-1])
    backing = m.backing / f.parent.name / f.name
    assert sha256(f) == sha256(backing), (
        f"{what}: after fsx closed the file, it reads back other bytes than its backing file holds\n  {how}"
    )
    assert st and st["installed_bytes"] > 0, (
        f"{what}: the stage installed nothing ({brief(st)}): the run tested no cache"
    )
    if transport == "uring":
        assert_took_io_uring(m, what)


# ---------------------------------------------------------------- pjdfstest


@pytest.mark.parametrize("where", list(PJD_DIRS))
def test_pjdfstest(background: Lab, where: str) -> None:
    m, future = background.pjd_runs[where]
    res: ProveResult = future.result()
    if transport_of(where) == "uring":
        assert_took_io_uring(m, f"pjdfstest in /{where}")
    tests = background.tools / "pjdfstest" / "tests"
    files = len(list(tests.rglob("*.t")))
    if res.ok:
        assert res.files == files, f"prove ran {res.files} test files of {files}"
        return
    backing = background.backing_failures(sorted(n for n in res.failing if n != "(prove)"))
    mine: list[ProveFile] = []
    theirs: list[str] = []
    for name, f in sorted(res.failing.items()):
        ref = backing.get(name)
        if ref is not None:
            theirs.append(ref.line())
            f = ProveFile(
                f.name,
                f.tests,
                [n for n in f.failed if n not in set(ref.failed)],
                [p for p in f.problems if p not in ref.problems],
                f.messages,
            )
        if f.failed or f.problems:
            mine.append(f)
    causes = "\n".join(f"  {n:5d}  {c}" for c, n in res.causes().most_common(12))
    first = "\n".join(f"  {n:5d}  {c}" for c, n in res.first_causes().most_common(12))
    clean = not mine
    assert clean, (
        f"pjdfstest through the mount in {PJD_DIRS[where]} (/{where}): {res.failed_checks} of {res.tests} checks failed "
        f"in {len(res.failing)} of {res.files} files ({sum(len(f.failed) for f in mine)} checks in {len(mine)} files "
        f"pass on the backing file system)\nfiles by the cause of their first failed check:\n{first}\n"
        f"checks by cause:\n{causes}\nfailing (failed/planned: check numbers):\n"
        + "\n".join(f.line() for f in mine)
        + ("\nfailing on the backing file system too (not the mount's):\n" + "\n".join(theirs) if theirs else "")
        + f"\n{mount_state(m)}\nreproduce: cd MOUNT/{where} && prove -v -r BUILD/pjdfstest/tests/FILE "
        f"(BUILD: {CONFORMANCE / 'build.sh'} DIR; the mount as in this test's launch())"
    )
