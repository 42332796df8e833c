#!/usr/bin/env python3
"""tenant_biolatency: block IO latency histograms per tenant cgroup (bcc).

A bio the tenants' tasks queue (block:block_bio_queue) is timed to the completion of the
request that starts at its sector on a device of the same major number (block:block_rq_complete), in microseconds, log2 buckets;
ops and bytes are counted at queueing, where the agent's libbpf block layer counts them. A
bio merged into the middle of another request has no completion of its own and is counted
without a latency sample (`unmatched`). Usage: tenant_biolatency.py --cgroup NAME=PATH [...];
prints `ready` on stderr, counts until stdin closes, then prints JSON:
{tenant: {"read"|"write": {"ops", "bytes", "latency_us_hist": {bucket_us: count}}}, ...}.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tenants as t  # noqa: E402

PROGRAM = r"""
struct start_t { u64 ts; u64 cg; u32 write; };
/* Keyed by the device's major number and the sector: on Linux 6.12 the two tracepoints name
 * an NVMe namespace with different minors (block_bio_queue: the namespace's bdev,
 * block_rq_complete: its disk), so the whole dev_t does not pair them up. */
struct where_t { u32 major; u32 pad; u64 sector; };
BPF_HASH(start, struct where_t, struct start_t, 65536);

TRACEPOINT_PROBE(block, block_bio_queue) {
    COUNT_BIO;
    struct where_t w = {.major = args->dev >> 20, .sector = args->sector};
    struct start_t s = {.ts = bpf_ktime_get_ns(), .cg = cg, .write = write};
    start.update(&w, &s);
    return 0;
}

TRACEPOINT_PROBE(block, block_rq_complete) {
    struct where_t w = {.major = args->dev >> 20, .sector = args->sector};
    struct start_t *s = start.lookup(&w);
    if (!s) return 0;
    u64 us = (bpf_ktime_get_ns() - s->ts) / 1000;
    struct key_t k = {.cg = s->cg, .write = s->write, .slot = bpf_log2l(us + 1) - 1};
    hist.increment(k);
    start.delete(&w);
    return 0;
}
"""


def main() -> None:
    t.run_tool("tenant_biolatency", __doc__, PROGRAM, "latency_us_hist")


if __name__ == "__main__":
    main()
