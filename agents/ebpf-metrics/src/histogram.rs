//! Log2 latency histograms as the kernel keeps them: bucket `i` counts
//! latencies in `[2^i, 2^(i+1))` ns, the last bucket everything longer.

use crate::layout::HIST_BUCKETS;
use std::time::Duration;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    pub buckets: [u64; HIST_BUCKETS],
}

impl LatencyHistogram {
    pub const BUCKETS: usize = HIST_BUCKETS;

    /// Lower bound of bucket `i`, in ns.
    pub fn bucket_floor_ns(i: usize) -> u64 {
        1u64 << i.min(63)
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    pub fn is_empty(&self) -> bool {
        self.count() == 0
    }

    /// Add another histogram's counts.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a = a.saturating_add(b);
        }
    }

    /// Counts since `earlier` (saturating, so a counter reset reads as 0).
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut out = *self;
        for (a, b) in out.buckets.iter_mut().zip(earlier.buckets) {
            *a = a.saturating_sub(b);
        }
        out
    }

    /// The `q`-quantile (0..=1) in ns, interpolated linearly inside its
    /// bucket: a log2 bucket only bounds a latency within a factor of two,
    /// and interpolation keeps p50 and p99 from snapping to powers of two.
    /// None when empty.
    pub fn quantile_ns(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let q = if q.is_nan() { 0.5 } else { q.clamp(0.0, 1.0) };
        // Rank of the wanted observation, 1-based.
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0u64;
        for (i, &c) in self.buckets.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if seen + c >= rank {
                let lo = Self::bucket_floor_ns(i) as f64;
                let frac = (rank - seen) as f64 / c as f64;
                return Some(lo + frac * lo);
            }
            seen += c;
        }
        None
    }

    pub fn quantile(&self, q: f64) -> Option<Duration> {
        self.quantile_ns(q)
            .map(|ns| Duration::from_nanos(ns.round() as u64))
    }

    pub fn p50(&self) -> Option<Duration> {
        self.quantile(0.5)
    }

    pub fn p99(&self) -> Option<Duration> {
        self.quantile(0.99)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(pairs: &[(usize, u64)]) -> LatencyHistogram {
        let mut h = LatencyHistogram::default();
        for &(i, c) in pairs {
            h.buckets[i] = c;
        }
        h
    }

    #[test]
    fn empty_has_no_quantiles() {
        assert_eq!(LatencyHistogram::default().quantile_ns(0.5), None);
    }

    #[test]
    fn quantiles_land_in_the_right_bucket() {
        // 100 IOs around 64 us (bucket 16: 65.5..131 us), one slow at ~4 ms.
        let h = hist(&[(16, 99), (22, 1)]);
        let p50 = h.quantile_ns(0.5).unwrap();
        assert!((65_536.0..131_072.0).contains(&p50), "{p50}");
        let p99 = h.quantile_ns(0.99).unwrap();
        assert!((65_536.0..=131_072.0).contains(&p99), "{p99}");
        let max = h.quantile_ns(1.0).unwrap();
        assert!((4_194_304.0..=8_388_608.0).contains(&max), "{max}");
    }

    #[test]
    fn since_and_merge() {
        let a = hist(&[(3, 5), (4, 2)]);
        let b = hist(&[(3, 2)]);
        assert_eq!(a.since(&b), hist(&[(3, 3), (4, 2)]));
        assert_eq!(b.since(&a), LatencyHistogram::default());
        let mut m = b;
        m.merge(&hist(&[(4, 2), (3, 3)]));
        assert_eq!(m, a);
    }
}
