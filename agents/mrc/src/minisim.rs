//! Miniature simulation (Waldspurger et al., ATC'17): for a policy that is
//! not a stack algorithm there is no reuse-distance shortcut, so run one
//! cache per size — but scaled down by the sampling rate `R` and fed only
//! the SHARDS-sampled references. A cache of `C * R` units sees the sample
//! the way a cache of `C` units sees the whole stream. With `R = 1` this is
//! the full simulation the miniature one is checked against.
//!
//! [`MiniSim`] samples the stream itself and runs one cache per size of a
//! curve; [`MiniLru`] is one miniature LRU cache fed samples taken elsewhere
//! (the kernel's, at a rate the sampler lowers as the working set grows),
//! which the agent runs at each tenant's allocated size. Both scale a cache
//! with [`miniature_size`].

use crate::curve::{check_sizes, Curve, Unit};
use crate::distinct::Hll;
use crate::error::MrcError;
use crate::estimator::{MrcEstimator, Op};
use crate::hash::{sample_hash, threshold_for_rate, KeySet, P};
use crate::policies::{Lru, Policy, PolicyKind};
use crate::regression::KeyRegression;
use crate::shards::Adjustment;

/// Units of the miniature cache that stands for a cache of `size` units at
/// sampling rate `rate`: `C · R`, at least one.
pub fn miniature_size(size: u64, rate: f64) -> u64 {
    ((size as f64 * rate).round() as u64).max(1)
}

pub struct MiniSim {
    unit: Unit,
    policy: PolicyKind,
    sizes: Vec<u64>,
    threshold: u64,
    rate: f64,
    caches: Vec<Box<dyn Policy + Send>>,
    adjust: Adjustment,
    reg: Option<KeyRegression>,
    /// Which caches missed the current reference (for `reg`).
    missed: Vec<bool>,
    hits: Vec<f64>,
    accesses: f64,
    /// References seen, sampled or not.
    refs: f64,
    nominal: f64,
    salt: u64,
    keys: Option<KeyRate>,
}

/// The sample's real rate, measured on keys: its distinct keys (exact) over
/// the stream's (HyperLogLog).
#[derive(Debug, Clone)]
struct KeyRate {
    stream: Hll,
    sampled: KeySet,
}

/// HyperLogLog precision for [`MiniSim::with_key_rate`]: 2^16 one-byte
/// registers, 0.4% standard error.
pub const KEY_RATE_PRECISION: u32 = 16;

impl MiniSim {
    /// Caches of `max(1, round(C * rate))` units for each size `C`, fed the
    /// references sampled at `rate`. With `adjust`, misses are divided by
    /// the references the sample should have seen at the rate measured on
    /// its keys ([`Self::with_key_rate`], on by default) rather than those it
    /// saw, less the share of the surplus or shortfall that the sampled keys
    /// say is misses ([`Adjustment::Regression`]; see
    /// [`Self::with_adjustment`] for SHARDS_adj's "all hits").
    pub fn new(
        policy: PolicyKind,
        unit: Unit,
        sizes: Vec<u64>,
        rate: f64,
        adjust: bool,
    ) -> Result<Self, MrcError> {
        check_sizes(&sizes)?;
        if !(rate > 0.0 && rate <= 1.0) {
            return Err(MrcError::InvalidParameter(format!(
                "sampling rate {rate} is not in (0, 1]"
            )));
        }
        let nominal = rate;
        let threshold = threshold_for_rate(rate);
        let rate = threshold as f64 / P as f64;
        let caches = sizes
            .iter()
            .map(|&c| policy.build(miniature_size(c, rate)))
            .collect();
        let n = sizes.len();
        let mut m = MiniSim {
            unit,
            policy,
            adjust: Adjustment::None,
            reg: None,
            missed: vec![false; n],
            refs: 0.0,
            nominal,
            salt: 0,
            keys: None,
            hits: vec![0.0; sizes.len()],
            sizes,
            threshold,
            rate,
            caches,
            accesses: 0.0,
        };
        m.set_adjustment(Adjustment::from_flag(adjust));
        Ok(m.with_key_rate(true))
    }

    fn set_adjustment(&mut self, adjust: Adjustment) {
        let sampled = self.threshold < P;
        self.adjust = if sampled { adjust } else { Adjustment::None };
        self.reg =
            (self.adjust == Adjustment::Regression).then(|| KeyRegression::new(self.sizes.len()));
    }

    /// Use another correction than the one `new`'s flag chose (none for a
    /// full simulation). Call before the first reference.
    pub fn with_adjustment(mut self, adjust: Adjustment) -> Self {
        self.set_adjustment(adjust);
        self
    }

    /// One full-size cache per size, every reference.
    pub fn full(policy: PolicyKind, unit: Unit, sizes: Vec<u64>) -> Result<Self, MrcError> {
        Self::new(policy, unit, sizes, 1.0, false)
    }

    /// Sample with another hash of the family (see [`crate::hash::sample_value`]).
    pub fn with_salt(mut self, salt: u64) -> Self {
        self.salt = salt;
        self
    }

    /// Divide by the references a sample of the rate measured on keys
    /// should have seen (the sample's distinct keys over the stream's,
    /// estimated with a HyperLogLog sketch of every reference) instead of
    /// `R` times the stream's. A spatial sample draws keys, so its key count
    /// is what it is: ±1/sqrt(sampled keys) off `R` by chance (2.3% with
    /// 1,900 keys), which moves the whole curve by as much, while the sketch
    /// is within 0.4%. Misses per sampled key times keys per reference is the
    /// ratio estimator of survey sampling with the key count as auxiliary;
    /// with [`Adjustment::Regression`] it is the regression estimator with
    /// both the keys and the references as auxiliaries. No effect without a
    /// correction or on a full simulation. Costs a 64 KiB sketch updated on
    /// every reference and a set of the sampled keys. Call before the first
    /// reference.
    pub fn with_key_rate(mut self, on: bool) -> Self {
        self.keys = (on && self.threshold < P).then(|| KeyRate {
            stream: Hll::new(KEY_RATE_PRECISION),
            sampled: KeySet::default(),
        });
        self
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The sampling rate the curve divides by: `R`, or the rate measured on
    /// keys ([`Self::with_key_rate`]).
    pub fn effective_rate(&self) -> f64 {
        match &self.keys {
            Some(k) => {
                let stream = k.stream.estimate();
                if stream >= 1.0 && !k.sampled.is_empty() {
                    k.sampled.len() as f64 / stream
                } else {
                    self.rate
                }
            }
            None => self.rate,
        }
    }
}

impl MrcEstimator for MiniSim {
    #[inline]
    fn record(&mut self, key: u64, size: u32, _op: Op) {
        self.refs += 1.0;
        if self.threshold < P {
            let h = sample_hash(key, self.salt);
            if let Some(k) = &mut self.keys {
                k.stream.add_hash(h);
            }
            if h & (P - 1) >= self.threshold {
                return;
            }
            if let Some(k) = &mut self.keys {
                k.sampled.insert(key);
            }
        }
        let w = self.unit.weight(size);
        self.accesses += 1.0;
        let caches = self.caches.iter_mut().zip(self.hits.iter_mut());
        for ((cache, hits), missed) in caches.zip(self.missed.iter_mut()) {
            let hit = cache.access(key, w);
            if hit {
                *hits += 1.0;
            }
            *missed = !hit;
        }
        if let Some(reg) = &mut self.reg {
            let missed = &self.missed;
            reg.record(key, |i| missed[i]);
        }
    }

    fn curve(&self) -> Curve {
        let expected = self.refs * self.effective_rate();
        let surplus_hits = |b: f64| (expected - self.accesses) * (1.0 - b);
        let hits: Vec<f64> = match self.adjust {
            Adjustment::None => {
                return crate::curve::from_hits(self.unit, &self.sizes, &self.hits, self.accesses)
            }
            // miss = misses / (N R): the same as adding N R - sampled to the
            // hits and dividing by N R.
            Adjustment::Shards => self.hits.iter().map(|h| h + surplus_hits(0.0)).collect(),
            Adjustment::Regression => {
                let slopes = self.reg.as_ref().and_then(|r| r.slopes());
                let slope = |i: usize| slopes.as_ref().map_or(0.0, |b| b[i]);
                self.hits
                    .iter()
                    .enumerate()
                    .map(|(i, h)| h + surplus_hits(slope(i)))
                    .collect()
            }
        };
        crate::curve::from_hits(self.unit, &self.sizes, &hits, expected)
    }

    /// Decays the counters; the simulated caches keep their contents, as a
    /// real cache would.
    fn decay(&mut self, factor: f64) {
        self.hits.iter_mut().for_each(|h| *h *= factor);
        self.accesses *= factor;
        self.refs *= factor;
        if let Some(reg) = &mut self.reg {
            reg.decay(factor);
        }
    }

    fn footprint_bytes(&self) -> usize {
        self.caches
            .iter()
            .map(|c| c.footprint_bytes())
            .sum::<usize>()
            + self.hits.capacity() * 8
            + self.sizes.capacity() * 8
            + self.reg.as_ref().map_or(0, |r| r.footprint_bytes())
            + self.keys.as_ref().map_or(0, |k| {
                k.stream.footprint_bytes() + crate::policies::set_bytes(&k.sampled)
            })
    }

    fn label(&self) -> String {
        if self.threshold >= P {
            format!("full-sim({})", self.policy.name())
        } else {
            format!(
                "minisim({},R={},{}{})",
                self.policy.name(),
                self.nominal,
                self.adjust.name(),
                if self.keys.is_some() && self.adjust != Adjustment::None {
                    ", key rate"
                } else {
                    ""
                }
            )
        }
    }
}

/// One miniature LRU cache of `size` units (of weight one each), fed references
/// sampled elsewhere with [`crate::hash::sample_value`] at threshold `T`: every
/// sampled reference stands for `1 / R` references of the stream (`R = T / P`).
/// It follows the sampler: a lower threshold drops the keys that left the
/// sample and shrinks the cache to `C · R`; a new size keeps the most recent
/// keys that fit (as a resized cache would keep its warm blocks).
#[derive(Debug, Clone)]
pub struct MiniLru {
    size: u64,
    threshold: u64,
    rate: f64,
    /// None for a cache of size zero (or a sampler that samples nothing), which
    /// misses every reference.
    lru: Option<Lru>,
    hits: f64,
    misses: f64,
}

impl MiniLru {
    /// A cache of `size` units fed samples below `threshold` (in `0..=P`).
    pub fn new(size: u64, threshold: u64) -> Self {
        let mut c = MiniLru {
            size,
            threshold,
            rate: threshold.min(P) as f64 / P as f64,
            lru: None,
            hits: 0.0,
            misses: 0.0,
        };
        c.lru = c.capacity().map(Lru::new);
        c
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    fn capacity(&self) -> Option<u64> {
        (self.size > 0 && self.threshold > 0).then(|| miniature_size(self.size, self.rate))
    }

    /// A new size: the most recent keys that fit stay.
    pub fn resize(&mut self, size: u64) {
        self.size = size;
        self.fit();
    }

    /// Follow the sampler's threshold. Only a lower one changes anything: a
    /// fixed-size sampler never raises it.
    pub fn lower_threshold(&mut self, threshold: u64) {
        if threshold >= self.threshold {
            return;
        }
        self.threshold = threshold;
        self.rate = threshold as f64 / P as f64;
        if let Some(lru) = self.lru.as_mut() {
            lru.retain(|k| crate::hash::sample_value(k, 0) < threshold);
        }
        self.fit();
    }

    fn fit(&mut self) {
        match (self.capacity(), self.lru.as_mut()) {
            (Some(cap), Some(lru)) => lru.resize(cap),
            (cap, _) => self.lru = cap.map(Lru::new),
        }
    }

    /// One sampled reference; `hash` is the value the sampler compared with
    /// its threshold (`sample_value(key, 0)`). Samples at or above the current
    /// threshold (taken before the sampler lowered it) are not in the sample.
    pub fn access(&mut self, key: u64, hash: u64) {
        if hash >= self.threshold {
            return;
        }
        let weight = 1.0 / self.rate;
        let hit = self.lru.as_mut().is_some_and(|lru| lru.access(key, 1));
        if hit {
            self.hits += weight;
        } else {
            self.misses += weight;
        }
    }

    /// Cumulative hits, scaled to the whole stream.
    pub fn hits(&self) -> f64 {
        self.hits
    }

    /// Cumulative misses, scaled to the whole stream.
    pub fn misses(&self) -> f64 {
        self.misses
    }

    /// The keys in the cache, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.lru.iter().flat_map(|l| l.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::Mean;

    /// 200,000 keys read three times in a loop: with a cache as large as the
    /// working set (twice it: the miniature cache must hold every sampled key)
    /// only the first references miss, 1/3. A rate-0.01 sample
    /// holds ~2,000 keys, ±2.2% by chance, and dividing by `R` times the
    /// references carries that error into the curve; dividing by the rate
    /// measured on keys leaves only the sketch's 0.4%.
    #[test]
    fn key_rate_removes_the_luck_of_the_sampled_key_count() {
        let keys = 200_000u64;
        let sizes = vec![2 * keys];
        let mut worst_keys: f64 = 0.0;
        let mut worst_nominal: f64 = 0.0;
        for salt in 0..8 {
            let build = |on| {
                MiniSim::new(PolicyKind::Fifo, Unit::Objects, sizes.clone(), 0.01, true)
                    .unwrap()
                    .with_adjustment(Adjustment::Shards)
                    .with_key_rate(on)
                    .with_salt(salt)
            };
            let (mut with, mut without) = (build(true), build(false));
            for _ in 0..3 {
                for k in 0..keys {
                    with.record(k, 1, Op::Read);
                    without.record(k, 1, Op::Read);
                }
            }
            let third = 1.0 / 3.0;
            worst_keys = worst_keys.max((with.curve().miss_ratio[0] - third).abs());
            worst_nominal = worst_nominal.max((without.curve().miss_ratio[0] - third).abs());
            let measured = with.effective_rate() / with.rate();
            assert!((measured - 1.0).abs() < 0.1, "salt {salt}: {measured}");
        }
        assert!(worst_keys < 0.005, "{worst_keys}");
        assert!(
            worst_nominal > 2.0 * worst_keys,
            "{worst_nominal} vs {worst_keys}"
        );
    }

    #[test]
    fn key_rate_is_off_for_a_full_simulation_and_named_in_the_label() {
        let full = MiniSim::full(PolicyKind::Fifo, Unit::Objects, vec![10]).unwrap();
        assert!(full.keys.is_none());
        let mini = MiniSim::new(PolicyKind::Fifo, Unit::Objects, vec![10], 0.1, true).unwrap();
        assert!(mini.label().contains("key rate"), "{}", mini.label());
        let plain = mini.with_key_rate(false);
        assert!(!plain.label().contains("key rate"));
    }

    #[test]
    fn mean_of_samples_averages_their_curves() {
        let sims = || -> Vec<MiniSim> {
            (0..3)
                .map(|salt| {
                    MiniSim::new(PolicyKind::Lru, Unit::Objects, vec![50, 500], 0.2, true)
                        .unwrap()
                        .with_salt(salt)
                })
                .collect()
        };
        let mut parts = sims();
        let mut mean = Mean::new(sims());
        let mut x = 1u64;
        for _ in 0..20_000 {
            x = crate::hash::mix64(x);
            let key = x % 1000;
            mean.record(key, 1, Op::Read);
            parts.iter_mut().for_each(|p| p.record(key, 1, Op::Read));
        }
        let m = mean.curve();
        for i in 0..2 {
            let avg = parts.iter().map(|p| p.curve().miss_ratio[i]).sum::<f64>() / 3.0;
            assert!((m.miss_ratio[i] - avg).abs() < 1e-12);
        }
        assert!(
            mean.label().starts_with("3x minisim(lru"),
            "{}",
            mean.label()
        );
    }
}
