"""What the bcc tools share: tenants from cgroups, the kernel-headers check, and the
ready / count-until-EOF / JSON protocol (the same as `lachesis-top --json-until-eof`), so a
script brackets a workload with the tools and what they count does not depend on timing."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys


def cgroup2_mount() -> str:
    """Where cgroup v2 is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1)."""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == "cgroup2":
                return fields[1]
    return "/sys/fs/cgroup"

def headers_missing() -> str | None:
    """Why bcc cannot compile its programs on this kernel, or None when it can."""
    release = platform.release()
    build = f"/lib/modules/{release}/build"
    if os.path.isdir(os.path.join(build, "include")) or os.path.exists("/sys/kernel/kheaders.tar.xz"):
        return None
    return (
        f"no kernel headers for {release} ({build} is missing and the kernel has no "
        "/sys/kernel/kheaders.tar.xz); install linux-headers-" + release + " or run the tools "
        "in the guest (./lachesis test guest)"
    )


def parse_args(tool: str, about: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=tool, description=about)
    p.add_argument(
        "--cgroup",
        action="append",
        required=True,
        metavar="NAME=PATH",
        help="a tenant: a cgroup v2 directory (relative to the cgroup v2 mount, with or without it); "
        "IO of tasks directly in it is counted",
    )
    args = p.parse_args()
    args.tenants = {}
    root = cgroup2_mount()
    for spec in args.cgroup:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            p.error(f"--cgroup {spec!r}: expected NAME=PATH")
        # As lachesis-top takes them: a path under the cgroup v2 mount, with or without it.
        full = path if path.startswith(root + "/") else os.path.join(root, path.lstrip("/"))
        try:
            # A cgroup v2 directory's inode number is the id bpf_get_current_cgroup_id returns.
            args.tenants[os.stat(full).st_ino] = name
        except OSError as e:
            p.error(f"--cgroup {spec!r}: {e.strerror}: {full}")
    return args


def refuse_without_headers(tool: str) -> None:
    why = headers_missing()
    if why:
        print(f"{tool}: cannot run: {why}", file=sys.stderr)
        sys.exit(1)


# What every tool's program starts with: its tables, keyed by tenant cgroup and direction.
BPF_COMMON = r"""
struct key_t { u64 cg; u32 write; u32 slot; };
struct tot_t { u64 cg; u32 write; u32 pad; };
BPF_HASH(hist, struct key_t, u64, 4096);
BPF_HASH(ops, struct tot_t, u64, 256);
BPF_HASH(bytes, struct tot_t, u64, 256);
"""

# The start of a block_bio_queue probe (pasted in as text, not a C macro, so bcc's rewriter
# sees the map calls): returns unless the task is a tenant's, then counts the bio where the
# agent's libbpf block layer counts it; leaves `cg`, `write` and `size` for the rest.
COUNT_BIO = r"""
    u64 cg = bpf_get_current_cgroup_id();
    if (!(FILTER)) return 0;
    u32 write = args->rwbs[0] == 'W' || args->rwbs[1] == 'W';
    u64 size = (u64)args->nr_sector << 9;
    struct tot_t tk = {.cg = cg, .write = write};
    ops.increment(tk);
    bytes.increment(tk, size);
"""


def cgroup_filter(tenants: dict[int, str]) -> str:
    """C condition true for the tenants' cgroups (bcc programs are compiled per run)."""
    return " || ".join(f"cg == {cid}ULL" for cid in tenants) or "0"


def wait_then_dump(result) -> None:
    """`ready` on stderr, count until stdin closes, then print `result()` as JSON."""
    print("ready", file=sys.stderr, flush=True)
    sys.stdin.read()
    print(json.dumps(result()))


def totals(bpf, tenants: dict[int, str]) -> dict[str, dict[str, dict[str, int]]]:
    """{tenant: {read|write: {ops, bytes}}} from the programs' `ops` and `bytes` tables, keyed
    by (cgroup, write)."""
    out = {name: {"read": {"ops": 0, "bytes": 0}, "write": {"ops": 0, "bytes": 0}} for name in tenants.values()}
    for table, field in ((bpf["ops"], "ops"), (bpf["bytes"], "bytes")):
        for k, v in table.items():
            if k.cg in tenants:
                out[tenants[k.cg]]["write" if k.write else "read"][field] = v.value
    return out


def log2_hist(table, tenants: dict[int, str]) -> dict[str, dict[str, dict[str, int]]]:
    """{tenant: {read|write: {bucket: count}}} from a table keyed by (cgroup, write, slot)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for k, v in table.items():
        name = tenants.get(k.cg)
        if name is None:
            continue
        op = "write" if k.write else "read"
        out.setdefault(name, {}).setdefault(op, {})[str(1 << k.slot)] = v.value
    return out


def run_tool(tool: str, doc: str, program: str, hist_field: str) -> dict:
    """A tool's whole run: arguments, the headers check, compiling `program` for the tenants'
    cgroups (FILTER), the protocol; the result's histogram (table `hist`) goes under
    `hist_field`. Returns the result it printed."""
    args = parse_args(tool, doc.splitlines()[0])
    refuse_without_headers(tool)
    from bcc import BPF  # python3-bpfcc; imported here so the headers check speaks first

    text = BPF_COMMON + program.replace("COUNT_BIO;", COUNT_BIO)
    bpf = BPF(text=text.replace("FILTER", cgroup_filter(args.tenants)))
    out: dict = {}

    def result() -> dict:
        out.update(totals(bpf, args.tenants))
        for name, per_op in log2_hist(bpf["hist"], args.tenants).items():
            for op, hist in per_op.items():
                out[name][op][hist_field] = hist
        for per_op in out.values():
            for op in per_op.values():
                # Bios counted without a histogram sample (biolatency: no completion paired).
                op["unmatched"] = op["ops"] - sum(op.get(hist_field, {}).values())
        return out

    wait_then_dump(result)
    return out
