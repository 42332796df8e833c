"""One tenant's replayer: joins its cgroup, then issues one 4 KiB pread or pwrite per
reference of its miniature trace at the reference's block of its file, looping over the trace
until told to stop (SIGTERM) or the deadline, if one is given. Prints one JSON line of counts
when done.

`python -m lachesis_cli.demo.replay --refs R.npz --file F --cgroup C [--until T]`
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

BLOCK = 4096


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--refs", type=Path, required=True)
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--cgroup", type=Path, required=True)
    ap.add_argument("--until", type=float, default=float("inf"), help="time.time() to stop at (default: none)")
    a = ap.parse_args()
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
    try:
        while not stop and time.time() < a.until:
            for off, w in zip(offsets, writes, strict=True):
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
