//! Curves over time windows with exponential decay.
//!
//! The controller reacts every 15-30 s; a curve over the whole history would
//! take as long again as the history to notice a new workload. At the end of
//! each window everything counted so far is multiplied by `factor`, so the
//! curve after window `k` weighs window `j`'s references by
//! `factor^(k-j)`. With the default 0.25 the newest window carries at least
//! 75% of the weight, so a change shows up after one window. Only the
//! counts decay: LRU stacks and simulated caches keep their contents, since
//! a key's reuse distance does not depend on when we started looking.

use crate::curve::Curve;
use crate::estimator::{MrcEstimator, Op};

pub const DEFAULT_DECAY: f64 = 0.25;

pub struct Windowed<E> {
    inner: E,
    factor: f64,
    /// References per window; 0 means windows end only by `end_window`.
    window: u64,
    in_window: u64,
}

impl<E: MrcEstimator> Windowed<E> {
    /// `factor` is clamped to [0, 1].
    pub fn new(inner: E, window: u64, factor: f64) -> Self {
        Windowed {
            inner,
            factor: factor.clamp(0.0, 1.0),
            window,
            in_window: 0,
        }
    }

    /// Feed a reference; returns true when it closed a window (the caller
    /// may read the curve first and then call [`Self::start_window`]).
    #[inline]
    pub fn record(&mut self, key: u64, size: u32, op: Op) -> bool {
        self.inner.record(key, size, op);
        self.in_window += 1;
        self.window > 0 && self.in_window >= self.window
    }

    /// Decay what was counted, opening a new window. The agent calls this
    /// on its reaction-interval timer.
    pub fn start_window(&mut self) {
        self.inner.decay(self.factor);
        self.in_window = 0;
    }

    /// The decayed curve.
    pub fn curve(&self) -> Curve {
        self.inner.curve()
    }

    pub fn inner(&self) -> &E {
        &self.inner
    }
}
