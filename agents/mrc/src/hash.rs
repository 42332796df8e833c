//! The sampling hash shared by every sampled estimator.
//!
//! SHARDS samples a key when `hash(key) mod P < T`. The hash runs on every
//! reference while only ~1% of them do any further work, so it must be a few
//! cycles: the splitmix64 finalizer is two multiplies and three shifts, and
//! it mixes sequential block numbers (the common case in block traces) well
//! enough that a sample of consecutive blocks is not correlated. The same
//! function is trivial to write in eBPF C, so in-kernel sampling can agree
//! with user space.

/// SHARDS modulus: sampling thresholds live in `0..=P`.
pub const P: u64 = 1 << 24;

/// splitmix64's output function (Steele, Lea, Flood 2014).
#[inline(always)]
pub fn mix64(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `hash(key) mod P`: the value compared against the sampling threshold.
/// `salt` picks another hash of the same family (0 is the default): a
/// different salt is an independent sample, which is how the benchmark
/// measures the spread of sampled curves rather than one draw.
#[inline(always)]
pub fn sample_value(key: u64, salt: u64) -> u64 {
    mix64(key ^ salt) & (P - 1)
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
    fn threshold_clamps() {
        assert_eq!(threshold_for_rate(2.0), P);
        assert_eq!(threshold_for_rate(0.0), 1);
    }
}
