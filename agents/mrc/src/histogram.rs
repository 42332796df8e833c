//! Reuse-distance histogram with log-linear buckets.
//!
//! Distances below `2^precision` get a bucket each (exact); above that a
//! power-of-two range is split into `2^precision` equal buckets, so a bucket
//! is at most `2^-precision` of its distance wide. Byte distances reach
//! gigabytes, where a dense array would not fit and a fixed bucket width
//! would either blur small caches or explode; this keeps both ends precise in
//! `O(2^precision * log(max))` counters. Counts are `f64` because SHARDS
//! rescales them and [`crate::decay`] multiplies them down.

#[derive(Debug, Clone)]
pub struct Histogram {
    precision: u32,
    /// Counts divided by `factor`: rescaling multiplies `factor` alone, so
    /// SHARDS fixed-size, which rescales on every eviction, stays O(1).
    counts: Vec<f64>,
    total: f64,
    factor: f64,
    inv_factor: f64,
}

impl Histogram {
    /// `precision` is clamped to 1..=24.
    pub fn new(precision: u32) -> Self {
        Histogram {
            precision: precision.clamp(1, 24),
            counts: Vec::new(),
            total: 0.0,
            factor: 1.0,
            inv_factor: 1.0,
        }
    }

    #[inline]
    fn index(&self, v: u64) -> usize {
        let p = self.precision;
        if v < (1u64 << p) {
            v as usize
        } else {
            let e = 63 - v.leading_zeros();
            let shift = e - p;
            ((((shift + 1) as u64) << p) + ((v >> shift) - (1u64 << p))) as usize
        }
    }

    /// First distance in bucket `idx` and the bucket's width.
    fn bounds(&self, idx: usize) -> (u64, u64) {
        let p = self.precision;
        let idx = idx as u64;
        if idx < (1u64 << p) {
            (idx, 1)
        } else {
            let shift = (idx >> p) - 1;
            let sub = idx & ((1u64 << p) - 1);
            (((1u64 << p) + sub) << shift, 1u64 << shift)
        }
    }

    /// Count `weight` references at reuse distance `distance`.
    #[inline]
    pub fn add(&mut self, distance: u64, weight: f64) {
        let i = self.index(distance);
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0.0);
        }
        let w = weight * self.inv_factor;
        self.counts[i] += w;
        self.total += w;
    }

    /// Multiply every count by `factor`.
    pub fn scale(&mut self, factor: f64) {
        if factor <= 0.0 {
            self.counts.iter_mut().for_each(|c| *c = 0.0);
            self.total = 0.0;
            self.factor = 1.0;
        } else {
            self.factor *= factor;
            if self.factor < 1e-200 {
                // Fold the factor in before it underflows.
                let f = self.factor;
                self.counts.iter_mut().for_each(|c| *c *= f);
                self.total *= f;
                self.factor = 1.0;
            }
        }
        self.inv_factor = 1.0 / self.factor;
    }

    /// Sum of all counts.
    pub fn total(&self) -> f64 {
        self.total * self.factor
    }

    /// For each cache size `c`, the count of distances `<= c` (a reference
    /// at distance `d` hits in any LRU cache of at least `d` units). Inside a
    /// wide bucket the count is spread evenly over its distances.
    pub fn hits_at(&self, sizes: &[u64]) -> Vec<f64> {
        let mut prefix = Vec::with_capacity(self.counts.len() + 1);
        let mut acc = 0.0;
        prefix.push(0.0);
        for &c in &self.counts {
            acc += c;
            prefix.push(acc);
        }
        sizes
            .iter()
            .map(|&c| {
                let i = self.index(c);
                if i >= self.counts.len() {
                    return acc * self.factor;
                }
                let (lo, width) = self.bounds(i);
                let frac = (c - lo + 1) as f64 / width as f64;
                (prefix[i] + self.counts[i] * frac) * self.factor
            })
            .collect()
    }

    /// Bytes held by the counters.
    pub fn footprint_bytes(&self) -> usize {
        self.counts.capacity() * std::mem::size_of::<f64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_line() {
        let h = Histogram::new(4);
        let mut expect_lo = 0u64;
        for idx in 0..200 {
            let (lo, w) = h.bounds(idx);
            assert_eq!(lo, expect_lo, "bucket {idx}");
            assert_eq!(h.index(lo), idx);
            assert_eq!(h.index(lo + w - 1), idx);
            expect_lo = lo + w;
        }
    }

    #[test]
    fn small_distances_are_exact() {
        let mut h = Histogram::new(8);
        for d in [1u64, 2, 2, 3, 200] {
            h.add(d, 1.0);
        }
        assert_eq!(
            h.hits_at(&[1, 2, 3, 199, 200, 10_000]),
            vec![1.0, 3.0, 4.0, 4.0, 5.0, 5.0]
        );
    }

    #[test]
    fn scaling_is_lazy_but_exact_enough() {
        let mut h = Histogram::new(4);
        h.add(3, 2.0);
        h.scale(0.5);
        h.add(3, 1.0);
        h.scale(0.25);
        assert!((h.total() - 0.5).abs() < 1e-12);
        assert!((h.hits_at(&[3])[0] - 0.5).abs() < 1e-12);
        h.scale(0.0);
        assert_eq!(h.total(), 0.0);
    }

    #[test]
    fn wide_buckets_interpolate() {
        let mut h = Histogram::new(1);
        // Bucket [8, 12) is 4 wide at precision 1.
        h.add(8, 4.0);
        assert_eq!(h.hits_at(&[7, 8, 9, 11]), vec![0.0, 1.0, 2.0, 4.0]);
    }
}
