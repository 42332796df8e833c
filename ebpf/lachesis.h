/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Layouts shared by the BPF programs and user space (agents/ebpf-metrics
 * mirrors every struct here in src/layout.rs and checks the sizes at
 * compile time). Change both sides together.
 */
#ifndef __LACHESIS_H
#define __LACHESIS_H

/* Tenant slots: the agent numbers its tenants 0..max_tenants-1. The maps are
 * sized at load time (user space may lower or raise this); the default keeps
 * the per-CPU counters under 1 MiB per CPU. */
#define LX_MAX_TENANTS_DEFAULT	256
/* Marks "no tenant" in the resolution cache, so misses are cached too. */
#define LX_NO_TENANT		0xffffffffu

/* Latency histograms: bucket i counts latencies in [2^i, 2^(i+1)) ns; the
 * last bucket also takes everything longer (2^31 ns is 2.1 s). */
#define LX_HIST_BUCKETS		32

/* SHARDS: a block is sampled when (hash & (LX_SHARDS_P - 1)) < T. */
#define LX_SHARDS_P		(1u << 24)
/* Sampling granule: 4 KiB blocks, in 512-byte sectors. */
#define LX_BLOCK_SECTORS_SHIFT	3

/* Syscall numbers are looked up in a table user space fills from its own
 * (arch-correct) constants; every IO syscall we trace is below this. */
#define LX_SYSCALL_TABLE	512

enum lx_layer {
	LX_LAYER_SYSCALL = 0,	/* read/write family: entry to exit */
	LX_LAYER_URING = 1,	/* io_uring read/write: submission to CQE */
	LX_LAYER_BLOCK = 2,	/* bio: queue to completion */
	LX_LAYER_DEVICE = 3,	/* request: issue to completion */
	LX_NR_LAYERS = 4,
};

enum lx_op {
	LX_OP_READ = 0,
	LX_OP_WRITE = 1,
	LX_NR_OPS = 2,
};

/* sys_op_of_nr[] values: 0 means "not an IO syscall we count". */
#define LX_SYS_NONE	0
#define LX_SYS_READ	1
#define LX_SYS_WRITE	2

struct lx_op_stats {
	__u64 ops;
	__u64 bytes;
	__u64 lat_hist[LX_HIST_BUCKETS];
};

/* Per tenant, per CPU (summed by user space). */
struct lx_tenant_stats {
	struct lx_op_stats io[LX_NR_LAYERS][LX_NR_OPS];
	/* 4 KiB blocks the tenant's bios touched: the SHARDS reference count. */
	__u64 blocks;
	/* Blocks that passed the threshold and reached the ring buffer. */
	__u64 sampled;
	/* Sampled blocks lost because the ring buffer was full. */
	__u64 sample_drops;
	__u64 _reserved;
};

/* Per tenant configuration, written by user space only. */
struct lx_tenant_cfg {
	/* SHARDS threshold T in 0..=2^24: rate R = T / 2^24; 0 disables. */
	__u32 threshold;
	__u32 flags;
	/* For lachesis-top and bpftool; NUL-terminated. */
	char name[56];
};

/* cgroup id -> tenant, exact match, written by user space. */
struct lx_cgroup_tenant {
	__u32 tenant;
	__u32 _pad;
};

/* Global state written by user space. */
struct lx_state {
	/* Bumped on every change to the cgroup map: invalidates cached
	 * resolutions (see resolve_cache in lachesis.bpf.c). */
	__u32 generation;
	__u32 _pad;
};

/* One sampled 4 KiB block, pushed to the ring buffer. */
struct lx_sample {
	__u64 time_ns;		/* bpf_ktime_get_ns() at bio queue */
	__u64 block;		/* 4 KiB block number on the whole disk */
	__u32 dev;		/* whole-disk dev_t, kernel encoding (major << 20 | minor) */
	__u32 io_bytes;		/* length of the bio this block belongs to */
	__u32 tenant;
	__u32 hash;		/* hash & (P - 1): lets fixed-size SHARDS evict without rehashing */
	__u8 op;		/* enum lx_op */
	__u8 _pad[7];
};

#endif /* __LACHESIS_H */
