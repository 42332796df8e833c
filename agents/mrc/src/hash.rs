//! The hashes of trace keys: the sampling hash every sampled estimator
//! shares, and the hasher of the maps keyed by trace keys.
//!
//! SHARDS samples a key when `hash(key) mod P < T`. The hash runs on every
//! reference while only ~1% of them do any further work, so it must be a few
//! cycles: the splitmix64 finalizer is two multiplies and three shifts, and
//! it mixes sequential block numbers (the common case in block traces) well
//! enough that a sample of consecutive blocks is not correlated. The same
//! function is trivial to write in eBPF C, so in-kernel sampling can agree
//! with user space.
//!
//! The maps keyed by trace keys (the LRU stack's, the simulated caches')
//! hash with [`NeighbourHasher`], built on the same mixer, and every crate's
//! seeded generator is [`SplitMix64`] over it: one splitmix64 in Rust. The C
//! copy is `ebpf/hash.h`; both run `api-schemas/fixtures/hash/splitmix64.json`.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// SHARDS modulus: sampling thresholds live in `0..=P`.
pub const P: u64 = 1 << 24;

/// 2^64 / φ, odd: splitmix64's increment, and the multiplier of Fibonacci
/// hashing.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// splitmix64's output function (Steele, Lea, Flood 2014): the first value of
/// a [`SplitMix64`] seeded with `key`.
#[inline(always)]
pub fn mix64(key: u64) -> u64 {
    let mut z = key.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `hash(key) mod P`: the value compared against the sampling threshold.
/// `salt` picks another hash of the same family (0 is the default): a
/// different salt is an independent sample, which is how the benchmark
/// measures the spread of sampled curves rather than one draw, and how
/// several samples are averaged. The salt is spread over all 64 bits before
/// it is mixed in: XOR-ing a small salt into the key only permutes keys
/// within aligned groups of block numbers, and a block trace that reads whole
/// groups then samples the same number of keys with every salt.
#[inline(always)]
pub fn sample_value(key: u64, salt: u64) -> u64 {
    sample_hash(key, salt) & (P - 1)
}

/// The whole 64-bit hash whose low bits are [`sample_value`]; its high bits
/// feed the distinct-key sketch ([`crate::distinct::Hll`]), so a reference
/// is hashed once for both.
#[inline(always)]
pub fn sample_hash(key: u64, salt: u64) -> u64 {
    mix64(key ^ salt.wrapping_mul(GOLDEN_GAMMA))
}

/// The splitmix64 generator: a seeded, reproducible stream of well-mixed
/// 64-bit values (simulated workloads, admission coin flips, benchmarks).
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let z = mix64(self.0);
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        z
    }
}

/// Threshold `T` for sampling rate `rate` (clamped to `1..=P`).
pub fn threshold_for_rate(rate: f64) -> u64 {
    ((rate * P as f64).round() as u64).clamp(1, P)
}

/// Stable 64-bit key for a non-numeric key (e.g. an object name). xxh3 is
/// stable across runs and platforms, so sampled curves are reproducible.
pub fn key_of_bytes(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes)
}

/// Keys that differ only in their low `NEIGHBOUR_BITS` bits hash to
/// neighbouring buckets.
const NEIGHBOUR_BITS: u32 = 2;

/// The hasher of every map keyed by trace keys (the LRU stack's, the
/// simulated caches'). Block traces reference runs of consecutive block
/// numbers, and on a large working set each map access is a cache miss:
/// hashing `key >> 2` and keeping the low two bits in the bucket index puts
/// four consecutive blocks in one cache line of the table, so a run of
/// blocks costs one miss per four. The low bits also go to the top seven
/// bits, which the table keeps as each entry's tag, so neighbours do not
/// share a tag. Other keys hash like any splitmix-mixed key. The seed keeps
/// the bucket index independent of the SHARDS sampling hash, which sampled
/// keys all have small.
#[derive(Default, Clone, Copy)]
pub struct NeighbourHasher(u64);

impl Hasher for NeighbourHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ b as u64);
        }
    }

    #[inline]
    fn write_u64(&mut self, key: u64) {
        let low = key & ((1 << NEIGHBOUR_BITS) - 1);
        let mixed = mix64((key >> NEIGHBOUR_BITS) ^ 0x5851_f42d_4c95_7f2d);
        self.0 = mixed ^ low ^ (low << (64 - NEIGHBOUR_BITS));
    }
}

/// A map from trace keys, hashed with [`NeighbourHasher`].
pub type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<NeighbourHasher>>;
/// A set of trace keys, hashed with [`NeighbourHasher`].
pub type KeySet = HashSet<u64, BuildHasherDefault<NeighbourHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_rate_is_close_to_nominal_on_sequential_keys() {
        let t = threshold_for_rate(0.01);
        let n = 1_000_000u64;
        let hits = (0..n).filter(|&k| sample_value(k, 0) < t).count() as f64;
        let rate = hits / n as f64;
        assert!((rate - 0.01).abs() < 0.001, "rate {rate}");
    }

    #[test]
    fn neighbouring_keys_share_a_cache_line_of_buckets_but_not_a_tag() {
        let hash = |k: u64| {
            let mut h = NeighbourHasher::default();
            h.write_u64(k);
            h.finish()
        };
        let base = 0x1234_5678u64 << NEIGHBOUR_BITS;
        let tags: Vec<u64> = (0..4).map(|i| hash(base + i) >> 57).collect();
        for i in 1..4u64 {
            // Same bucket block of four, different slot in it.
            assert_eq!(
                hash(base + i) & !3 & 0xffff_ffff,
                hash(base) & !3 & 0xffff_ffff
            );
            assert_ne!(hash(base + i) & 3, hash(base) & 3);
            assert!(!tags[..i as usize].contains(&tags[i as usize]), "{tags:?}");
        }
        // The next group of four lands elsewhere.
        assert_ne!(
            hash(base + 4) & !3 & 0xffff_ffff,
            hash(base) & !3 & 0xffff_ffff
        );
    }

    /// The cases every language's splitmix64 runs (the BPF program's in
    /// `agents/ebpf-metrics/tests/hash_c.rs`).
    fn fixture_cases() -> Vec<(u64, u64)> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../api-schemas/fixtures/hash/splitmix64.json"
        );
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let doc: serde_json::Value = serde_json::from_str(&text).expect("fixture is JSON");
        let num = |c: &serde_json::Value, f: &str| -> u64 {
            c[f].as_str()
                .unwrap_or_else(|| panic!("{path}: {f} is not a string: {c}"))
                .parse()
                .unwrap_or_else(|e| panic!("{path}: {f} of {c}: {e}"))
        };
        doc["cases"]
            .as_array()
            .expect("cases")
            .iter()
            .map(|c| (num(c, "in"), num(c, "out")))
            .collect()
    }

    #[test]
    fn mix64_matches_the_shared_fixture() {
        let cases = fixture_cases();
        assert!(cases.len() >= 12, "{} cases", cases.len());
        for (input, out) in cases {
            assert_eq!(mix64(input), out, "mix64({input})");
        }
    }

    #[test]
    fn the_generator_yields_mix64_of_each_state() {
        let mut g = SplitMix64(0);
        let first: Vec<u64> = (0..3).map(|_| g.next_u64()).collect();
        // The reference sequence of splitmix64 seeded with 0.
        assert_eq!(
            first,
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        assert_eq!(g.0, GOLDEN_GAMMA.wrapping_mul(3));
    }

    #[test]
    fn threshold_clamps() {
        assert_eq!(threshold_for_rate(2.0), P);
        assert_eq!(threshold_for_rate(0.0), 1);
    }
}
