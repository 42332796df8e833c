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
use crate::regression::KeyRegression;
use crate::shards::Adjustment;

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
}

impl MiniSim {
    /// Caches of `max(1, round(C * rate))` units for each size `C`, fed the
    /// references sampled at `rate`. With `adjust`, misses are divided by
    /// the references a rate-`R` sample should have seen rather than those
    /// it saw, less the share of the surplus or shortfall that the sampled
    /// keys say is misses ([`Adjustment::Regression`]; see
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
            .map(|&c| policy.build(((c as f64 * rate).round() as u64).max(1)))
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
            hits: vec![0.0; sizes.len()],
            sizes,
            threshold,
            rate,
            caches,
            accesses: 0.0,
        };
        m.set_adjustment(Adjustment::from_flag(adjust));
        Ok(m)
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
        let expected = self.refs * self.rate;
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
    }

    fn label(&self) -> String {
        if self.threshold >= P {
            format!("full-sim({})", self.policy.name())
        } else {
            format!(
                "minisim({},R={},{})",
                self.policy.name(),
                self.nominal,
                self.adjust.name()
            )
        }
    }
}
