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

/// The mean curve of several estimators over the same sizes, e.g. the same
/// sampled estimator with independent hashes (salts): `n` samples at rate
/// `R` cost what one at `n R` does, and average out the luck of one draw.
pub struct Mean<E> {
    parts: Vec<E>,
}

impl<E: MrcEstimator> Mean<E> {
    /// Panics if `parts` is empty.
    pub fn new(parts: Vec<E>) -> Self {
        assert!(!parts.is_empty(), "a mean of no estimators");
        Mean { parts }
    }
}

impl<E: MrcEstimator> MrcEstimator for Mean<E> {
    #[inline]
    fn record(&mut self, key: u64, size: u32, op: Op) {
        self.parts.iter_mut().for_each(|p| p.record(key, size, op));
    }

    fn curve(&self) -> Curve {
        let mut curves = self.parts.iter().map(|p| p.curve());
        let mut mean = curves.next().expect("at least one part");
        for c in curves {
            mean.miss_ratio
                .iter_mut()
                .zip(&c.miss_ratio)
                .for_each(|(m, x)| *m += x);
        }
        let n = self.parts.len() as f64;
        mean.miss_ratio.iter_mut().for_each(|m| *m /= n);
        mean
    }

    fn decay(&mut self, factor: f64) {
        self.parts.iter_mut().for_each(|p| p.decay(factor));
    }

    fn footprint_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.footprint_bytes()).sum()
    }

    fn label(&self) -> String {
        format!("{}x {}", self.parts.len(), self.parts[0].label())
    }
}
