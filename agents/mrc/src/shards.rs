//! SHARDS: LRU curves from a spatially hashed sample of the keys
//! (Waldspurger et al., FAST'15).
//!
//! A key is sampled when `hash(key) mod P < T`; the sample runs through an
//! exact LRU stack and each distance is scaled by `1/R` (`R = T/P`). Fixed
//! rate keeps `T`; fixed size keeps at most `S_max` keys and lowers `T` to
//! the largest evicted hash, rescaling what was counted to the new rate.
//! SHARDS_adj adds the difference between the references a rate-`R` sample
//! should have seen and those it did see to the smallest distance: a few hot
//! keys sampled in or out otherwise shift the whole curve up or down. The
//! default correction ([`Adjustment::Regression`], see [`crate::regression`])
//! first asks the sample how much of that difference is hits.

use crate::curve::{check_sizes, from_hits, Curve, Unit};
use crate::error::MrcError;
use crate::estimator::{MrcEstimator, Op};
use crate::hash::{sample_value, threshold_for_rate, P};
use crate::histogram::Histogram;
use crate::regression::{slope_at, KeyRegression};
use crate::stack::LruStack;
use std::collections::BinaryHeap;

/// Histogram precision for sampled curves: buckets 1/1024 of their distance
/// wide, far finer than the sampling noise, in under 200 KB even for
/// byte distances of a terabyte.
pub const SHARDS_PRECISION: u32 = 10;

/// How a sampled curve corrects for the sample seeing more or fewer
/// references than `R` times the stream's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Adjustment {
    /// Misses over the references the sample saw.
    None,
    /// SHARDS_adj (Waldspurger et al., FAST'15): the difference is all hits,
    /// i.e. misses over the references a rate-`R` sample should have seen.
    Shards,
    /// The share of the difference that is hits is the regression slope of
    /// misses on references across the sampled keys
    /// ([`crate::regression`]); costs `4 (1 + sizes)` bytes per sampled key.
    #[default]
    Regression,
}

impl Adjustment {
    /// `true` is the default correction, `false` none.
    pub fn from_flag(adjust: bool) -> Self {
        if adjust {
            Adjustment::default()
        } else {
            Adjustment::None
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Adjustment::None => "no adj",
            Adjustment::Shards => "shards adj",
            Adjustment::Regression => "adj",
        }
    }
}

/// What both variants count, and how they turn it into a curve.
#[derive(Debug, Clone)]
struct Sampled {
    unit: Unit,
    sizes: Vec<u64>,
    adjust: Adjustment,
    reg: Option<KeyRegression>,
    stack: LruStack,
    hist: Histogram,
    cold: f64,
    /// References seen (sampled or not), as f64 so decay can shrink it.
    refs: f64,
    /// References since `refs` was last folded in; an integer keeps the
    /// unsampled fast path to one add.
    pending: u64,
    salt: u64,
}

impl Sampled {
    fn new(unit: Unit, sizes: Vec<u64>, adjust: bool) -> Result<Self, MrcError> {
        check_sizes(&sizes)?;
        let mut s = Sampled {
            unit,
            sizes,
            adjust: Adjustment::None,
            reg: None,
            stack: match unit {
                Unit::Objects => LruStack::counting(),
                Unit::Bytes => LruStack::new(),
            },
            hist: Histogram::new(SHARDS_PRECISION),
            cold: 0.0,
            refs: 0.0,
            pending: 0,
            salt: 0,
        };
        s.set_adjustment(Adjustment::from_flag(adjust), 0);
        Ok(s)
    }

    /// `keys`: the most keys the sample will hold, if known.
    fn set_adjustment(&mut self, adjust: Adjustment, keys: usize) {
        self.adjust = adjust;
        self.reg = (adjust == Adjustment::Regression)
            .then(|| KeyRegression::with_capacity(self.sizes.len(), keys));
    }

    /// Run a sampled reference through the stack at rate `rate`. Returns
    /// whether the key is new to the sample.
    #[inline]
    fn sampled(&mut self, key: u64, size: u32, rate: f64) -> bool {
        let w = self.unit.weight(size) as u32;
        let scaled = self
            .stack
            .access(key, w)
            .map(|d| (d as f64 / rate).round() as u64);
        if let Some(reg) = &mut self.reg {
            let sizes = &self.sizes;
            reg.record(key, |i| scaled.is_none_or(|d| d > sizes[i]));
        }
        match scaled {
            Some(d) => {
                self.hist.add(d, 1.0);
                false
            }
            None => {
                self.cold += 1.0;
                true
            }
        }
    }

    fn remove(&mut self, key: u64) {
        self.stack.remove(key);
        if let Some(reg) = &mut self.reg {
            reg.remove(key);
        }
    }

    fn refs(&self) -> f64 {
        self.refs + self.pending as f64
    }

    fn curve_at(&self, sizes: &[u64], rate: f64) -> Curve {
        let mut hits = self.hist.hits_at(sizes);
        let actual = self.hist.total() + self.cold;
        let expected = self.refs() * rate;
        let total = match self.adjust {
            Adjustment::None => actual,
            Adjustment::Shards => {
                hits.iter_mut().for_each(|h| *h += expected - actual);
                expected
            }
            Adjustment::Regression => {
                // Of the surplus (or shortfall), the share `b` is misses.
                let slopes = self.reg.as_ref().and_then(|r| r.slopes());
                let own_grid = sizes == self.sizes.as_slice();
                for (i, (h, &c)) in hits.iter_mut().zip(sizes).enumerate() {
                    let b = match &slopes {
                        Some(b) if own_grid => b[i],
                        Some(b) => slope_at(&self.sizes, b, c),
                        None => 0.0,
                    };
                    *h += (expected - actual) * (1.0 - b);
                }
                expected
            }
        };
        from_hits(self.unit, sizes, &hits, total)
    }

    fn rescale(&mut self, factor: f64) {
        self.hist.scale(factor);
        self.cold *= factor;
    }

    fn decay(&mut self, factor: f64) {
        self.rescale(factor);
        self.refs = self.refs() * factor;
        self.pending = 0;
        if let Some(reg) = &mut self.reg {
            reg.decay(factor);
        }
    }

    fn footprint_bytes(&self) -> usize {
        self.stack.footprint_bytes()
            + self.hist.footprint_bytes()
            + self.sizes.capacity() * 8
            + self.reg.as_ref().map_or(0, |r| r.footprint_bytes())
    }

    fn label(&self) -> &'static str {
        self.adjust.name()
    }
}

/// SHARDS at a fixed sampling rate.
#[derive(Debug, Clone)]
pub struct ShardsFixedRate {
    nominal: f64,
    threshold: u64,
    rate: f64,
    s: Sampled,
}

impl ShardsFixedRate {
    /// `rate` in (0, 1]; it is rounded to a multiple of 1/2^24.
    pub fn new(unit: Unit, sizes: Vec<u64>, rate: f64, adjust: bool) -> Result<Self, MrcError> {
        if !(rate > 0.0 && rate <= 1.0) {
            return Err(MrcError::InvalidParameter(format!(
                "sampling rate {rate} is not in (0, 1]"
            )));
        }
        let threshold = threshold_for_rate(rate);
        Ok(ShardsFixedRate {
            nominal: rate,
            threshold,
            rate: threshold as f64 / P as f64,
            s: Sampled::new(unit, sizes, adjust)?,
        })
    }

    /// Sample with another hash of the family (see [`crate::hash::sample_value`]).
    pub fn with_salt(mut self, salt: u64) -> Self {
        self.s.salt = salt;
        self
    }

    /// Use another correction than the one `new`'s flag chose. Call before
    /// the first reference.
    pub fn with_adjustment(mut self, adjust: Adjustment) -> Self {
        self.s.set_adjustment(adjust, 0);
        self
    }

    /// The rate actually used (`T / P`).
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Feed a reference already known to be in the sample (e.g. filtered by
    /// the eBPF sampler with [`crate::hash::sample_value`] and the same
    /// threshold). Pair with [`Self::add_unsampled`] so SHARDS_adj knows the
    /// full reference count.
    pub fn record_sampled(&mut self, key: u64, size: u32) {
        self.s.pending += 1;
        self.s.sampled(key, size, self.rate);
    }

    /// Count `n` references that the sampler dropped.
    pub fn add_unsampled(&mut self, n: u64) {
        self.s.pending += n;
    }

    /// Keys currently in the sample.
    pub fn sampled_keys(&self) -> usize {
        self.s.stack.len()
    }

    /// Estimated working set: the sample's weight scaled up by `1/R`.
    pub fn working_set(&self) -> u64 {
        (self.s.stack.total_weight() as f64 / self.rate).round() as u64
    }

    pub fn curve_at(&self, sizes: &[u64]) -> Curve {
        self.s.curve_at(sizes, self.rate)
    }
}

impl MrcEstimator for ShardsFixedRate {
    #[inline(always)]
    fn record(&mut self, key: u64, size: u32, _op: Op) {
        self.s.pending += 1;
        if sample_value(key, self.s.salt) < self.threshold {
            self.s.sampled(key, size, self.rate);
        }
    }

    fn curve(&self) -> Curve {
        self.s.curve_at(&self.s.sizes, self.rate)
    }

    fn decay(&mut self, factor: f64) {
        self.s.decay(factor);
    }

    fn footprint_bytes(&self) -> usize {
        self.s.footprint_bytes()
    }

    fn label(&self) -> String {
        format!("shards-fixed-rate(R={},{})", self.nominal, self.s.label())
    }
}

/// SHARDS with at most `S_max` sampled keys: constant memory whatever the
/// working set, the rate adapting down as new keys arrive.
#[derive(Debug, Clone)]
pub struct ShardsFixedSize {
    smax: usize,
    threshold: u64,
    /// Sampled keys by hash value, largest first: the next to evict.
    heap: BinaryHeap<(u32, u64)>,
    s: Sampled,
}

impl ShardsFixedSize {
    pub fn new(unit: Unit, sizes: Vec<u64>, smax: usize, adjust: bool) -> Result<Self, MrcError> {
        if smax == 0 {
            return Err(MrcError::InvalidParameter(
                "S_max must be at least 1".into(),
            ));
        }
        let mut s = Sampled::new(unit, sizes, false)?;
        s.set_adjustment(Adjustment::from_flag(adjust), smax + 1);
        Ok(ShardsFixedSize {
            smax,
            threshold: P,
            heap: BinaryHeap::with_capacity(smax + 1),
            s,
        })
    }

    /// Sample with another hash of the family (see [`crate::hash::sample_value`]).
    pub fn with_salt(mut self, salt: u64) -> Self {
        self.s.salt = salt;
        self
    }

    /// Use another correction than the one `new`'s flag chose. Call before
    /// the first reference.
    pub fn with_adjustment(mut self, adjust: Adjustment) -> Self {
        self.s.set_adjustment(adjust, self.smax + 1);
        self
    }

    /// The current sampling rate `T / P`.
    pub fn rate(&self) -> f64 {
        self.threshold as f64 / P as f64
    }

    pub fn sampled_keys(&self) -> usize {
        self.s.stack.len()
    }

    pub fn curve_at(&self, sizes: &[u64]) -> Curve {
        self.s.curve_at(sizes, self.rate())
    }

    /// Lower the threshold to the largest sampled hash and drop every key at
    /// or above it, then restate the counts at the new rate.
    fn shrink(&mut self) {
        let Some(&(top, _)) = self.heap.peek() else {
            return;
        };
        let old = self.threshold;
        self.threshold = top as u64;
        while let Some(&(h, key)) = self.heap.peek() {
            if (h as u64) < self.threshold {
                break;
            }
            self.heap.pop();
            self.s.remove(key);
        }
        self.s.rescale(self.threshold as f64 / old as f64);
    }
}

impl MrcEstimator for ShardsFixedSize {
    #[inline(always)]
    fn record(&mut self, key: u64, size: u32, _op: Op) {
        self.s.pending += 1;
        let h = sample_value(key, self.s.salt);
        if h >= self.threshold {
            return;
        }
        let rate = self.rate();
        if self.s.sampled(key, size, rate) {
            self.heap.push((h as u32, key));
            if self.s.stack.len() > self.smax {
                self.shrink();
            }
        }
    }

    fn curve(&self) -> Curve {
        self.s.curve_at(&self.s.sizes, self.rate())
    }

    fn decay(&mut self, factor: f64) {
        self.s.decay(factor);
    }

    fn footprint_bytes(&self) -> usize {
        self.s.footprint_bytes() + self.heap.capacity() * std::mem::size_of::<(u32, u64)>()
    }

    fn label(&self) -> String {
        format!("shards-fixed-size(Smax={},{})", self.smax, self.s.label())
    }
}
