"""One tenant's replayer: joins its cgroup, then issues one 4 KiB pread or pwrite per
reference of its miniature trace at the reference's block of its file, looping over the trace
until told to stop (SIGTERM) or the deadline, if one is given. Prints one JSON line of counts
when done.

With `--rate`, the references are issued at that rate (per second, from the start) and never
faster: an open-loop client whose demand does not depend on how fast its IO is answered. As
fast as possible, a tenant's request rate follows its hit ratio (here misses, answered from the
page cache under the backing directory, are faster than hits from the flash stage), and the
allocation loop, which weighs tenants by request rate, would be chasing its own effect.
Behind schedule (a loaded machine) it issues back to back until it has caught up.

`python -m lachesis_cli.demo.replay --refs R.npz --file F --cgroup C [--until T] [--rate N]`
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

BLOCK = 4096


class Pace:
    """Holds the i-th reference back until `i / rate` seconds after the start (clock and sleep
    injected for tests)."""

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not (rate > 0 and math.isfinite(rate)):
            raise ValueError(f"--rate must be a positive number of references per second, not {rate}")
        self.rate, self.clock, self.sleep = rate, clock, sleep
        self.begin()

    def begin(self) -> None:
        """Reference 0 is due now."""
        self.start = self.clock()

    def wait(self, issued: int) -> None:
        """Returns when reference number `issued` (0-based) is due."""
        ahead = self.start + issued / self.rate - self.clock()
        if ahead > 0:
            self.sleep(ahead)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--refs", type=Path, required=True)
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--cgroup", type=Path, required=True)
    ap.add_argument("--until", type=float, default=float("inf"), help="time.time() to stop at (default: none)")
    ap.add_argument("--rate", type=float, default=None, help="references per second (default: as fast as possible)")
    a = ap.parse_args()
    try:
        pace = Pace(a.rate) if a.rate is not None else None
    except ValueError as e:
        ap.error(str(e))
    data = np.load(a.refs)
    offsets = (data["refs"] * BLOCK).tolist()
    writes = data["writes"].tolist()
    (a.cgroup / "cgroup.procs").write_text(str(os.getpid()))
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    fd = os.open(a.file, os.O_RDWR)
    payload = bytes(range(256)) * (BLOCK // 256)
    reads = written = passes = 0
    if pace is not None:
        pace.begin()  # the trace is loaded and the file open: the schedule starts here
    try:
        while not stop and time.time() < a.until:
            for off, w in zip(offsets, writes, strict=True):
                if pace is not None:
                    pace.wait(reads + written)
                if w:
                    os.pwrite(fd, payload, off)
                    written += 1
                else:
                    if len(os.pread(fd, BLOCK, off)) != BLOCK:
                        sys.exit(f"short read at offset {off} of {a.file}")
                    reads += 1
                if stop or (reads + written) % 256 == 0 and time.time() >= a.until:
                    break
            else:
                passes += 1
    finally:
        os.close(fd)
    print(json.dumps({"reads": reads, "writes": written, "passes": passes}), flush=True)


if __name__ == "__main__":
    main()
