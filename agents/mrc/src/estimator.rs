//! The streaming interface every MRC estimator implements.

use crate::curve::Curve;

/// What a reference did. Every op counts as a reference to the key (our
/// caches allocate on write as well as on read); callers that want a
/// read-only curve filter before calling `record`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Read,
    Write,
    Other,
}

/// A streaming miss-ratio-curve estimator, fed one reference at a time.
pub trait MrcEstimator {
    /// One reference to `key`, an object of `size` bytes.
    fn record(&mut self, key: u64, size: u32, op: Op);

    /// The miss-ratio curve so far, at the cache sizes the estimator was
    /// built with.
    fn curve(&self) -> Curve;

    /// Multiply everything counted so far by `factor` (0..=1), so later
    /// references weigh more. See [`crate::decay`].
    fn decay(&mut self, factor: f64);

    /// Bytes held by the estimator's own structures (maps, arrays,
    /// histograms), counted from their capacities.
    fn footprint_bytes(&self) -> usize;

    /// Short label, e.g. `shards-fixed-rate(R=0.01,adj)`.
    fn label(&self) -> String;
}

impl<E: MrcEstimator + ?Sized> MrcEstimator for Box<E> {
    #[inline]
    fn record(&mut self, key: u64, size: u32, op: Op) {
        (**self).record(key, size, op)
    }
    fn curve(&self) -> Curve {
        (**self).curve()
    }
    fn decay(&mut self, factor: f64) {
        (**self).decay(factor)
    }
    fn footprint_bytes(&self) -> usize {
        (**self).footprint_bytes()
    }
    fn label(&self) -> String {
        (**self).label()
    }
}
