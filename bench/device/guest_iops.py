"""The guest's IOPS figures as Markdown: the passthrough backend (`lachesis-nvme iops`, batches
of 16 commands on its ring) against fio's io_uring_cmd engine (QD 16) on the same emulated
FDP namespace in the same guest boot, runs alternating. Reads the results directory of a guest
run (`python e2e/guest/vm.py DIR`, or the guest suite's) and prints medians and ratios.

    python bench/device/guest_iops.py DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def iops(path: Path) -> float:
    d = json.loads(path.read_text())
    if "jobs" in d:  # fio
        job = d["jobs"][0]
        return float(job["read"]["iops"] + job["write"]["iops"])
    return float(d["iops"])


def main() -> None:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: guest_iops.py RESULTS_DIR (a guest run's output directory)")
    root = Path(sys.argv[1])
    kernel = (root / "kernel").read_text().strip() if (root / "kernel").exists() else "?"
    print(f"Guest kernel {kernel}, QEMU TCG, emulated NVMe with FDP, 4 KiB random IO at QD 16.\n")
    print("| workload | lachesis-nvme IOPS (median) | fio io_uring_cmd IOPS (median) | ratio | runs |")
    print("|---|---|---|---|---|")
    for rw in ("randread", "randwrite"):
        ours = [iops(p) for p in sorted(root.glob(f"iops-lachesis-{rw}-*.json")) if p.stat().st_size]
        fio = [iops(p) for p in sorted(root.glob(f"iops-fio-{rw}-*.json")) if p.stat().st_size]
        if not ours or not fio:
            print(f"| {rw} | missing | missing | | |")
            continue
        a, b = statistics.median(ours), statistics.median(fio)
        print(f"| {rw} | {a:,.0f} | {b:,.0f} | {a / b:.2f} | {len(ours)} / {len(fio)} |")


if __name__ == "__main__":
    main()
