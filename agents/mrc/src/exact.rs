//! Exact LRU miss-ratio curve from every reference's stack distance.

use crate::curve::{check_sizes, from_hits, Curve, Unit};
use crate::error::MrcError;
use crate::estimator::{MrcEstimator, Op};
use crate::histogram::Histogram;
use crate::stack::LruStack;

/// Histogram precision for exact curves: distances below 65,536 units are
/// counted one by one, larger ones in buckets 1/65,536 of their size wide.
pub const EXACT_PRECISION: u32 = 16;

#[derive(Debug, Clone)]
pub struct ExactLru {
    unit: Unit,
    sizes: Vec<u64>,
    stack: LruStack,
    hist: Histogram,
    cold: f64,
}

impl ExactLru {
    pub fn new(unit: Unit, sizes: Vec<u64>) -> Result<Self, MrcError> {
        Self::with_precision(unit, sizes, EXACT_PRECISION)
    }

    /// `precision`: see [`Histogram`]; at 24 every distance below 16 M units
    /// is its own bucket.
    pub fn with_precision(unit: Unit, sizes: Vec<u64>, precision: u32) -> Result<Self, MrcError> {
        check_sizes(&sizes)?;
        Ok(ExactLru {
            unit,
            sizes,
            stack: match unit {
                Unit::Objects => LruStack::counting(),
                Unit::Bytes => LruStack::new(),
            },
            hist: Histogram::new(precision),
            cold: 0.0,
        })
    }

    /// The curve at any sizes, not only those given at construction.
    pub fn curve_at(&self, sizes: &[u64]) -> Curve {
        let hits = self.hist.hits_at(sizes);
        from_hits(self.unit, sizes, &hits, self.hist.total() + self.cold)
    }

    /// Distinct keys seen.
    pub fn unique_keys(&self) -> usize {
        self.stack.len()
    }

    /// Total weight of distinct keys (objects, or bytes at their last size).
    pub fn working_set(&self) -> u64 {
        self.stack.total_weight()
    }
}

impl MrcEstimator for ExactLru {
    #[inline]
    fn record(&mut self, key: u64, size: u32, _op: Op) {
        let w = self.unit.weight(size) as u32;
        match self.stack.access(key, w) {
            Some(d) => self.hist.add(d, 1.0),
            None => self.cold += 1.0,
        }
    }

    fn curve(&self) -> Curve {
        self.curve_at(&self.sizes)
    }

    fn decay(&mut self, factor: f64) {
        self.hist.scale(factor);
        self.cold *= factor;
    }

    fn footprint_bytes(&self) -> usize {
        self.stack.footprint_bytes() + self.hist.footprint_bytes() + self.sizes.capacity() * 8
    }

    fn label(&self) -> String {
        "exact".into()
    }
}
