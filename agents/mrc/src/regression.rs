//! The regression correction for sampled curves: SHARDS_adj generalised.
//!
//! A spatially hashed sample holds some keys and not others, so it sees more
//! or fewer references than `R x` the stream's (`A` against `E`). SHARDS_adj
//! assumes the whole difference is hits (hot keys sampled in or out) and
//! divides the sample's misses by `E`; leaving it unadjusted (misses / `A`)
//! assumes the difference carries misses in the curve's own proportion.
//! Which is right depends on the trace: on CloudPhysics and ARC OLTP hot keys
//! hit, on ARC P3 the keys with many references also miss, and either fixed
//! choice is off by ~0.01 on one of them.
//!
//! The sample itself says which: across the sampled keys, regress each key's
//! misses at a cache size on its references. The slope `b` is how many of a
//! surplus reference's worth are misses, and the miss ratio is
//! `misses / E - b (A - E) / E`: `b = 0` is SHARDS_adj, `b = misses / A` the
//! unadjusted ratio. This is the regression estimator of survey sampling
//! (Cochran, *Sampling Techniques*, 7.1), with the stream's reference count
//! as the auxiliary total known exactly.

use crate::hash::KeyMap;

/// Per-key reference and miss counts of the sampled keys, and the sums the
/// slope needs, kept up to date on every sampled reference.
#[derive(Debug, Clone)]
pub struct KeyRegression {
    sizes: usize,
    index: KeyMap<u32>,
    keys: Vec<u64>,
    /// Per key, `1 + sizes` values: references, then misses at each size.
    /// `f32` keeps the fixed-size estimator under its memory budget; counts
    /// are exact up to 2^24 per key.
    stats: Vec<f32>,
    sum_r: f64,
    sum_rr: f64,
    sum_m: Vec<f64>,
    sum_rm: Vec<f64>,
    /// Keys to make room for at the first reference (not before: an
    /// estimator built and then switched to another correction should not
    /// have allocated for this one).
    reserve: usize,
}

impl KeyRegression {
    pub fn new(sizes: usize) -> Self {
        Self::with_capacity(sizes, 0)
    }

    /// Room for `keys` keys up front: SHARDS fixed-size knows its most, and
    /// growing by doubling would overshoot its memory budget.
    pub fn with_capacity(sizes: usize, keys: usize) -> Self {
        KeyRegression {
            sizes,
            index: KeyMap::default(),
            keys: Vec::new(),
            stats: Vec::new(),
            sum_r: 0.0,
            sum_rr: 0.0,
            sum_m: vec![0.0; sizes],
            sum_rm: vec![0.0; sizes],
            reserve: keys,
        }
    }

    /// One sampled reference to `key`; `missed(i)` says whether it missed at
    /// the `i`-th cache size.
    #[inline]
    pub fn record(&mut self, key: u64, missed: impl Fn(usize) -> bool) {
        let stride = 1 + self.sizes;
        let at = match self.index.get(&key) {
            Some(&i) => i as usize * stride,
            None => {
                if self.keys.capacity() == 0 {
                    self.index.reserve(self.reserve);
                    self.keys.reserve_exact(self.reserve);
                    self.stats.reserve_exact(self.reserve * stride);
                }
                self.index.insert(key, self.keys.len() as u32);
                self.keys.push(key);
                self.stats.resize(self.stats.len() + stride, 0.0);
                self.stats.len() - stride
            }
        };
        let s = &mut self.stats[at..at + stride];
        let r = s[0] as f64;
        let r1 = r + 1.0;
        s[0] = r1 as f32;
        self.sum_r += 1.0;
        self.sum_rr += r1 * r1 - r * r;
        // (r + 1)(m + miss) - r m = m + miss (r + 1)
        for (i, (m, (sum_m, sum_rm))) in s[1..]
            .iter_mut()
            .zip(self.sum_m.iter_mut().zip(self.sum_rm.iter_mut()))
            .enumerate()
        {
            let before = *m as f64;
            if missed(i) {
                *m += 1.0;
                *sum_m += 1.0;
                *sum_rm += before + r1;
            } else {
                *sum_rm += before;
            }
        }
    }

    /// Forget `key` (SHARDS fixed-size evicted it from the sample).
    pub fn remove(&mut self, key: u64) {
        let Some(i) = self.index.remove(&key) else {
            return;
        };
        let stride = 1 + self.sizes;
        let at = i as usize * stride;
        let r = self.stats[at] as f64;
        self.sum_r -= r;
        self.sum_rr -= r * r;
        for j in 0..self.sizes {
            let m = self.stats[at + 1 + j] as f64;
            self.sum_m[j] -= m;
            self.sum_rm[j] -= r * m;
        }
        // Move the last key into the hole.
        let last = self.keys.len() - 1;
        if i as usize != last {
            let moved = self.keys[last];
            self.keys[i as usize] = moved;
            self.stats
                .copy_within(last * stride..(last + 1) * stride, at);
            self.index.insert(moved, i);
        }
        self.keys.pop();
        self.stats.truncate(last * stride);
    }

    /// Multiply every count by `factor` (window decay).
    pub fn decay(&mut self, factor: f64) {
        self.stats
            .iter_mut()
            .for_each(|v| *v = (*v as f64 * factor) as f32);
        self.recompute_sums();
    }

    /// Sums straight from the per-key counts (after decay, where updating
    /// them incrementally would accumulate rounding).
    fn recompute_sums(&mut self) {
        let stride = 1 + self.sizes;
        self.sum_r = 0.0;
        self.sum_rr = 0.0;
        self.sum_m.iter_mut().for_each(|v| *v = 0.0);
        self.sum_rm.iter_mut().for_each(|v| *v = 0.0);
        for s in self.stats.chunks_exact(stride) {
            let r = s[0] as f64;
            self.sum_r += r;
            self.sum_rr += r * r;
            for j in 0..self.sizes {
                let m = s[1 + j] as f64;
                self.sum_m[j] += m;
                self.sum_rm[j] += r * m;
            }
        }
    }

    /// Least-squares slope of misses on references across the sampled keys,
    /// per size, clamped to `[0, 1]` (a reference is at most one miss).
    /// `None` while the keys do not vary in references (no slope to fit).
    pub fn slopes(&self) -> Option<Vec<f64>> {
        let n = self.keys.len() as f64;
        if n < 2.0 {
            return None;
        }
        let var = self.sum_rr - self.sum_r * self.sum_r / n;
        if var <= 1e-9 * self.sum_rr.max(1.0) {
            return None;
        }
        Some(
            (0..self.sizes)
                .map(|j| {
                    let cov = self.sum_rm[j] - self.sum_r * self.sum_m[j] / n;
                    (cov / var).clamp(0.0, 1.0)
                })
                .collect(),
        )
    }

    pub fn footprint_bytes(&self) -> usize {
        crate::policies::map_bytes(&self.index)
            + self.keys.capacity() * 8
            + self.stats.capacity() * 4
            + (self.sum_m.capacity() + self.sum_rm.capacity()) * 8
    }
}

/// Slope at `size` from slopes at `grid` (any order): linear between the
/// nearest grid sizes, flat beyond them. For curves asked at sizes other
/// than those the estimator counted misses at.
pub fn slope_at(grid: &[u64], slopes: &[f64], size: u64) -> f64 {
    let mut below: Option<(u64, f64)> = None;
    let mut above: Option<(u64, f64)> = None;
    for (&g, &b) in grid.iter().zip(slopes) {
        if g <= size && below.is_none_or(|(x, _)| g > x) {
            below = Some((g, b));
        }
        if g >= size && above.is_none_or(|(x, _)| g < x) {
            above = Some((g, b));
        }
    }
    match (below, above) {
        (Some((x0, b0)), Some((x1, b1))) if x1 > x0 => {
            b0 + (b1 - b0) * (size - x0) as f64 / (x1 - x0) as f64
        }
        (Some((_, b)), _) | (None, Some((_, b))) => b,
        (None, None) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_is_zero_when_extra_references_hit_and_one_when_they_miss() {
        // Size 0: only first references miss. Size 1: every reference misses.
        let mut r = KeyRegression::new(2);
        for (key, refs) in [(1u64, 1), (2, 2), (3, 5), (4, 9)] {
            for n in 0..refs {
                r.record(key, |i| i == 1 || n == 0);
            }
        }
        let b = r.slopes().unwrap();
        assert!(b[0].abs() < 1e-12, "{b:?}");
        assert!((b[1] - 1.0).abs() < 1e-12, "{b:?}");
    }

    #[test]
    fn remove_and_decay_keep_the_sums_consistent() {
        let mut r = KeyRegression::new(1);
        let mut x = 7u64;
        for _ in 0..5000 {
            x = crate::hash::mix64(x);
            let key = x % 300;
            r.record(key, |_| x % 3 == 0);
        }
        for key in (0..300).step_by(7) {
            r.remove(key);
        }
        assert!(r.keys.len() < 300 && r.index.len() == r.keys.len());
        let incremental = (r.sum_r, r.sum_rr, r.sum_m[0], r.sum_rm[0]);
        r.recompute_sums();
        assert_eq!(incremental, (r.sum_r, r.sum_rr, r.sum_m[0], r.sum_rm[0]));
        let slopes = r.slopes().unwrap();
        r.decay(0.5);
        assert_eq!(r.sum_r, incremental.0 * 0.5);
        // Uniform scaling leaves the slope alone.
        assert!((r.slopes().unwrap()[0] - slopes[0]).abs() < 1e-9);
        let mut q = KeyRegression::new(1);
        q.record(1, |_| true);
        q.record(2, |_| false);
        q.record(2, |_| true);
        q.remove(1);
        assert_eq!(
            (q.sum_r, q.sum_rr, q.sum_m[0], q.sum_rm[0]),
            (2.0, 4.0, 1.0, 2.0)
        );
    }

    #[test]
    fn slope_interpolates_between_grid_sizes() {
        let grid = [300u64, 100, 200];
        let b = [0.3, 0.1, 0.2];
        assert!((slope_at(&grid, &b, 150) - 0.15).abs() < 1e-12);
        assert_eq!(slope_at(&grid, &b, 50), 0.1);
        assert_eq!(slope_at(&grid, &b, 1000), 0.3);
        assert_eq!(slope_at(&grid, &b, 200), 0.2);
    }
}
