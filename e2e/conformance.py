"""The external file-system checks of `../shared/conformance` (pjdfstest, xfstests' fsx) for
`test_conformance.py`: built once, run, and their output read into what failed, precisely
enough to reproduce it (the test file and check numbers of pjdfstest, the seed and the first
bad operation of fsx).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import hashlib
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from conftest import ROOT

# The sources and build script live next to the checkout, like the traces (root README).
CONFORMANCE = ROOT.parent / "shared" / "conformance"
MiB = 1 << 20
# Programs build.sh and the runs need: gcc, make, autoconf, automake (Debian: build-essential
# autoconf automake) and prove (perl).
BUILD_TOOLS = ("gcc", "make", "autoconf", "automake", "prove")


def build(dest: Path) -> Path:
    """Builds fsx and pjdfstest into `dest` with the shared build.sh; returns the folder."""
    p = subprocess.run([str(CONFORMANCE / "build.sh"), str(dest)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"{CONFORMANCE / 'build.sh'} failed (exit {p.returncode}):\n{p.stderr[-4000:]}"
    out = Path(p.stdout.strip().splitlines()[-1])
    assert (out / "fsx").is_file() and (out / "pjdfstest" / "pjdfstest").is_file(), p.stderr[-2000:]
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MiB):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- pjdfstest (prove)


def ranges(nums: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    runs: list[list[int]] = []
    for n in sorted(set(nums)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_ranges(text: str) -> list[int]:
    nums: list[int] = []
    for part in text.replace(",", " ").split():
        if "-" in part:
            a, b = part.split("-")
            nums.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            nums.append(int(part))
    return nums


@dataclass
class ProveFile:
    """One test file prove reported in its summary (failed checks, or a bad exit or plan)."""

    name: str  # relative to the tests folder: "chown/00.t"
    tests: int = 0
    failed: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # parse errors, non-zero exit
    messages: dict[int, str] = field(default_factory=dict)  # check number -> "tried ..., expected ..., got ..."

    def line(self, width: int = 160) -> str:
        checks = ranges(self.failed)
        if len(checks) > width:
            checks = checks[:width].rsplit(",", 1)[0] + ", ..."
        first = ""
        if self.failed and self.failed[0] in self.messages:
            first = f"\n      first: not ok {self.failed[0]} - {shorten_names(self.messages[self.failed[0]])[:300]}"
        extra = f" [{'; '.join(self.problems)}]" if self.problems else ""
        return f"  {self.name}: {len(self.failed)}/{self.tests} failed: {checks or '-'}{extra}{first}"


@dataclass
class ProveResult:
    output: str
    returncode: int
    files: int = 0
    tests: int = 0
    result: str = ""
    failing: dict[str, ProveFile] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result == "PASS" and not self.failing

    @property
    def failed_checks(self) -> int:
        return sum(len(f.failed) for f in self.failing.values())

    def causes(self) -> Counter:
        """Failed checks counted by syscall, expected and got ("mknod: expected 0, got ENOSYS")."""
        c: Counter = Counter()
        for f in self.failing.values():
            for n in f.failed:
                c[cause(f.messages.get(n, ""))] += 1
        return c

    def first_causes(self) -> Counter:
        """Files counted by the cause of their first failed check (later ones often follow
        from it: a FIFO mkfifo could not make is then not found)."""
        return Counter(cause(f.messages.get(f.failed[0], "")) for f in self.failing.values() if f.failed)


HEADER = re.compile(r"^(/\S+\.t) \.+ ?(.*)$")
NOT_OK = re.compile(r"^not ok (\d+)(?: - (.*))?$")
SUMMARY_ENTRY = re.compile(r"^(/\S+\.t)\s+\(Wstat: .*?Tests: (\d+) Failed: (\d+)\)\s*$")
TOTALS = re.compile(r"^Files=(\d+), Tests=(\d+),")
TRIED = re.compile(r"^tried '(.*)', expected (.*), got (.*)$")


def shorten_names(text: str) -> str:
    """pjdfstest's generated names (hex digests) as N."""
    return re.sub(r"(pjdfstest_)?[0-9a-f]{32,}", "N", text)


def cause(message: str) -> str:
    if not message:
        return "(no message: a test_check comparison, e.g. of ctime or size)"
    m = TRIED.match(message)
    if not m:
        return shorten_names(message)[:120]
    words = m.group(1).split()
    # pjdfstest [-U umask] [-u uid] [-g gids] [--] syscall args...
    while words and words[0] in ("-U", "-u", "-g", "--"):
        words = words[1:] if words[0] == "--" else words[2:]
    return f"{words[0] if words else '?'}: expected {m.group(2)}, got {m.group(3)}"


def parse_prove(output: str, returncode: int, tests_dir: Path) -> ProveResult:
    """prove -v's output: the `not ok` lines of each test file (their messages) and the
    summary (which checks of which files failed, plan and exit problems)."""
    res = ProveResult(output=output, returncode=returncode)
    prefix = str(tests_dir).rstrip("/") + "/"

    def rel(path: str) -> str:
        return path[len(prefix) :] if path.startswith(prefix) else path

    messages: dict[str, dict[int, str]] = {}
    current: str | None = None
    lines = output.splitlines()
    summary_at = next((i for i, l in enumerate(lines) if l.startswith("Test Summary Report")), len(lines))
    for line in lines[:summary_at]:
        if h := HEADER.match(line):
            current = rel(h.group(1))
            continue
        if current and (n := NOT_OK.match(line)):
            messages.setdefault(current, {})[int(n.group(1))] = (n.group(2) or "").strip()
    entry: ProveFile | None = None
    key = ""
    for line in lines[summary_at:]:
        if t := TOTALS.match(line):
            res.files, res.tests = int(t.group(1)), int(t.group(2))
            entry = None
            continue
        if line.startswith("Result: "):
            res.result = line.split()[1]
            continue
        if e := SUMMARY_ENTRY.match(line):
            name = rel(e.group(1))
            entry = res.failing.setdefault(name, ProveFile(name))
            entry.tests = int(e.group(2))
            entry.messages = messages.get(name, {})
            key = ""
            continue
        if entry is None or not line[:1].isspace():
            continue
        text = line.strip()
        if m := re.match(r"^([A-Za-z][A-Za-z -]*):\s*(.*)$", text):
            key, text = m.group(1), m.group(2)
        if key == "Failed tests":
            entry.failed.extend(parse_ranges(text))
        elif key in ("Parse errors", "Non-zero exit status", "Non-zero wait status"):
            entry.problems.append(f"{key}: {text}" if text else key)
    for f in res.failing.values():
        f.failed.sort()
    # Files whose only trouble is a passing TODO check are not failures.
    res.failing = {k: v for k, v in res.failing.items() if v.failed or v.problems}
    if not res.result and returncode != 0:
        res.failing.setdefault(
            "(prove)", ProveFile("(prove)", problems=[f"exit {returncode}, no summary: {output[-500:]}"])
        )
    return res


def run_prove(cwd: Path, tests: list[Path], jobs: int, timeout: float, tests_dir: Path) -> ProveResult:
    """prove -v (as root) from `cwd`, a directory on the file system under test."""
    argv = ["prove", "-v", f"-j{jobs}", "-r", *map(str, tests)]
    try:
        p = subprocess.run(
            argv,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout,
        )
        return parse_prove(p.stdout, p.returncode, tests_dir)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        res = parse_prove(out, 1, tests_dir)
        res.failing["(prove)"] = ProveFile(
            "(prove)", problems=[f"no end within {timeout:.0f} s (a hang); last output: {out[-300:]}"]
        )
        return res


# ---------------------------------------------------------------- fsx

# "N( M mod 256): OP ..." in fsx's LOG DUMP.
LOG_OP = re.compile(r"^(\d+)\(\s*\d+ mod 256\): (.*)$")
BAD_ROW = re.compile(r"^0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+0x([0-9a-f]+)\s*$")
MAY_BE = re.compile(r"operation# \(mod 256\) for the bad data (?:may be (\d+)|unknown.*)")
THRU = re.compile(r"0x([0-9a-f]+) thru 0x([0-9a-f]+)")
TRUNC = re.compile(r"TRUNCATE (UP|DOWN)\s+from 0x([0-9a-f]+) to 0x([0-9a-f]+)")
PROGRESS = re.compile(r"^\d+ [a-z_]+\s")
READS = ("READ", "MAPREAD", "SKIPPED", "READ_DONTCACHE")


def op_touches(op: str, offset: int) -> bool:
    """Whether the logged operation `op` changed the byte at `offset` (or moved it)."""
    name = op.split()[0] if op.split() else ""
    if name in READS:
        return False
    if t := TRUNC.search(op):
        lo, hi = sorted((int(t.group(2), 16), int(t.group(3), 16)))
        return lo <= offset < hi or (t.group(1) == "DOWN" and offset >= hi)
    spans = THRU.findall(op)
    if not spans:
        return False
    lo, hi = (int(x, 16) for x in spans[-1])  # a COPY's second range is its destination
    if name in ("COLLAPSE", "INSERT"):
        return offset >= lo
    return lo <= offset <= hi


# Operations the kernel's FUSE module answers EOPNOTSUPP itself, for every FUSE file system
# (Linux fs/fuse/file.c: fuse_file_fallocate takes KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE only;
# FUSE files do not offer RWF_DONTCACHE): fsx switches them off through the mount whatever
# lachesis-fs does.
FUSE_KERNEL_REFUSES = ("FALLOC_FL_COLLAPSE_RANGE", "FALLOC_FL_INSERT_RANGE", "dontcache IO")
# fsx's flags for the same, for a reference run on the backing file system that must end with
# the same bytes as a run through the mount (a refused class's operations are skipped, so the
# file differs unless the reference skips them too; dontcache IO changes no bytes either way,
# and this fsx has no flag for it).
FUSE_KERNEL_REFUSES_FLAGS = ["-C", "-I"]


@dataclass
class FsxRun:
    """One fsx run: its command, seed and output."""

    label: str
    argv: list[str]
    seed: int
    output: str = field(default="", repr=False)
    returncode: int | None = None
    hung: str = ""

    @property
    def ok(self) -> bool:
        return not self.hung and self.returncode == 0 and "operations completed A-OK!" in self.output

    def disabled(self) -> set[str]:
        """The operation classes fsx switched off because the file system refused them."""
        return {re.sub(r"^main: ", "", l.strip()) for l in self.output.splitlines() if "disabling!" in l}

    def disabled_by_the_mount(self, baseline: set[str]) -> set[str]:
        """What fsx switched off here but not on the backing file system, less what the
        kernel's FUSE module refuses before any FUSE server sees it (FUSE_KERNEL_REFUSES)."""
        return {d for d in self.disabled() - baseline if not any(k in d for k in FUSE_KERNEL_REFUSES)}

    def largest(self) -> int:
        sizes = [int(m, 16) for m in re.findall(r"largest ever: 0x([0-9a-f]+)", self.output)]
        return max(sizes, default=0)

    def command(self) -> str:
        return " ".join(self.argv)

    def describe(self) -> str:
        """What went wrong, first: the failing operation, the first bad byte, the operation
        fsx says wrote the bad data and the later ones that changed that byte."""
        if self.hung:
            return f"{self.hung}\n  last output: {self.output[-800:]}"
        lines = self.output.splitlines()
        dump_at = next((i for i, l in enumerate(lines) if l.startswith("LOG DUMP")), len(lines))
        # fsx's own complaints: not its progress lines (-p), notes or the bad-data table.
        head = [
            l
            for l in lines[:dump_at]
            if l.strip()
            and not BAD_ROW.match(l)
            and not PROGRESS.match(l)
            and not l.startswith(("operation# ", "OFFSET", "Seed set", "skipping ", "Will begin"))
            and "largest ever" not in l
            and "disabling!" not in l
        ]
        ops = [m.group(2).strip() for l in lines[dump_at + 1 :] if (m := LOG_OP.match(l))]
        # The dump holds the last operations (at most fsx's log size, 10,000) oldest first, the
        # failing one last; past its log size fsx prints the older ones' numbers 10,000 too
        # high, so they are numbered here by position.
        total = (
            int(t.group(1)) if dump_at < len(lines) and (t := re.search(r"\((\d+) total", lines[dump_at])) else len(ops)
        )
        ops = [(total - len(ops) + 1 + i, op) for i, op in enumerate(ops)]
        out = [f"exit {self.returncode}: " + " | ".join(head[:4])[:600]]
        if ops:
            out.append(f"failing operation: #{ops[-1][0]} {ops[-1][1]}")
        row = next((BAD_ROW.match(l) for l in lines[:dump_at] if BAD_ROW.match(l)), None)
        if row:
            bad = int(row.group(1), 16)
            out.append(f"first bad byte at 0x{bad:x}: expected 0x{row.group(2)}, read 0x{row.group(3)}")
            source = None
            may = next((MAY_BE.search(l) for l in lines[:dump_at] if MAY_BE.search(l)), None)
            if may and may.group(1):
                # fsx writes bytes made of its operation number: the last write or mapped
                # write with that number mod 256.
                mod = int(may.group(1))
                cands = [n for n, op in ops[:-1] if n % 256 == mod and op.split()[0] in ("WRITE", "MAPWRITE")]
                covering = [n for n in cands if op_touches(dict(ops)[n], bad)]
                if covering or cands:
                    source = (covering or cands)[-1]
                    where = "" if covering else f" (elsewhere: copied to 0x{bad:x}?)"
                    out.append(f"the bad data looks written by #{source} {dict(ops)[source]}{where}")
                else:
                    out.append(f"the bad data looks written by an operation numbered {mod} mod 256 before the log")
            elif may:
                out.append("fsx cannot tell which operation wrote the bad data (a hole or an extension)")
            since = [(n, op) for n, op in ops[:-1] if (source is None or n > source) and op_touches(op, bad)]
            if since:
                what = "; ".join(f"#{n} {op}" for n, op in since[-4:])
                out.append(f"{'later ' if source else ''}operations that changed 0x{bad:x}: {what}")
        return "\n  ".join(out)


def fsx_argv(
    fsx: Path,
    path: Path,
    *,
    seed: int,
    ops: int,
    maxlen: int,
    logdir: Path,
    direct: bool = False,
    extra: list[str] = (),
) -> list[str]:
    """Every operation class on (no -F -H -z -C -I -E); with `direct`, O_DIRECT IO aligned as
    ext4 needs it (-r/-w 4096), mapped reads and writes still on (a mix of the page cache and
    O_DIRECT on one file)."""
    argv = [str(fsx), "-N", str(ops), "-l", str(maxlen), "-S", str(seed), "-P", str(logdir)]
    if direct:
        argv += ["-Z", "-r", "4096", "-w", "4096"]
    return argv + list(extra) + [str(path)]


def run_fsx(label: str, argv: list[str], seed: int, timeout: float) -> FsxRun:
    run = FsxRun(label, argv, seed)
    try:
        p = subprocess.run(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", timeout=timeout
        )
        run.output, run.returncode = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        run.output = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        run.hung = f"no end within {timeout:.0f} s (a hang)"
    return run


def small_pipe(fd: int) -> None:
    """Shrinks a pipe to one page, so a writer blocks once it is a few lines ahead of its
    reader (F_SETPIPE_SZ)."""
    fcntl.fcntl(fd, 1031, 4096)


# ---------------------------------------------------------------- raw file operations

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_FL_INSERT_RANGE = 0x20


def fallocate(fd: int, mode: int, offset: int, length: int) -> None:
    if _libc.fallocate(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"fallocate(mode {mode:#x}, {offset}, {length}): {os.strerror(e)}")
