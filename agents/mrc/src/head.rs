//! Fixed-size SHARDS with an exact head: the curve is exact up to `K` objects and SHARDS's
//! beyond, in memory bounded by `K + S_max` keys whatever the working set.
//!
//! Fixed-size SHARDS keeps `S_max` sampled keys, so on a working set of `W` objects its rate
//! falls to about `S_max / W`, and a sampled distance of `d` stands for `d / R`: at 10 M blocks
//! and `S_max` = 8,192 the smallest distance it can tell apart is ~1,200 blocks, and the hits
//! of a skewed workload at caches below that (often most of its hits) are smeared over the
//! sizes around it (issue 34: MAE 0.027 at 10 M blocks of zipf 0.9, against 0.02 wanted). Yet
//! small distances are cheap to count exactly: an LRU stack that keeps only the `K` most
//! recent keys gives every reuse distance up to `K` exactly (a key it dropped had `K` distinct
//! keys after it, so its distance is above `K` at any cache it matters to). So the curve takes
//! those exactly, and adds to them what SHARDS says of the distances above `K`:
//!
//! `m(c) = m_exact(c)` for `c <= K`, `m(c) = m_exact(K) - (m_shards(K) - m_shards(c))` beyond.
//!
//! Objects only: with byte weights the head's `K` keys cover no fixed size.

use std::collections::{HashMap, VecDeque};

use crate::curve::{check_sizes, Curve, Unit};
use crate::error::MrcError;
use crate::estimator::{MrcEstimator, Op};
use crate::shards::ShardsFixedSize;
use crate::stack::LruStack;

/// The `K` most recent keys and the exact count of reuse distances up to `K`.
#[derive(Debug, Clone)]
struct ExactHead {
    k: usize,
    stack: LruStack,
    /// Key → the sequence number of its last reference, and the references in order: the
    /// oldest current entry is the stack's bottom (the one to drop). Stale entries (a key
    /// referenced again since) are skipped when met and swept out when they pile up.
    last: HashMap<u64, u64>,
    order: VecDeque<(u64, u64)>,
    seq: u64,
    /// `hits[d - 1]`: references at reuse distance `d`, `1 <= d <= K` (f64: decay scales it).
    hits: Vec<f64>,
    refs: f64,
}

impl ExactHead {
    fn new(k: usize) -> Self {
        ExactHead {
            k,
            stack: LruStack::counting(),
            last: HashMap::with_capacity(k + 1),
            order: VecDeque::with_capacity(2 * k + 17),
            seq: 0,
            hits: vec![0.0; k],
            refs: 0.0,
        }
    }

    fn record(&mut self, key: u64) {
        self.refs += 1.0;
        if let Some(d) = self.stack.access(key, 1) {
            // The stack never holds more than K keys, so d <= K.
            self.hits[(d as usize).clamp(1, self.k) - 1] += 1.0;
        }
        self.seq += 1;
        self.last.insert(key, self.seq);
        self.order.push_back((self.seq, key));
        if self.stack.len() > self.k {
            self.drop_bottom();
        }
        if self.order.len() > 2 * self.k + 16 {
            // Amortised O(1): a sweep at most every K + 16 references keeps only current entries.
            let last = &self.last;
            self.order.retain(|&(s, k)| last.get(&k) == Some(&s));
        }
    }

    fn drop_bottom(&mut self) {
        while let Some((s, key)) = self.order.pop_front() {
            if self.last.get(&key) == Some(&s) {
                self.last.remove(&key);
                self.stack.remove(key);
                return;
            }
        }
    }

    /// Hits at each of `sizes` (each at most K).
    fn hits_at(&self, sizes: &[u64]) -> Vec<f64> {
        let mut cumulative = Vec::with_capacity(self.k + 1);
        cumulative.push(0.0);
        for h in &self.hits {
            cumulative.push(cumulative.last().unwrap() + h);
        }
        sizes
            .iter()
            .map(|&c| cumulative[(c as usize).min(self.k)])
            .collect()
    }

    fn footprint_bytes(&self) -> usize {
        self.stack.footprint_bytes()
            + self.last.capacity() * 24
            + self.order.capacity() * 16
            + self.hits.capacity() * 8
    }
}

/// Fixed-size SHARDS whose curve is exact up to `K` objects (see the module's doc).
#[derive(Debug, Clone)]
pub struct ShardsWithHead {
    sizes: Vec<u64>,
    head: ExactHead,
    shards: ShardsFixedSize,
}

impl ShardsWithHead {
    /// Sizes in objects; `head` = `K`, `smax` = SHARDS's `S_max`; `adjust` as for
    /// [`ShardsFixedSize::new`].
    pub fn new(sizes: Vec<u64>, head: usize, smax: usize, adjust: bool) -> Result<Self, MrcError> {
        check_sizes(&sizes)?;
        if head == 0 {
            return Err(MrcError::InvalidParameter(
                "the exact head must hold at least 1 key".into(),
            ));
        }
        Ok(ShardsWithHead {
            head: ExactHead::new(head),
            shards: ShardsFixedSize::new(Unit::Objects, sizes.clone(), smax, adjust)?,
            sizes,
        })
    }

    /// SHARDS's current sampling rate (1 while the working set fits `S_max`).
    pub fn rate(&self) -> f64 {
        self.shards.rate()
    }

    /// The curve at any sizes.
    pub fn curve_at(&self, sizes: &[u64]) -> Curve {
        let k = self.head.k as u64;
        let refs = self.head.refs;
        let exact = |hits: f64| if refs > 0.0 { 1.0 - hits / refs } else { 1.0 };
        let head_hits = self.head.hits_at(sizes);
        let at_k = exact(self.head.hits_at(&[k])[0]);
        let beyond: Vec<u64> = sizes.iter().copied().filter(|&c| c > k).collect();
        let tail = if beyond.is_empty() {
            Vec::new()
        } else {
            let mut grid = vec![k];
            grid.extend(&beyond);
            self.shards.curve_at(&grid).miss_ratio
        };
        let mut floor = 1.0f64;
        let miss_ratio = sizes
            .iter()
            .zip(head_hits)
            .map(|(&c, h)| {
                let m = if c <= k {
                    exact(h)
                } else {
                    let i = 1 + beyond.iter().position(|&b| b == c).expect("in beyond");
                    (at_k - (tail[0] - tail[i])).clamp(0.0, at_k)
                };
                // Monotone: SHARDS's part may wobble by its sampling noise.
                floor = floor.min(m);
                floor
            })
            .collect();
        Curve {
            unit: Unit::Objects,
            sizes: sizes.to_vec(),
            miss_ratio,
        }
    }
}

impl MrcEstimator for ShardsWithHead {
    #[inline]
    fn record(&mut self, key: u64, size: u32, op: Op) {
        self.head.record(key);
        self.shards.record(key, size, op);
    }

    fn curve(&self) -> Curve {
        self.curve_at(&self.sizes)
    }

    fn decay(&mut self, factor: f64) {
        self.head.hits.iter_mut().for_each(|h| *h *= factor);
        self.head.refs *= factor;
        self.shards.decay(factor);
    }

    fn footprint_bytes(&self) -> usize {
        self.head.footprint_bytes() + self.shards.footprint_bytes() + self.sizes.capacity() * 8
    }

    fn label(&self) -> String {
        format!("{}+exact-head(K={})", self.shards.label(), self.head.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::SplitMix64;
    use crate::ExactLru;

    fn skewed(n: usize, blocks: u64, seed: u64) -> Vec<u64> {
        let mut rng = SplitMix64(seed);
        (0..n)
            .map(|_| {
                // A hot tenth drawn 3 times in 4, the rest uniformly.
                let r = rng.next_u64();
                if r % 4 != 0 {
                    (r >> 8) % (blocks / 10)
                } else {
                    (r >> 8) % blocks
                }
            })
            .collect()
    }

    #[test]
    fn exact_up_to_the_head_whatever_the_sample() {
        let sizes: Vec<u64> = vec![16, 64, 100, 256, 1000, 4000, 20_000];
        let mut exact = ExactLru::new(Unit::Objects, sizes.clone()).unwrap();
        // S_max 64: the sample alone knows nothing of distances below ~W/64.
        let mut est = ShardsWithHead::new(sizes.clone(), 256, 64, true).unwrap();
        for k in skewed(200_000, 50_000, 3) {
            exact.record(k, 4096, Op::Read);
            est.record(k, 4096, Op::Read);
        }
        let (e, c) = (exact.curve(), est.curve());
        // The sizes up to the head (256): exact.
        for ((size, got), want) in sizes.iter().zip(&c.miss_ratio).zip(&e.miss_ratio).take(4) {
            assert!((got - want).abs() < 1e-12, "at {size}: {got} vs {want}");
        }
        assert!(est.rate() < 0.01);
        // Monotone beyond the head.
        assert!(c.miss_ratio.windows(2).all(|w| w[1] <= w[0]));
    }

    #[test]
    fn memory_is_bounded_by_the_head_and_the_sample() {
        let sizes = vec![100, 1000];
        let mut est = ShardsWithHead::new(sizes, 512, 512, true).unwrap();
        for k in 0..200_000u64 {
            est.record(k, 4096, Op::Read);
        }
        let small = est.footprint_bytes();
        for k in 200_000..2_000_000u64 {
            est.record(k, 4096, Op::Read);
        }
        // Ten times the keys, no more memory (capacities may round up once).
        assert!(
            est.footprint_bytes() <= 2 * small,
            "{} then {}",
            small,
            est.footprint_bytes()
        );
        assert!(est.head.stack.len() <= 512 && est.head.order.len() <= 2 * 512 + 16);
    }

    #[test]
    fn no_head_is_refused() {
        assert!(ShardsWithHead::new(vec![1], 0, 8, true).is_err());
    }
}
