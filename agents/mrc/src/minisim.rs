//! Miniature simulation (Waldspurger et al., ATC'17): for a policy that is
//! not a stack algorithm there is no reuse-distance shortcut, so run one
//! cache per size — but scaled down by the sampling rate `R` and fed only
//! the SHARDS-sampled references. A cache of `C * R` units sees the sample
//! the way a cache of `C` units sees the whole stream. With `R = 1` this is
//! the full simulation the miniature one is checked against.

use crate::curve::{check_sizes, Curve, Unit};
use crate::error::MrcError;
use crate::estimator::{MrcEstimator, Op};
use crate::hash::{sample_value, threshold_for_rate, P};
use crate::policies::{Policy, PolicyKind};

pub struct MiniSim {
    unit: Unit,
    policy: PolicyKind,
    sizes: Vec<u64>,
    threshold: u64,
    rate: f64,
    caches: Vec<Box<dyn Policy + Send>>,
    adjust: bool,
    hits: Vec<f64>,
    accesses: f64,
    /// References seen, sampled or not.
    refs: f64,
    nominal: f64,
    salt: u64,
}

impl MiniSim {
    /// Caches of `max(1, round(C * rate))` units for each size `C`, fed the
    /// references sampled at `rate`. With `adjust`, misses are divided by
    /// the references a rate-`R` sample should have seen rather than those
    /// it saw: the SHARDS_adj correction, which assumes the surplus or
    /// shortfall is hits on a few hot keys sampled in or out.
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
            .map(|&c| policy.build(((c as f64 * rate).round() as u64).max(1)))
            .collect();
        Ok(MiniSim {
            unit,
            policy,
            adjust,
            refs: 0.0,
            nominal,
            salt: 0,
            hits: vec![0.0; sizes.len()],
            sizes,
            threshold,
            rate,
            caches,
            accesses: 0.0,
        })
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

    pub fn rate(&self) -> f64 {
        self.rate
    }
}

impl MrcEstimator for MiniSim {
    #[inline]
    fn record(&mut self, key: u64, size: u32, _op: Op) {
        self.refs += 1.0;
        if self.threshold < P && sample_value(key, self.salt) >= self.threshold {
            return;
        }
        let w = self.unit.weight(size);
        self.accesses += 1.0;
        for (cache, hits) in self.caches.iter_mut().zip(self.hits.iter_mut()) {
            if cache.access(key, w) {
                *hits += 1.0;
            }
        }
    }

    fn curve(&self) -> Curve {
        if self.adjust && self.threshold < P {
            // miss = misses / (N R): the same as adding N R - sampled to the
            // hits and dividing by N R.
            let expected = self.refs * self.rate;
            let hits: Vec<f64> = self
                .hits
                .iter()
                .map(|h| h + expected - self.accesses)
                .collect();
            return crate::curve::from_hits(self.unit, &self.sizes, &hits, expected);
        }
        crate::curve::from_hits(self.unit, &self.sizes, &self.hits, self.accesses)
    }

    /// Decays the counters; the simulated caches keep their contents, as a
    /// real cache would.
    fn decay(&mut self, factor: f64) {
        self.hits.iter_mut().for_each(|h| *h *= factor);
        self.accesses *= factor;
        self.refs *= factor;
    }

    fn footprint_bytes(&self) -> usize {
        self.caches
            .iter()
            .map(|c| c.footprint_bytes())
            .sum::<usize>()
            + self.hits.capacity() * 8
            + self.sizes.capacity() * 8
    }

    fn label(&self) -> String {
        if self.threshold >= P {
            format!("full-sim({})", self.policy.name())
        } else {
            format!(
                "minisim({},R={},{})",
                self.policy.name(),
                self.nominal,
                if self.adjust { "adj" } else { "no adj" }
            )
        }
    }
}
