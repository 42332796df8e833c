/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The BPF programs' hashes, in a header of their own so a user-space test
 * (agents/ebpf-metrics/tests/hash_c.rs) compiles this very code and checks
 * it against api-schemas/fixtures/hash/splitmix64.json, the cases
 * lachesis_mrc::hash::mix64 runs too: a sampling decision made in the
 * kernel must be the one user space recomputes.
 *
 * The includer provides __u64 (vmlinux.h, or <linux/types.h> in user
 * space) and __always_inline.
 */
#ifndef __LACHESIS_HASH_H
#define __LACHESIS_HASH_H

/* 2^64 / phi, odd: splitmix64's increment and Fibonacci hashing's
 * multiplier (lachesis_mrc::hash::GOLDEN_GAMMA). */
#define LX_GOLDEN_GAMMA	0x9e3779b97f4a7c15ULL

/* splitmix64's finalizer, the same function as lachesis_mrc::hash::mix64. */
static __always_inline __u64 lx_mix64(__u64 z)
{
	z += LX_GOLDEN_GAMMA;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

#endif /* __LACHESIS_HASH_H */
