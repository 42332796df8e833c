//! A tenant's cache at its allocated size, measured without running it: a miniature LRU
//! simulation (Waldspurger et al., ATC'17, [`lachesis_mrc::minisim::MiniLru`]) fed the same
//! SHARDS samples as the tenant's curve. A cache of `C` blocks sees the whole stream the way
//! one of `C · R` blocks sees a rate-`R` sample, and every sampled reference stands for
//! `1 / R` references.
//!
//! The fixed-size SHARDS estimator lowers `R` as the working set grows; the shadow follows it
//! ([`ShadowCache::set_rate`]): blocks no longer in the sample leave, and the cache shrinks
//! to `C · R`.

use lachesis_ebpf_metrics::threshold_for_rate;
use lachesis_mrc::minisim::MiniLru;

use crate::telemetry::TenantCache;

/// Bytes per simulated block (SHARDS samples 4 KiB blocks).
const BLOCK: u64 = 4096;

#[derive(Debug)]
pub struct ShadowCache {
    size_bytes: u64,
    /// The miniature cache, in blocks.
    mini: MiniLru,
}

impl ShadowCache {
    /// A cache of `size_bytes` fed samples taken at `rate` (in (0, 1]).
    pub fn new(size_bytes: u64, rate: f64) -> Self {
        ShadowCache {
            size_bytes,
            mini: MiniLru::new(
                size_bytes.div_ceil(BLOCK),
                u64::from(threshold_for_rate(rate)),
            ),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// A new allocation: the warm blocks that fit stay (as a resized cache would keep them).
    pub fn resize(&mut self, size_bytes: u64) {
        if size_bytes == self.size_bytes {
            return;
        }
        self.size_bytes = size_bytes;
        self.mini.resize(size_bytes.div_ceil(BLOCK));
    }

    /// Follow the estimator's sampling rate. Only a lower rate changes anything: the kernel's
    /// threshold never goes back up for a fixed-size estimator.
    pub fn set_rate(&mut self, rate: f64) {
        self.mini
            .lower_threshold(u64::from(threshold_for_rate(rate)));
    }

    /// One sampled reference (`hash` is the SHARDS hash the kernel compared, which is
    /// `lachesis_mrc::hash::sample_value(key, 0)`). Samples above the current threshold
    /// (queued before the kernel lowered it) are not in the sample.
    pub fn access(&mut self, key: u64, hash: u32) {
        self.mini.access(key, u64::from(hash));
    }

    /// Cumulative hits and misses, scaled to the whole stream.
    pub fn report(&self) -> TenantCache {
        TenantCache {
            size_bytes: self.size_bytes,
            hits: self.mini.hits().round() as u64,
            misses: self.mini.misses().round() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use lachesis_ebpf_metrics::SHARDS_P;

    /// The kernel's 24-bit SHARDS hash of `key`.
    fn hash(key: u64) -> u32 {
        lachesis_mrc::hash::sample_value(key, 0) as u32
    }

    fn ratio(c: &ShadowCache) -> f64 {
        let r = c.report();
        r.hits as f64 / (r.hits + r.misses) as f64
    }

    /// A loop over `n` blocks, `passes` times, through a cache of `blocks` at `rate`.
    fn run_loop(n: u64, passes: u64, blocks: u64, rate: f64) -> ShadowCache {
        let mut c = ShadowCache::new(blocks * BLOCK, rate);
        for _ in 0..passes {
            for k in 0..n {
                c.access(k, hash(k));
            }
        }
        c
    }

    #[test]
    fn full_rate_is_an_exact_lru() {
        // A loop that fits hits on every pass but the first; one that does not never hits.
        let fits = run_loop(1000, 10, 1000, 1.0);
        assert_eq!(
            fits.report(),
            TenantCache {
                size_bytes: 1000 * BLOCK,
                hits: 9000,
                misses: 1000
            }
        );
        let thrashes = run_loop(1000, 10, 999, 1.0);
        assert_eq!(thrashes.report().hits, 0);
    }

    #[test]
    fn a_sample_scaled_by_the_rate_measures_the_whole_stream() {
        let fits = run_loop(20_000, 10, 24_000, 0.05);
        assert!((ratio(&fits) - 0.9).abs() < 0.02, "{:?}", fits.report());
        let total = fits.report().hits + fits.report().misses;
        assert!(
            (total as f64 / 200_000.0 - 1.0).abs() < 0.1,
            "scaled references {total}"
        );
        assert!(ratio(&run_loop(20_000, 10, 16_000, 0.05)) < 0.05);
    }

    #[test]
    fn an_empty_allocation_misses_everything() {
        let c = run_loop(100, 3, 0, 1.0);
        assert_eq!((c.report().hits, c.report().misses), (0, 300));
    }

    #[test]
    fn resizing_keeps_what_fits_and_a_lower_rate_drops_what_left_the_sample() {
        let mut c = run_loop(1000, 1, 1000, 1.0);
        c.resize(500 * BLOCK);
        // The 500 most recent blocks stayed: a pass over them hits.
        for k in 500..1000 {
            c.access(k, hash(k));
        }
        assert_eq!(c.report().hits, 500);
        c.set_rate(0.5);
        let kept: Vec<u64> = c.mini.keys().collect();
        assert!(kept.len() <= 250 && kept.iter().all(|&k| hash(k) < SHARDS_P / 2));
        c.set_rate(1.0); // never goes back up
        assert_eq!(c.mini.threshold(), u64::from(threshold_for_rate(0.5)));
    }
}
