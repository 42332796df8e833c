//! Miss-ratio curves, cache-size grids and the error between two curves.

use crate::error::MrcError;
use serde::Serialize;

/// What a cache size counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// Cache size in objects: every object weighs 1.
    #[default]
    Objects,
    /// Cache size in bytes: an object weighs its size.
    Bytes,
}

impl Unit {
    /// The weight of one object of `size` bytes in this unit.
    #[inline(always)]
    pub fn weight(self, size: u32) -> u64 {
        match self {
            Unit::Objects => 1,
            Unit::Bytes => size as u64,
        }
    }
}

/// How [`sizes_over`] spreads cache sizes over a working set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Spacing {
    /// Geometric between `working_set / 1000` and `working_set`: MRCs have
    /// most of their shape at small sizes, which a linear grid would skip.
    #[default]
    Log,
    /// `working_set * i / n` for `i = 1..=n`.
    Linear,
}

/// `n` distinct cache sizes spanning `working_set` (always ending at it).
pub fn sizes_over(working_set: u64, n: usize, spacing: Spacing) -> Vec<u64> {
    let ws = working_set.max(1);
    let mut out: Vec<u64> = match spacing {
        Spacing::Linear => (1..=n as u64)
            .map(|i| ((ws as u128 * i as u128) / n.max(1) as u128) as u64)
            .collect(),
        Spacing::Log => {
            let lo = (ws as f64 / 1000.0).max(1.0);
            let hi = ws as f64;
            if n <= 1 {
                vec![ws]
            } else {
                (0..n)
                    .map(|i| {
                        let f = i as f64 / (n - 1) as f64;
                        (lo * (hi / lo).powf(f)).round() as u64
                    })
                    .collect()
            }
        }
    };
    out.iter_mut().for_each(|s| *s = (*s).max(1));
    out.dedup();
    out
}

/// A miss-ratio curve: `miss_ratio[i]` is the miss ratio of a cache of
/// `sizes[i]` units.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Curve {
    pub unit: Unit,
    pub sizes: Vec<u64>,
    pub miss_ratio: Vec<f64>,
}

impl Curve {
    /// Mean absolute error against `other` over the common size grid.
    pub fn mae(&self, other: &Curve) -> Result<f64, MrcError> {
        self.check_same_grid(other)?;
        if self.sizes.is_empty() {
            return Ok(0.0);
        }
        let sum: f64 = self
            .miss_ratio
            .iter()
            .zip(&other.miss_ratio)
            .map(|(a, b)| (a - b).abs())
            .sum();
        Ok(sum / self.sizes.len() as f64)
    }

    /// Largest absolute difference against `other`.
    pub fn max_abs_error(&self, other: &Curve) -> Result<f64, MrcError> {
        self.check_same_grid(other)?;
        Ok(self
            .miss_ratio
            .iter()
            .zip(&other.miss_ratio)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max))
    }

    fn check_same_grid(&self, other: &Curve) -> Result<(), MrcError> {
        if self.sizes != other.sizes || self.unit != other.unit {
            return Err(MrcError::SizeMismatch(self.sizes.len(), other.sizes.len()));
        }
        Ok(())
    }
}

/// Turn hit counts per size into a curve. `total` is the number of
/// references the hits are out of; the result is clamped to [0, 1] because
/// sampled estimates (and the SHARDS_adj correction) can overshoot.
pub(crate) fn from_hits(unit: Unit, sizes: &[u64], hits: &[f64], total: f64) -> Curve {
    let miss_ratio = hits
        .iter()
        .map(|&h| {
            if total > 0.0 {
                (1.0 - h / total).clamp(0.0, 1.0)
            } else {
                1.0
            }
        })
        .collect();
    Curve {
        unit,
        sizes: sizes.to_vec(),
        miss_ratio,
    }
}

/// Reject grids the estimators cannot use.
pub(crate) fn check_sizes(sizes: &[u64]) -> Result<(), MrcError> {
    if sizes.is_empty() {
        return Err(MrcError::InvalidParameter("no cache sizes given".into()));
    }
    if sizes.contains(&0) {
        return Err(MrcError::InvalidParameter("cache size 0".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sizes_span_the_working_set() {
        let s = sizes_over(100_000, 24, Spacing::Log);
        assert_eq!(s.len(), 24);
        assert_eq!(*s.last().unwrap(), 100_000);
        assert_eq!(s[0], 100);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn linear_sizes_are_even() {
        assert_eq!(sizes_over(100, 4, Spacing::Linear), vec![25, 50, 75, 100]);
    }

    #[test]
    fn mae_needs_the_same_grid() {
        let a = Curve {
            unit: Unit::Objects,
            sizes: vec![1, 2],
            miss_ratio: vec![0.5, 0.25],
        };
        let b = Curve {
            unit: Unit::Objects,
            sizes: vec![1, 2],
            miss_ratio: vec![0.4, 0.35],
        };
        assert!((a.mae(&b).unwrap() - 0.1).abs() < 1e-12);
        let c = Curve {
            unit: Unit::Objects,
            sizes: vec![1],
            miss_ratio: vec![0.5],
        };
        assert!(a.mae(&c).is_err());
    }
}
