#!/usr/bin/env python3
"""tenant_bitesize: block IO size histograms per tenant cgroup (bcc).

Counts every bio the tenants' tasks queue (tracepoint block:block_bio_queue, the point where
the agent's libbpf block layer counts too), with ops and bytes per read/write and a log2
histogram of bio sizes in bytes. Usage: tenant_bitesize.py --cgroup NAME=PATH [...]; prints
`ready` on stderr, counts until stdin closes, then prints JSON:
{tenant: {"read"|"write": {"ops", "bytes", "size_hist": {bucket_bytes: count}, "unmatched"}}}.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tenants as t  # noqa: E402

PROGRAM = r"""
TRACEPOINT_PROBE(block, block_bio_queue) {
    COUNT_BIO;
    if (size == 0) return 0;  /* a flush carries no data: counted, no size */
    struct key_t k = {.cg = cg, .write = write, .slot = bpf_log2l(size) - 1};
    hist.increment(k);
    return 0;
}
"""


def main() -> None:
    t.run_tool("tenant_bitesize", __doc__, PROGRAM, "size_hist")


if __name__ == "__main__":
    main()
