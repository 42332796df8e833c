"""Boots the guest: the backports kernel under QEMU (TCG; KVM does not work on these hosts)
through virtme-ng, which shares the host's root file system read-only (so the guest runs the
host's binaries, nvme-cli, fio, bcc and this repository, and no guest image is downloaded),
with an emulated NVMe subsystem with Flexible Data Placement on. `run_guest` runs
`in_guest.sh` there and returns the directory of its results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The release binaries e2e runs; LACHESIS_GUEST_BIN points elsewhere (a developer's own target dir).
BIN = Path(os.environ.get("LACHESIS_GUEST_BIN", REPO / "agents" / "target" / "release"))

# The emulated device: one reclaim group, 8 initially isolated reclaim unit handles, 1 MiB
# reclaim units (the measuring device's default, so an engine's regions line up the same on
# both), 4 KiB blocks, 1 GiB namespace with every handle.
NAMESPACE_BYTES = 1 << 30
HANDLES = 8
RU_BYTES = 1 << 20
BLOCK = 4096

# What the guest needs from the host, and which package brings it (./lachesis install_guest).
NEEDS = {
    "vng": "virtme-ng (PyPI, in the project's venv)",
    "qemu-system-x86_64": "qemu-system-x86 from bookworm-backports",
    "nvme": "nvme-cli",
    "fio": "fio",
    "busybox": "busybox-static",
}


@dataclass(frozen=True)
class Kernel:
    release: str
    image: Path


def find_kernel() -> Kernel | None:
    """The newest installed 6.12+ kernel whose modules and headers are installed."""
    found = []
    for image in Path("/boot").glob("vmlinuz-*"):
        release = image.name.removeprefix("vmlinuz-")
        m = re.match(r"(\d+)\.(\d+)", release)
        if not m or (int(m[1]), int(m[2])) < (6, 12):
            continue
        if (Path("/lib/modules") / release / "build" / "include").is_dir():
            found.append((tuple(int(x) for x in m.groups()), Kernel(release, image)))
    return max(found, key=lambda f: f[0])[1] if found else None


def missing() -> list[str]:
    """What is missing to boot the guest, each with the package that brings it."""
    path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    out = [f"{tool} ({pkg})" for tool, pkg in NEEDS.items() if not shutil.which(tool, path=path)]
    if find_kernel() is None:
        out.append("a 6.12+ kernel with its headers (linux-image-amd64, linux-headers-amd64 from bookworm-backports)")
    try:
        import bcc  # noqa: F401  (python3-bpfcc; only checks it is there for the guest's python3)
    except ImportError:
        if not Path("/usr/lib/python3/dist-packages/bcc").is_dir():
            out.append("bcc for python3 (python3-bpfcc, bpfcc-tools)")
    for binary in ("lachesis-nvme", "lachesis-engine-replay", "lachesis-top", "lachesis-fs"):
        if not (BIN / binary).exists():
            out.append(f"{BIN / binary} (cd agents && cargo build --release --workspace)")
    return out


def replay(device: str, engine: str, *extra: str) -> dict:
    """lachesis-engine-replay's report for one engine on one device (run on the host)."""
    out = subprocess.run(
        [str(BIN / "lachesis-engine-replay"), "--device", device, "--engine", engine, *extra],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def qemu_device_options(image: Path) -> str:
    return " ".join(
        [
            f"-device nvme-subsys,id=lxsubsys,fdp=on,fdp.runs={RU_BYTES},fdp.nrg=1,fdp.nruh={HANDLES}",
            "-device nvme,id=lxnvme,serial=lachesis0,subsys=lxsubsys",
            f"-drive id=lxns,file={image},if=none,format=raw,discard=unmap",
            f"-device nvme-ns,drive=lxns,nsid=1,logical_block_size={BLOCK},physical_block_size={BLOCK},"
            f"fdp.ruhs=0-{HANDLES - 1}",
        ]
    )


def run_guest(out: Path, *, iops: bool = False, timeout_s: int = 1500) -> subprocess.CompletedProcess[str]:
    """Boots the guest, runs in_guest.sh with its results in `out` (created), and returns the
    finished process (its stderr has the guest's progress, which is also shown on ours).
    `iops`: also the benchmark's IOPS runs (bench/device/run.sh guest)."""
    kernel = find_kernel()
    assert kernel is not None, "no kernel to boot: " + "; ".join(missing())
    out.mkdir(parents=True, exist_ok=True)
    image = out / "namespace.img"
    with open(image, "wb") as f:
        f.truncate(NAMESPACE_BYTES)  # sparse: the guest's writes are all it takes on disk
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    cmd = [
        "vng", "--run", str(kernel.image), "--disable-kvm", "--memory", "2G", "--cpus", "2",
        "--rwdir", str(out), f"--qemu-opts={qemu_device_options(image)}",
        "--", "bash", str(HERE / "in_guest.sh"), str(out), str(BIN), str(REPO), "iops" if iops else "",
    ]  # fmt: skip
    print(f"guest: booting {kernel.release} under QEMU (TCG)", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd, env=env, cwd=out, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    # A hang guard, not a measurement: a guest that never finishes is killed and the tests
    # then find its results missing.
    guard = threading.Timer(timeout_s, proc.kill)
    guard.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("guest:"):
                print(line, end="", file=sys.stderr, flush=True)
        proc.wait()
    finally:
        guard.cancel()
    image.unlink(missing_ok=True)
    return subprocess.CompletedProcess(cmd, proc.returncode, "", "".join(lines))


if __name__ == "__main__":
    # Boot once by hand: python e2e/guest/vm.py OUT_DIR [--iops]
    gone = missing()
    if gone:
        sys.exit("cannot boot the guest, missing: " + "; ".join(gone))
    result = run_guest(Path(sys.argv[1]).resolve(), iops="--iops" in sys.argv[2:])
    print(result.stderr[-3000:])
    sys.exit(result.returncode)
