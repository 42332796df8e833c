// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Lachesis per-tenant IO accounting and SHARDS sampling.
 *
 * Every program is a BTF tracepoint (tp_btf): kprobes and fentry need
 * kernel features (kprobe events, BPF trampolines) that some of our hosts
 * lack, and plain tracepoints (tp/) need a mounted tracefs. BTF tracepoints
 * need neither, get typed arguments (no bpf_probe_read for the first
 * dereference), and skip the perf-event buffer copy of tp/ programs.
 *
 * Layers, each with ops, bytes and a log2 latency histogram per tenant:
 *   syscall  syscalls:sys_enter_X/sys_exit_X for the IO syscalls (read,
 *            write, pread64, pwrite64, readv, writev, preadv, pwritev,
 *            preadv2, pwritev2), or raw_syscalls sys_enter/sys_exit with a
 *            syscall-number table where those are unavailable; filtered by
 *            file type (regular files and block devices: a pipe or socket
 *            is not storage IO).
 *   uring    io_uring_submit_req to io_uring_complete for read/write ops.
 *   block    block_bio_queue to the bio's completion, per bio: the
 *            tenant's IO below the page cache, with scheduler queueing.
 *   device   block_rq_issue to block_rq_complete, per request: device
 *            service time, charged to the tenant of the request's first bio.
 *
 * SHARDS sampling runs at bio queue, so the sample is the stream of 4 KiB
 * blocks a cache below the page cache would see.
 *
 * Cost matters on every IO of the host, so: pointers that come typed from
 * a BTF tracepoint or bpf_get_current_task_btf() are dereferenced directly
 * (a plain load; BPF_CORE_READ would be a helper call per level), and
 * BPF_CORE_READ is kept for pointers the verifier only sees as numbers.
 * Counters are per-CPU and updated without atomics: a BPF program never
 * runs nested in itself on one CPU (the kernel skips the nested run), and
 * each counter has one writing program, so no update can be lost.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "lachesis.h"
#include "hash.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Not in vmlinux.h: they are macros, not types. */
#define REQ_OP_MASK	0xff
#define S_IFMT		00170000
#define S_IFREG		0100000
#define S_IFBLK		0060000
#define MINORBITS	20
/* The root cgroup of the default (v2) hierarchy has hierarchy_id 0, which
 * is why /proc/<pid>/cgroup lists v2 as "0::/path". */
#define CGROUP_DFL_HIERARCHY_ID	0
#define MAX_CGROUP_DEPTH	16
/* bpf_loop's own limit is 1 << 23; a 32 GiB bio does not exist. */
#define MAX_BLOCKS_PER_BIO	(1 << 23)

/* ---- configuration, fixed at load time by user space ---- */

/* Syscall number -> LX_SYS_*; user space fills it from libc's SYS_*
 * constants so the object does not hard-code one architecture's numbers. */
const volatile __u8 sys_op_of_nr[LX_SYSCALL_TABLE] = {};
/* Tenant slots: bounds every index into the per-tenant maps. */
const volatile __u32 max_tenants = LX_MAX_TENANTS_DEFAULT;
/* The io controller is on the cgroup v2 hierarchy, so a bio's blkcg is a
 * v2 cgroup and names its owner (see blkcg_tenant). User space reads this
 * from /proc/cgroups; when false the blkcg walk is skipped altogether. */
const volatile bool io_on_dfl = false;
/* Count the device layer (request issue to completion) at
 * block_rq_complete; LoadOptions::layers.device. */
const volatile bool count_device = true;

/* ---- maps written by user space ---- */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);			/* cgroup v2 id (kernfs node id) */
	__type(value, struct lx_cgroup_tenant);
} cgroup_tenants SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LX_MAX_TENANTS_DEFAULT);
	__type(key, __u32);
	__type(value, struct lx_tenant_cfg);
} tenant_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lx_state);
} state SEC(".maps");

/* ---- maps written by the programs ---- */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LX_MAX_TENANTS_DEFAULT);
	__type(key, __u32);
	__type(value, struct lx_tenant_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} samples SEC(".maps");

/*
 * cgroup id -> tenant, including "no tenant" and descendants of a mapped
 * cgroup, stamped with the generation it was computed under. Keeps the
 * cost of classifying an IO at one hash lookup whatever the cgroup depth;
 * a generation bump makes every entry stale at once, which plain deletion
 * from user space could not do without racing a program that is filling
 * in an entry computed from the old mapping.
 */
struct resolved {
	__u32 tenant;
	__u32 generation;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct resolved);
} resolve_cache SEC(".maps");

/*
 * Per thread: its tenant as last resolved (valid while the thread stays in
 * cgroup `cgid` and the mapping generation is unchanged) and the syscall
 * in flight. Task storage rather than a hash keyed by tid or cgroup id: a
 * lookup is a few loads through the task's own storage cache (no hashing,
 * no bucket lock), it is freed with the task, and the tenant check every
 * hook starts with costs one lookup instead of a helper call plus a hash
 * lookup in resolve_cache (which stays as the shared slow path).
 */
struct task_ctx {
	__u64 cgid;		/* 0 = nothing resolved yet (no cgroup has id 0) */
	__u32 generation;
	__u32 tenant;
	__u64 sys_ts;		/* entry of a counted syscall; 0 = none */
	__u32 sys_tenant;
	__u32 sys_op;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctx SEC(".maps");

/*
 * In-flight tables: io_uring request -> submission, bio -> queue (and the
 * request it heads, if any). A hash map here (insert at submission, lookup
 * and delete at completion, both taking a bucket lock and the LRU's
 * bookkeeping) was most of the block and io_uring layers' cost. These are
 * direct-mapped arrays instead: the slot is a multiplicative hash of the
 * pointer, probed over INFLIGHT_PROBES neighbours; an array lookup is
 * inlined by the verifier into address arithmetic, claiming a slot is one
 * compare-and-swap, and releasing it one store. A slot whose owner never
 * completed here (a bio merged beyond the completion walk, an io_uring
 * request with IOSQE_CQE_SKIP_SUCCESS) is taken over once INFLIGHT_STALE_NS
 * old, so nothing leaks. When every probed slot is busy the IO is still
 * counted at submission; only its latency sample (and, for a bio, its
 * device-layer op) is lost, which at 65536 slots and the queue depths of a
 * host is rare (the map-free alternative, the tenant from the bio's blkcg
 * at completion, needs the io controller on cgroup v2, which our hosts do
 * not have).
 */
struct inflight {
	__u64 key;			/* ptr_bits of the pointer; 0 = free */
	__u64 start_ts;			/* submission / bio queue */
	__u32 tenant;
	__u8 op;
	/* A piece split off a tenant's bio: it carries the tenant to the
	 * device layer, but its completion is not a block-layer op. */
	__u8 piece;
	__u8 _pad[2];
};

/* 16384 x 24 bytes: small enough to stay in the CPU caches, far more
 * slots than a host has bios in flight. */
#define INFLIGHT_SLOTS_SHIFT	14
#define INFLIGHT_SLOTS		(1u << INFLIGHT_SLOTS_SHIFT)
#define INFLIGHT_PROBES		4
#define INFLIGHT_STALE_NS	(10ULL * 1000 * 1000 * 1000)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_SLOTS);
	__type(key, __u32);
	__type(value, struct inflight);
} uring_inflight SEC(".maps");

/* Deleted at completion: for request-based (blk-mq) devices by walking
 * the request's bios at block_rq_complete, because the block layer clears
 * BIO_TRACE_COMPLETION once the request completion is traced and
 * block_bio_complete never fires; for bio-based devices (dm, md) at
 * block_bio_complete. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INFLIGHT_SLOTS);
	__type(key, __u32);
	__type(value, struct inflight);
} bio_inflight SEC(".maps");

/*
 * A typed pointer as a number, for hashing and as a key: the verifier
 * allows no arithmetic on a trusted pointer, but the difference of two
 * pointers is a plain scalar for a privileged program (which ours are:
 * tracing needs CAP_PERFMON). Taken relative to a map's address, which is
 * fixed while the programs are loaded, it is a bijection of the pointer,
 * and costs one subtraction where bpf_probe_read_kernel of the pointer's
 * bits cost a helper call. The same base everywhere, so keys agree
 * between programs; never 0 for a real object.
 */
static __always_inline __u64 ptr_bits(const void *p)
{
	return (__u64)p - (__u64)(void *)&bio_inflight;
}

static __always_inline __u32 inflight_home(__u64 key)
{
	/* Fibonacci hashing: slab pointers differ in their middle bits. */
	return (key * LX_GOLDEN_GAMMA) >> (64 - INFLIGHT_SLOTS_SHIFT);
}

/* A slot for key, claimed for the caller, or NULL if all probed are busy. */
static __always_inline struct inflight *inflight_claim(void *map, __u64 key, __u64 now)
{
	__u32 home = inflight_home(key);
	struct inflight *e;
	__u64 old;
	int i;

#pragma unroll
	for (i = 0; i < INFLIGHT_PROBES; i++) {
		__u32 idx = (home + i) & (INFLIGHT_SLOTS - 1);

		e = bpf_map_lookup_elem(map, &idx);
		if (!e)
			return NULL;
		old = e->key;
		/* Our own key: a reused pointer whose completion we missed. */
		if (old && old != key && now - e->start_ts < INFLIGHT_STALE_NS)
			continue;
		if (__sync_val_compare_and_swap(&e->key, old, key) == old)
			return e;
	}
	return NULL;
}

static __always_inline struct inflight *inflight_find(void *map, __u64 key)
{
	__u32 home = inflight_home(key);
	struct inflight *e;
	int i;

#pragma unroll
	for (i = 0; i < INFLIGHT_PROBES; i++) {
		__u32 idx = (home + i) & (INFLIGHT_SLOTS - 1);

		e = bpf_map_lookup_elem(map, &idx);
		if (e && e->key == key)
			return e;
	}
	return NULL;
}

/*
 * address_space -> the cgroup that last dirtied a page of it. Writeback
 * runs in a flusher kworker (or in whoever calls sync/fsync), so the
 * submitter of a writeback bio says nothing about the owner. With cgroup
 * v2 writeback (io and memory controllers on v2) the bio's blkcg already
 * names the owner; on hosts where they are on v1 it does not, and this map
 * is what attributes writeback. Keyed by pointer: cheaper than (dev, ino),
 * and a recycled address_space is overwritten on its first dirtying.
 */
struct owner {
	__u64 cgroup_id;
	__u32 tenant;
	__u32 generation;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct owner);
} inode_owner SEC(".maps");

/* ---- tenant resolution ---- */

static __always_inline __u32 generation(void)
{
	__u32 zero = 0;
	struct lx_state *s = bpf_map_lookup_elem(&state, &zero);

	return s ? s->generation : 0;
}

static __always_inline __u32 lookup_exact(__u64 cgid)
{
	struct lx_cgroup_tenant *t = bpf_map_lookup_elem(&cgroup_tenants, &cgid);

	return t ? t->tenant : LX_NO_TENANT;
}

/* Slow path, once per cgroup and generation: the nearest mapped ancestor
 * (or the cgroup itself), so a tenant classified by a pod or slice cgroup
 * also owns its sub-cgroups. */
static __noinline __u32 resolve_walk(struct cgroup *cgrp)
{
	struct cgroup **ancestors;
	struct cgroup *anc;
	__u64 id;
	__u32 t;
	int level, i;

	if (!cgrp)
		return LX_NO_TENANT;
	level = BPF_CORE_READ(cgrp, level);
	ancestors = (void *)cgrp + bpf_core_field_offset(struct cgroup, ancestors);
	for (i = 0; i < MAX_CGROUP_DEPTH; i++) {
		if (level - i < 0)
			break;
		anc = NULL;
		bpf_probe_read_kernel(&anc, sizeof(anc), &ancestors[level - i]);
		if (!anc)
			break;
		id = BPF_CORE_READ(anc, kn, id);
		t = lookup_exact(id);
		if (t != LX_NO_TENANT)
			return t;
	}
	return LX_NO_TENANT;
}

static __always_inline __u32 resolve_cgroup(__u64 cgid, struct cgroup *cgrp)
{
	struct resolved *r, fresh;
	__u32 gen = generation();

	r = bpf_map_lookup_elem(&resolve_cache, &cgid);
	if (r && r->generation == gen)
		return r->tenant;
	fresh.tenant = resolve_walk(cgrp);
	fresh.generation = gen;
	bpf_map_update_elem(&resolve_cache, &cgid, &fresh, BPF_ANY);
	return fresh.tenant;
}

/*
 * The tenant of the current task, checked against its per-thread cache
 * first: the thread's cgroup (plain loads from the typed task) and the
 * generation decide whether the cached answer stands, so a task moved to
 * another cgroup or a remapped cgroup is re-resolved on its next IO. `tc`
 * may be NULL (the storage was busy in an interrupted program on this CPU,
 * or could not be allocated): then the shared cache answers.
 */
static __always_inline __u32 task_tenant(struct task_struct *task, struct task_ctx *tc, __u64 *cgid_out)
{
	struct cgroup *cgrp = task->cgroups->dfl_cgrp;
	__u64 cgid = cgrp->kn->id;
	__u32 gen = generation();
	__u32 t;

	if (cgid_out)
		*cgid_out = cgid;
	if (tc && tc->cgid == cgid && tc->generation == gen)
		return tc->tenant;
	t = resolve_cgroup(cgid, cgrp);
	if (tc) {
		tc->cgid = cgid;
		tc->generation = gen;
		tc->tenant = t;
	}
	return t;
}

static __always_inline __u32 current_tenant(__u64 *cgid_out)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct task_ctx *tc = bpf_task_storage_get(&task_ctx, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);

	return task_tenant(task, tc, cgid_out);
}

/* ---- accounting ---- */

static __always_inline struct lx_tenant_stats *tenant_stats(__u32 tenant)
{
	if (tenant >= max_tenants)
		return NULL;
	return bpf_map_lookup_elem(&stats, &tenant);
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 r = 0, shift;

	/* Branch-free log2 of a 64-bit value (libbpf-tools' log2l). */
	shift = (v > 0xffffffffULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xffff) << 4; v >>= shift; r |= shift;
	shift = (v > 0xff) << 3; v >>= shift; r |= shift;
	shift = (v > 0xf) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r < LX_HIST_BUCKETS ? r : LX_HIST_BUCKETS - 1;
}

static __always_inline struct lx_op_stats *op_stats(__u32 tenant, __u32 layer, __u32 op)
{
	struct lx_tenant_stats *s = tenant_stats(tenant);

	/* Every caller passes constants or values it stored itself, but the
	 * verifier needs the bound on the path it checks. */
	if (!s || layer >= LX_NR_LAYERS || op >= LX_NR_OPS)
		return NULL;
	return &s->io[layer][op];
}

static __always_inline void account(__u32 tenant, __u32 layer, __u32 op, __u64 bytes, __u64 lat_ns)
{
	struct lx_op_stats *o = op_stats(tenant, layer, op);

	if (!o)
		return;
	o->ops++;
	o->bytes += bytes;
	o->lat_hist[log2_bucket(lat_ns)]++;
}

/* ---- what counts as storage ---- */

/* Magic numbers of pseudo filesystems whose "regular files" are kernel
 * interfaces, not storage (include/uapi/linux/magic.h). */
#define PROC_SUPER_MAGIC	0x9fa0
#define SYSFS_MAGIC		0x62656572
#define CGROUP_SUPER_MAGIC	0x27e0eb
#define CGROUP2_SUPER_MAGIC	0x63677270
#define DEBUGFS_MAGIC		0x64626720
#define TRACEFS_MAGIC		0x74726163
#define SECURITYFS_MAGIC	0x73636673
#define BPF_FS_MAGIC		0xcafe4a11
#define CONFIGFS_MAGIC		0x62656570
#define EFIVARFS_MAGIC		0xde5e81e4

/*
 * Storage IO only: counting pipes and sockets would make a tenant's
 * "bytes written" include its log lines and RPCs, and counting /proc or
 * /sys reads would add every monitoring poll. A deny list rather than
 * "has a block device", so FUSE (our own front end) and network
 * filesystems still count. `file` is an untyped pointer here (it came out
 * of the fd array through bpf_probe_read); bpf_core_cast (the
 * bpf_rdonly_cast kfunc) types it, so the three loads below are plain
 * fault-checked loads instead of a helper call each, as BPF_CORE_READ
 * would be.
 */
static __always_inline bool is_storage_file(struct file *untyped)
{
	struct file *file = bpf_core_cast(untyped, struct file);
	struct inode *inode = file->f_inode;
	umode_t mode = inode->i_mode & S_IFMT;

	if (mode == S_IFBLK)
		return true;
	if (mode != S_IFREG)
		return false;
	switch (inode->i_sb->s_magic) {
	case PROC_SUPER_MAGIC:
	case SYSFS_MAGIC:
	case CGROUP_SUPER_MAGIC:
	case CGROUP2_SUPER_MAGIC:
	case DEBUGFS_MAGIC:
	case TRACEFS_MAGIC:
	case SECURITYFS_MAGIC:
	case BPF_FS_MAGIC:
	case CONFIGFS_MAGIC:
	case EFIVARFS_MAGIC:
		return false;
	default:
		return true;
	}
}

static __always_inline struct file *current_fd_file(struct task_struct *task, int fd)
{
	struct fdtable *fdt = task->files->fdt;
	struct file *file = NULL;

	if (!fdt || fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	/* A variable index into a typed pointer is not a plain load. */
	bpf_probe_read_kernel(&file, sizeof(file), &fdt->fd[fd]);
	return file;
}

/* ---- syscall layer ---- */

/*
 * Two ways in, the same work. Preferred: the per-syscall tracepoints
 * (syscalls:sys_enter_pread64 and so on, one perf event per IO syscall,
 * lx_sc_enter/lx_sc_exit), so no program runs for any other syscall of any
 * process: the kernel filters by syscall number (a bitmap test) before
 * calling anything. They are perf tracepoints, attached through their
 * tracefs ids (the loader mounts tracefs privately for the lookup when the
 * host has not). Fallback when those are unavailable: the raw_syscalls
 * BTF tracepoints (lx_sys_enter/lx_sys_exit), which run for every syscall
 * of the host and filter by the syscall-number table themselves.
 */
static __always_inline int sys_enter_common(long id, int fd)
{
	struct task_struct *task;
	struct task_ctx *tc;
	struct file *file;
	__u32 tenant, op;

	if (id < 0 || id >= LX_SYSCALL_TABLE)
		return 0;
	op = sys_op_of_nr[id];
	if (op == LX_SYS_NONE)
		return 0;
	/* Tenant first: a thread outside every tenant pays one storage
	 * lookup and two compares, nothing else. */
	task = bpf_get_current_task_btf();
	tc = bpf_task_storage_get(&task_ctx, task, NULL, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tc)
		return 0;
	tenant = task_tenant(task, tc, NULL);
	if (tenant == LX_NO_TENANT)
		return 0;
	file = current_fd_file(task, fd);
	if (!file || !is_storage_file(file))
		return 0;
	tc->sys_tenant = tenant;
	tc->sys_op = op == LX_SYS_READ ? LX_OP_READ : LX_OP_WRITE;
	tc->sys_ts = bpf_ktime_get_ns();
	return 0;
}

static __always_inline int sys_exit_common(long ret)
{
	struct task_ctx *tc;

	/* No create: a thread that never entered a counted syscall has no
	 * storage, and the lookup is one pointer test. */
	tc = bpf_task_storage_get(&task_ctx, bpf_get_current_task_btf(), NULL, 0);
	if (!tc || !tc->sys_ts)
		return 0;
	if (ret >= 0)
		account(tc->sys_tenant, LX_LAYER_SYSCALL, tc->sys_op, ret, bpf_ktime_get_ns() - tc->sys_ts);
	tc->sys_ts = 0;
	return 0;
}

/* Records of syscalls:sys_enter_* and sys_exit_* (struct
 * syscall_trace_enter / syscall_trace_exit in the kernel): the common
 * trace header, the syscall number as an int, then the arguments or the
 * return value. */
struct sc_enter_rec {
	__u64 _common;
	__s32 nr;
	__u32 _pad;
	__u64 args[6];
};

struct sc_exit_rec {
	__u64 _common;
	__s32 nr;
	__u32 _pad;
	__s64 ret;
};

/* Attached by the loader to sys_enter_<each IO syscall>. */
SEC("tracepoint")
int lx_sc_enter(struct sc_enter_rec *ctx)
{
	return sys_enter_common(ctx->nr, (int)ctx->args[0]);
}

SEC("tracepoint")
int lx_sc_exit(struct sc_exit_rec *ctx)
{
	/* Only IO syscalls reach here, so no table check. */
	return sys_exit_common(ctx->ret);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(lx_sys_enter, struct pt_regs *regs, long id)
{
	return sys_enter_common(id, (int)PT_REGS_PARM1_SYSCALL(regs));
}

SEC("tp_btf/sys_exit")
int BPF_PROG(lx_sys_exit, struct pt_regs *regs, long ret)
{
	long id;

#if defined(__TARGET_ARCH_x86)
	id = regs->orig_ax;
#elif defined(__TARGET_ARCH_arm64)
	id = regs->syscallno;
#else
#error "lachesis: the syscall number at sys_exit is only known for x86 and arm64"
#endif
	if (id < 0 || id >= LX_SYSCALL_TABLE || sys_op_of_nr[id] == LX_SYS_NONE)
		return 0;
	return sys_exit_common(ret);
}

/* ---- io_uring layer ---- */

static __always_inline int uring_op(__u8 opcode)
{
	switch (opcode) {
	case IORING_OP_READV:
	case IORING_OP_READ_FIXED:
	case IORING_OP_READ:
		return LX_OP_READ;
	case IORING_OP_WRITEV:
	case IORING_OP_WRITE_FIXED:
	case IORING_OP_WRITE:
		return LX_OP_WRITE;
	default:
		return -1;
	}
}

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(lx_uring_submit, struct io_kiocb *req)
{
	struct inflight *in;
	__u64 now;
	__u32 tenant;
	int op;

	op = uring_op(req->opcode);
	if (op < 0)
		return 0;
	/* The submitter is the owner: the task calling io_uring_enter, or the
	 * SQPOLL thread, which lives in its creator's cgroup. */
	tenant = current_tenant(NULL);
	if (tenant == LX_NO_TENANT)
		return 0;
	now = bpf_ktime_get_ns();
	in = inflight_claim(&uring_inflight, ptr_bits(req), now);
	if (!in)
		return 0;
	in->start_ts = now;
	in->tenant = tenant;
	in->op = op;
	return 0;
}

/* The tracepoint's arguments changed in Linux 6.14: before, (ctx, req, user_data, res,
 * cflags, extra1, extra2); since, (ctx, req, cqe). User space reads which from the kernel's
 * BTF and sets this before loading, so the verifier only walks the branch the running kernel
 * has (the guest suite found the old one on 6.12). */
const volatile bool uring_complete_cqe = true;

SEC("tp_btf/io_uring_complete")
int lx_uring_complete(__u64 *ctx)
{
	void *req = (void *)ctx[1];
	struct inflight *in;
	struct file *file;
	__s32 res;

	in = inflight_find(&uring_inflight, ptr_bits(bpf_core_cast(req, struct io_kiocb)));
	if (!in)
		return 0;
	if (uring_complete_cqe)
		res = BPF_CORE_READ((struct io_uring_cqe *)ctx[2], res);
	else
		res = (__s32)ctx[3];
	/* The file is only assigned at issue, after the submit tracepoint;
	 * req is a void * in this tracepoint, hence the cast. */
	file = bpf_core_cast(req, struct io_kiocb)->file;
	if (res >= 0 && file && is_storage_file(file))
		account(in->tenant, LX_LAYER_URING, in->op, res, bpf_ktime_get_ns() - in->start_ts);
	in->key = 0;
	return 0;
}

/* ---- block layer: attribution ---- */

/* cgroup v2 writeback: the kernel charged the bio to the inode's owner
 * (or, for direct IO, the submitter). Only meaningful when the io
 * controller is on the default hierarchy; on a v1 blkio host the blkcg is a
 * v1 cgroup whose id lives in another namespace of ids. */
static __always_inline __u32 blkcg_tenant(struct bio *bio)
{
	struct cgroup *cg;

	if (!io_on_dfl || !bio->bi_blkg)
		return LX_NO_TENANT;
	cg = bio->bi_blkg->blkcg->css.cgroup;
	if (!cg || cg->level == 0 || cg->root->hierarchy_id != CGROUP_DFL_HIERARCHY_ID)
		return LX_NO_TENANT;
	return resolve_cgroup(cg->kn->id, cg);
}

static __always_inline __u32 owner_tenant(struct owner *o)
{
	struct resolved *r;

	if (o->generation == generation())
		return o->tenant;
	r = bpf_map_lookup_elem(&resolve_cache, &o->cgroup_id);
	if (r && r->generation == generation())
		return r->tenant;
	return lookup_exact(o->cgroup_id);
}

/* Page-cache writeback: the first page's file, and who dirtied it last. */
static __always_inline __u32 page_owner_tenant(struct bio *bio)
{
	struct page *page = bio->bi_io_vec->bv_page;
	struct address_space *mapping;
	unsigned long head;
	struct owner *o;
	__u64 key;

	if (!page)
		return LX_NO_TENANT;
	/* A tail page of a large folio points at its head with bit 0 set;
	 * only the head carries the mapping. The word shares a union with a
	 * list_head, which the verifier would type it as, so read it as a
	 * number. */
	head = BPF_CORE_READ(page, compound_head);
	if (head & 1)
		page = (struct page *)(head - 1);
	mapping = BPF_CORE_READ(page, mapping);
	/* Low bits set: anonymous or movable page (e.g. a direct-IO buffer). */
	if (!mapping || ((unsigned long)mapping & 3))
		return LX_NO_TENANT;
	key = (__u64)mapping;
	o = bpf_map_lookup_elem(&inode_owner, &key);
	return o ? owner_tenant(o) : LX_NO_TENANT;
}

/*
 * Who owns a bio: the blkcg when v2 writeback already decided; for writes,
 * whoever dirtied the pages (a flusher or another tenant's fsync may be
 * submitting them); otherwise the submitter (direct IO, reads and
 * readahead run in the reader's context).
 */
static __always_inline __u32 bio_tenant(struct bio *bio, int op)
{
	__u32 t = blkcg_tenant(bio);

	if (t != LX_NO_TENANT)
		return t;
	if (op == LX_OP_WRITE) {
		t = page_owner_tenant(bio);
		if (t != LX_NO_TENANT)
			return t;
	}
	return current_tenant(NULL);
}

/* ---- block layer: SHARDS sampling ---- */

/* One 64-bit key per (device, block); the rotation keeps every bit of dev. */
static __always_inline __u64 shards_key(__u32 dev, __u64 block)
{
	__u64 d = dev;

	return block ^ ((d << 40) | (d >> 24));
}

struct sample_ctx {
	__u64 first_block;
	__u64 time_ns;
	__u32 dev;
	__u32 io_bytes;
	__u32 tenant;
	__u32 threshold;
	__u32 op;
};

/*
 * The context is read-only here: the verifier checks a bpf_loop callback
 * until its input state converges, and a counter carried in the context
 * never would. Sampled blocks are rare, so they count themselves.
 */
static __always_inline void sample_block(const struct sample_ctx *c, __u64 block)
{
	__u32 h = lx_mix64(shards_key(c->dev, block)) & (LX_SHARDS_P - 1);
	struct lx_tenant_stats *st;
	struct lx_sample *s;

	/* The one compare an unsampled block costs. */
	if (h >= c->threshold)
		return;
	st = tenant_stats(c->tenant);
	s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		if (st)
			st->sample_drops++;
		return;
	}
	s->time_ns = c->time_ns;
	s->block = block;
	s->dev = c->dev;
	s->io_bytes = c->io_bytes;
	s->tenant = c->tenant;
	s->hash = h;
	s->op = c->op;
	__builtin_memset(s->_pad, 0, sizeof(s->_pad));
	/* Wake the reader only once a quarter of the ring is waiting: a
	 * wakeup per record (an irq_work, i.e. a self-IPI, which is a VM
	 * exit on a virtual machine, plus a switch to the reader) cost more
	 * than the sampling. The reader drains on its poll timeout anyway
	 * (SampleReader::poll), and a quarter of the default 4 MiB ring is
	 * 21,000 samples, so nothing waits long or overflows. */
	bpf_ringbuf_submit(s, bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >=
				      bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 4 ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	if (st)
		st->sampled++;
}

static long sample_block_cb(__u64 i, void *ctx)
{
	const struct sample_ctx *c = ctx;

	sample_block(c, c->first_block + 1 + i);
	return 0;
}

/*
 * Every 4 KiB block of the bio is its own SHARDS reference and gets its own
 * decision. Sampling only the first block would not be spatially
 * consistent: a block that starts one IO and sits inside the next would be
 * in the sample for one reference and out of it for the other, and SHARDS
 * is only unbiased if every reference to a sampled block is seen. A 4 KiB
 * IO still costs one hash and one compare.
 */
static __always_inline void shards_sample(struct bio *bio, __u32 tenant, int op, __u32 bytes, __u64 now,
					  struct lx_tenant_stats *st)
{
	struct lx_tenant_cfg *cfg = bpf_map_lookup_elem(&tenant_cfg, &tenant);
	struct gendisk *disk = bio->bi_bdev->bd_disk;
	__u64 sector = bio->bi_iter.bi_sector;
	__u64 last = (sector + (bytes >> 9) - 1) >> LX_BLOCK_SECTORS_SHIFT;
	struct sample_ctx c;
	__u64 nblocks;

	c.first_block = sector >> LX_BLOCK_SECTORS_SHIFT;
	nblocks = last - c.first_block + 1;
	st->blocks += nblocks;
	if (!cfg || !cfg->threshold || !disk)
		return;
	/* Sectors at bio queue are already relative to the whole disk (the
	 * partition remap ran), so key them by the whole disk too. */
	c.dev = ((__u32)disk->major << MINORBITS) | (__u32)disk->first_minor;
	c.time_ns = now;
	c.io_bytes = bytes;
	c.tenant = tenant;
	c.threshold = cfg->threshold;
	c.op = op;
	sample_block(&c, c.first_block);
	if (nblocks > 1)
		bpf_loop(nblocks - 1 < MAX_BLOCKS_PER_BIO ? nblocks - 1 : MAX_BLOCKS_PER_BIO,
			 sample_block_cb, &c, 0);
}

/* ---- block layer: programs ---- */

static __always_inline int bio_op(struct bio *bio)
{
	switch (bio->bi_opf & REQ_OP_MASK) {
	case REQ_OP_READ:
		return LX_OP_READ;
	case REQ_OP_WRITE:
		return LX_OP_WRITE;
	default:
		/* flush, discard, zone management: not data IO */
		return -1;
	}
}

SEC("tp_btf/block_bio_queue")
int BPF_PROG(lx_bio_queue, struct bio *bio)
{
	struct lx_tenant_stats *st;
	struct inflight *in;
	__u32 tenant, bytes;
	__u64 now;
	int op;

	op = bio_op(bio);
	bytes = bio->bi_iter.bi_size;
	/* A zero-length write is a bare cache flush (REQ_PREFLUSH). */
	if (op < 0 || !bytes)
		return 0;
	tenant = bio_tenant(bio, op);
	st = tenant_stats(tenant);
	if (!st)
		return 0;
	st->io[LX_LAYER_BLOCK][op].ops++;
	st->io[LX_LAYER_BLOCK][op].bytes += bytes;
	now = bpf_ktime_get_ns();
	in = inflight_claim(&bio_inflight, ptr_bits(bio), now);
	if (in) {
		in->start_ts = now;
		in->tenant = tenant;
		in->op = op;
		in->piece = 0;
	}
	shards_sample(bio, tenant, op, bytes, now, st);
	return 0;
}

/*
 * A bio larger than the device's limits is split after block_bio_queue:
 * the front piece is a new bio (chained to the original through
 * bi_private) that goes into a request, and the original, advanced, is
 * resubmitted. Record the piece so the device layer can charge its
 * request; the original keeps its block-layer entry.
 */
SEC("tp_btf/block_split")
int BPF_PROG(lx_bio_split, struct bio *split, unsigned int new_sector)
{
	struct inflight *p, *piece;

	/* bi_private is a void *: loaded, it is a plain number to the verifier, and
	 * number - map pointer is refused (Linux 6.12); cast to the bio it is, it is
	 * a pointer like the others (as req is in lx_uring_complete). */
	p = inflight_find(&bio_inflight, ptr_bits(bpf_core_cast(split->bi_private, struct bio)));
	if (!p)
		return 0;
	piece = inflight_claim(&bio_inflight, ptr_bits(split), bpf_ktime_get_ns());
	if (!piece)
		return 0;
	piece->start_ts = p->start_ts;
	piece->tenant = p->tenant;
	piece->op = p->op;
	piece->piece = 1;
	return 0;
}

/* Ends a bio's flight: its block-layer latency, and the device layer's
 * op (rq_bytes issued at issue_ts) if it headed the request. */
static __always_inline void bio_done(__u64 bio, __u64 now, __u64 issue_ts, __u32 rq_bytes)
{
	struct inflight *in;

	in = inflight_find(&bio_inflight, bio);
	if (!in)
		return;
	if (!in->piece) {
		struct lx_op_stats *o = op_stats(in->tenant, LX_LAYER_BLOCK, in->op);

		if (o)
			o->lat_hist[log2_bucket(now - in->start_ts)]++;
	}
	if (issue_ts)
		account(in->tenant, LX_LAYER_DEVICE, in->op, rq_bytes, now - issue_ts);
	in->key = 0;
}

/* Bio-based devices only; see bio_inflight. */
SEC("tp_btf/block_bio_complete")
int BPF_PROG(lx_bio_complete, struct request_queue *q, struct bio *bio)
{
	bio_done(ptr_bits(bio), bpf_ktime_get_ns(), 0, 0);
	return 0;
}

/* Merged requests rarely carry more bios; the rest are taken over once
 * stale, without a block-layer latency sample. */
#define MAX_BIOS_PER_RQ	32

/*
 * The device layer needs no program at block_rq_issue: the block layer
 * stamps the request itself. io_start_time_ns is set when the request is
 * started (issued to the driver) if the queue keeps statistics
 * (QUEUE_FLAG_STATS: writeback throttling, the default for disks, or
 * blk-iolatency); otherwise start_time_ns, its allocation time, set when
 * the queue accounts IO (iostats) or has a scheduler, so the figure then
 * also holds the time queued in the scheduler. Neither set: no device op.
 */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(lx_rq_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	struct bio *bio = rq->bio;
	__u64 now, issue_ts = 0;
	int i;

	if (!bio)
		return 0;
	now = bpf_ktime_get_ns();
	if (count_device && !error) {
		issue_ts = rq->io_start_time_ns;
		if (!issue_ts)
			issue_ts = rq->start_time_ns;
	}
	/* Still linked to the request here: blk_update_request unlinks and
	 * ends them after this tracepoint. */
	for (i = 0; i < MAX_BIOS_PER_RQ && bio; i++) {
		bio_done(ptr_bits(bio), now, i == 0 ? issue_ts : 0, nr_bytes);
		bio = bio->bi_next;
	}
	return 0;
}

/* ---- writeback ownership ---- */

SEC("tp_btf/writeback_dirty_folio")
int BPF_PROG(lx_dirty_folio, struct folio *folio, struct address_space *mapping)
{
	struct owner *o, fresh = {};
	__u64 key = (__u64)mapping;
	__u64 cgid;
	__u32 tenant;

	if (!mapping || !mapping->host)
		return 0;
	/* Only file data: a block device's mapping holds filesystem metadata
	 * (and the journal), which belongs to no single tenant. */
	if ((mapping->host->i_mode & S_IFMT) != S_IFREG)
		return 0;
	tenant = current_tenant(&cgid);
	if (tenant == LX_NO_TENANT)
		return 0;
	fresh.generation = generation();
	o = bpf_map_lookup_elem(&inode_owner, &key);
	/* Dirtying is per page: skip the update when nothing changed. */
	if (o && o->cgroup_id == cgid && o->tenant == tenant && o->generation == fresh.generation)
		return 0;
	fresh.cgroup_id = cgid;
	fresh.tenant = tenant;
	bpf_map_update_elem(&inode_owner, &key, &fresh, BPF_ANY);
	return 0;
}
