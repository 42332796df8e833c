"""What the e2e suite does when a test hangs: say where everything is stuck, then unstick it.

pytest-timeout's guard (conftest.py) raises in the test's thread on SIGALRM, which is enough
while that thread waits on a pipe, a socket or a sleep. It is not when the thread waits in the
kernel on a FUSE request its daemon already took and never answers: that wait is
uninterruptible, even by SIGKILL, so the run would stall until CI's own limit, silently. This
guard runs in a thread of its own, a little after pytest-timeout's deadline: it writes the
kernel stacks of every process stuck in the kernel and the thread stacks of every Lachesis
process (gdb) to stderr and to a file, then aborts the FUSE connections of the suite's mounts
(fusectl's `abort`), so every stuck call fails with ENOTCONN and the test ends as a failure
that names what hung.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

FUSECTL = Path("/sys/fs/fuse/connections")
DAEMONS = ("lachesis-fs", "lachesis-agent")


class HangGuard:
    """Fires once, `after` seconds from `start()`, unless `stop()` came first. `roots` says,
    when it fires, under which folders the test's mounts are: only those are aborted, never a
    FUSE mount of the machine's own or of another test run."""

    def __init__(self, what: str, after: float, report: Path, roots: Callable[[], list[Path]]) -> None:
        self.what = what
        self.after = after
        self.report = report
        self.roots = roots
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-guard", daemon=True)

    def start(self) -> HangGuard:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _run(self) -> None:
        if self._done.wait(self.after):
            return
        text = f"hang guard: {self.what} still running after {self.after:.0f} s\n" + diagnose()
        try:
            self.report.write_text(text)
        except OSError:
            pass
        print(text, file=sys.__stderr__, flush=True)
        for conn, mnt in fuse_connections_under(self.roots()):
            print(f"hang guard: aborting the FUSE connection {conn} of {mnt}", file=sys.__stderr__, flush=True)
            try:
                (FUSECTL / conn / "abort").write_text("1")
            except OSError as e:
                print(f"hang guard: could not abort {conn}: {e}", file=sys.__stderr__, flush=True)


def diagnose() -> str:
    """Kernel stacks of the processes in uninterruptible sleep or waiting on FUSE, and of
    this one; every Lachesis daemon's threads (user side when gdb is there)."""
    out: list[str] = []
    for pid in _pids():
        stat = _read(f"/proc/{pid}/stat")
        comm = _read(f"/proc/{pid}/comm").strip()
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        wchan = _read(f"/proc/{pid}/wchan")
        if state == "D" or comm in DAEMONS or "fuse" in wchan or "request_wait_answer" in wchan or pid == os.getpid():
            cmd = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
            out.append(f"--- pid {pid} ({comm}) state {state}: {cmd[:300]}")
            for task in sorted(Path(f"/proc/{pid}/task").glob("*"), key=lambda p: int(p.name)):
                twchan = _read(f"{task}/wchan")
                tstate = _read(f"{task}/stat").rsplit(")", 1)[-1].split()[:1]
                out.append(f"  task {task.name} ({_read(f'{task}/comm').strip()}) {tstate} wchan {twchan}")
                stack = _read(f"{task}/stack").strip()
                if stack and (tstate == ["D"] or comm not in DAEMONS or "fuse" not in twchan):
                    out.extend("    " + line for line in stack.splitlines())
            if comm in DAEMONS:
                out.append(_gdb(pid))
    return "\n".join(out) + "\n"


def fuse_connections_under(roots: list[Path]) -> list[tuple[str, str]]:
    """(fusectl connection, mount point) of each FUSE mount under one of `roots`."""
    prefixes = tuple(str(r).rstrip("/") + "/" for r in roots)
    if not FUSECTL.is_dir() or not any(FUSECTL.iterdir()):
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], check=False, capture_output=True)
    found = []
    for line in _read("/proc/self/mountinfo").splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype = line.split(" - ", 1)[1].split()[0]
        mnt = fields[4]
        if (fstype == "fuse" or fstype.startswith("fuse.")) and prefixes and mnt.startswith(prefixes):
            found.append((fields[2].split(":")[1], mnt))
    return found


def _gdb(pid: int) -> str:
    try:
        p = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return p.stdout[-20000:]
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"  (no user-space stacks: gdb {e})"


def _pids() -> list[int]:
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""
